"""The extender's /prioritize and /preempt under hostile bodies:
- /prioritize with `Nodes.items` holding something other than Node objects (`["x"]`) answers HTTP 400
  with an `Error` naming the item, never a 500, and the scheduler keeps scoring;
- /preempt does work linear in the victims it is handed: membership tests over the candidate list are
  counted with UIDs that count their own comparisons, so a 100,000-victim request cannot spend
  10^10 comparisons on the event loop (counted, not timed: deterministic under any load)."""

from __future__ import annotations

import orjson
import pytest

from hami.scheduler.extender import verbs
from hami.scheduler.extender.hamiflow import patch_at_filter
from tests.kube.helpers import pod_obj
from tests.kube.scheduler_env import running_env
from tests.reliability._record import record
from tests.sim._kubesched import gpu_node

pytestmark = pytest.mark.timeout(60)


async def post(env, verb: str, body: bytes) -> tuple[int, dict]:
    async with env.http.post(f"{env.sched.url}/{verb}", data=body) as r:
        return r.status, orjson.loads(await r.read())


async def test_prioritize_with_non_node_items_is_a_400_naming_the_item(apiserver):
    async with running_env(apiserver, [gpu_node("n0")]) as env:
        status, out = await post(env, "prioritize", orjson.dumps(
            {"Pod": pod_obj("p", mem=1000), "Nodes": {"items": ["x"]}}))
        assert status == 400
        assert out["Error"] == "extender args: Nodes.items[0]: expected an object, got string"
        status, out = await post(env, "prioritize", orjson.dumps(
            {"Pod": pod_obj("p", mem=1000), "Nodes": {"items": [{"metadata": {"name": "n0"}}]}}))
        assert (status, out) == (200, [{"Host": "n0", "Score": 10}])


class CountingUid(str):
    """A UID that counts how often it is compared for equality (a list scan compares every element)."""

    eq_calls = 0

    def __eq__(self, other):
        CountingUid.eq_calls += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


async def test_preempt_compares_victims_linearly(apiserver, monkeypatch):
    n = 3000
    decode = verbs.victims_arg
    monkeypatch.setattr(verbs, "victims_arg", lambda args: {
        node: [CountingUid(u) for u in uids] for node, uids in decode(args).items()})
    async with running_env(apiserver, [gpu_node("n0")]) as env:
        patch_at_filter(env.sched.extender)
        placed = env.create_pod(pod_obj("placed", mem=40000))
        assert (await env.filter(placed, ["n0"]))["NodeNames"] == ["n0"]
        preemptor = pod_obj("urgent", mem=20480)
        preemptor["spec"]["priority"] = 1000
        victims = [{"UID": f"gone-{i:06d}"} for i in range(n)] + [{"UID": placed["metadata"]["uid"]}]
        CountingUid.eq_calls = 0
        status, out = await post(env, "preempt", orjson.dumps(
            {"Pod": preemptor, "NodeNameToMetaVictims": {"n0": {"Pods": victims, "NumPDBViolations": 0}}}))
        assert status == 200
        assert out == {"NodeNameToMetaVictims": {"n0": {"Pods": [{"UID": placed["metadata"]["uid"]}],
                                                        "NumPDBViolations": 0}}}
        # a list scan per victim would be n^2/2 = 4.5 million comparisons; a set lookup a handful
        assert CountingUid.eq_calls <= 4 * n, CountingUid.eq_calls
        record("/preempt with many victims", victims=n + 1, equality_comparisons=CountingUid.eq_calls)
