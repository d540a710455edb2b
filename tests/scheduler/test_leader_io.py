"""--leader-elect with two scheduler replicas on one Lease: exactly one becomes leader, only the
leader writes handshakes, and both answer /filter."""

from __future__ import annotations

from tests.kube.helpers import eventually, node_obj, pod_obj
from tests.kube.scheduler_env import start_env, stop_env


async def test_only_the_leader_writes_handshakes(apiserver):
    a = await start_env(apiserver, [node_obj("n0"), node_obj("n1")], identity="replica-a", leader_elect=True,
                        leader_elect_resource_namespace="default")
    b = await start_env(apiserver, identity="replica-b", leader_elect=True, leader_elect_resource_namespace="default")
    try:
        await eventually(lambda: a.sched.leader.is_leader or b.sched.leader.is_leader, timeout=10)
        leader, follower = (a, b) if a.sched.leader.is_leader else (b, a)
        assert not follower.sched.leader.is_leader
        await eventually(lambda: leader.sched.handshaker.writes == 2, timeout=10)
        assert follower.sched.handshaker.writes == 0
        lease = apiserver.store.get("leases.coordination.k8s.io", "default", "hami-scheduler")
        assert lease["spec"]["holderIdentity"] == leader.sched.leader.identity
        for env in (a, b):
            pod = env.create_pod(pod_obj(f"p-{id(env)}", mem=10))
            out = await env.filter(pod, ["n0", "n1"])
            assert out["Error"] == "" and len(out["NodeNames"]) == 1 and out["NodeNames"][0] in ("n0", "n1"), out
    finally:
        await stop_env(a)
        await stop_env(b)
