"""`hami whatif --timing`: one scenario through the live pieces, for how long scheduling takes (I/O).

The in-process replay (engine.py) answers where pods land; it has no clock. This mode answers
"how long until tonight's batch is bound": the scenario's cluster is loaded into an embedded API
server (`hami.sim`), the real scheduler runs against it (`start_scheduler`: watch-fed cache,
/webhook called by the API server on pod CREATE as kube-apiserver calls it, /filter and /bind over
HTTP, node locks), and `hami.sim.kubescheduler.KubeSchedulerLoop` plays kube-scheduler 1.31 in
front of it (activeQ, backoffQ, unschedulable pool, binding cycles on their own tasks). A stand-in
device plugin answers each bind as the node agent would after Allocate (`bind-phase: success`,
node lock released), after `allocate_delay` seconds.

The queue's pods are created through the API in arrival order, one at a time (`creators=1`, the
order exact) or `creators` at once (a burst, as a Job controller or `kubectl apply` makes; the
order then only roughly kept); the clock starts at the first create. Measured per pod: creation -> first scheduling
attempt (the queue wait), creation -> bound, attempts. The run ends when every pod is bound or parked as
unschedulable after an attempt, or at `limit` seconds.

Deterministic where the loop is: the arrival order and (for a batch scheduled one pod at a time)
the placements, which are compared with the in-process replay's (`same_as_replay`). The seconds
are wall-clock on this machine, with the API server, scheduler and kube-scheduler sharing one
event loop: compare scenarios within one run, not across machines.
"""

from __future__ import annotations

import asyncio
import math
import os
import tempfile
import time
from dataclasses import dataclass, field

import orjson

from hami.config import Config, KubeSettings, SchedulerSettings
from hami.device import codec
from hami.device.codec.pairscore import DevicePairScore, encode_pair_scores
from hami.kube.client import ApiError, KubeClient
from hami.kube.informer import Informer
from hami.kubesched import schedqueue as sq
from hami.sim.apiserver.admission import WebhookAdmission
from hami.sim.apiserver.authn import ADMIN
from hami.sim.apiserver.server import ApiServer
from hami.sim.apiserver.store import Store
from hami.sim.kubescheduler import ExtenderConfig, KubeSchedulerLoop

from .cluster import TERMINAL, Cluster, NodeInfo, holds_devices
from .engine import Result, SchedulerDefaults, apply_changes, build_queue
from .scenario import Plan, Scenario

# Metadata the API server sets itself (a create carrying them is refused or rewritten).
_SERVER_META = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "deletionTimestamp",
                "deletionGracePeriodSeconds", "ownerReferences", "selfLink")


@dataclass
class TimingResult:
    scenario: str
    pods: int = 0  # created (admitted) pods
    denied: int = 0  # refused at creation (the webhook's quota check, a bad pod)
    bound: int = 0
    unschedulable: int = 0  # parked after at least one attempt when the run ended
    unfinished: int = 0  # still queued or in flight at the limit
    makespan: float = 0.0  # first create -> last bind, seconds
    created_in: float = 0.0  # first create -> last create
    wait: list[float] = field(default_factory=list)  # creation -> first attempt, per pod
    to_bound: list[float] = field(default_factory=list)  # creation -> bound, per bound pod
    attempts: int = 0  # scheduling cycles
    retried: int = 0  # pods attempted more than once
    same_as_replay: int = 0  # bound pods on the node the in-process replay chose
    replay_placed: int = 0
    nodes: dict[str, str] = field(default_factory=dict)  # pod -> node ("" = not bound)
    timed_out: bool = False

    @property
    def pods_per_s(self) -> float:
        return self.bound / self.makespan if self.makespan > 0 else 0.0

    def as_dict(self) -> dict:
        return {
            "scenario": self.scenario, "pods": self.pods, "denied": self.denied, "bound": self.bound,
            "unschedulable": self.unschedulable, "unfinished": self.unfinished, "timedOut": self.timed_out,
            "makespanSeconds": round(self.makespan, 4), "createdInSeconds": round(self.created_in, 4),
            "podsPerSecond": round(self.pods_per_s, 2),
            "queueWaitSeconds": _dist(self.wait), "createdToBoundSeconds": _dist(self.to_bound),
            "attempts": self.attempts, "retried": self.retried,
            "sameNodeAsReplay": self.same_as_replay, "replayPlaced": self.replay_placed,
            "nodes": self.nodes,
        }


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    s = sorted(values)
    rank = math.ceil(p / 100.0 * len(s))  # the smallest value with at least p% of values at or below it
    return s[max(0, min(len(s), rank) - 1)]


def _dist(values: list[float]) -> dict[str, float]:
    return {"p50": round(percentile(values, 50), 4), "p99": round(percentile(values, 99), 4),
            "max": round(max(values, default=0.0), 4)}


def render_timing(results: list[TimingResult]) -> str:
    lines = ["", "timing (embedded API server, the scheduler over HTTP, kube-scheduler 1.31 loop):"]
    head = f"{'scenario':<22} {'pods':>5} {'bound':>6} {'unsched':>7} {'batch s':>8} {'pods/s':>7} " \
           f"{'wait p50/p99 s':>15} {'bound p50/p99 s':>16} {'tries':>6} {'=replay':>8}"
    lines.append(head)
    for r in results:
        wait = f"{percentile(r.wait, 50):.3f}/{percentile(r.wait, 99):.3f}"
        bound = f"{percentile(r.to_bound, 50):.3f}/{percentile(r.to_bound, 99):.3f}"
        same = f"{r.same_as_replay}/{r.replay_placed}"
        lines.append(f"{r.scenario[:22]:<22} {r.pods:>5} {r.bound:>6} {r.unschedulable:>7} {r.makespan:>8.3f} "
                     f"{r.pods_per_s:>7.1f} {wait:>15} {bound:>16} {r.attempts:>6} {same:>8}")
        if r.denied:
            lines.append(f"  {r.denied} pod(s) refused at creation (admission)")
        if r.timed_out:
            lines.append(f"  stopped at the time limit with {r.unfinished} pod(s) still queued or in flight")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- objects


def node_object(node: NodeInfo) -> dict:
    """The Node as its agent would have registered it (the scenario's settings applied)."""
    annos = {
        codec.REGISTER_ANNOTATION: codec.encode_node_devices(node.devices),
        codec.HANDSHAKE_ANNOTATION: codec.encode_handshake_requesting(time.time(), None),
    }
    if node.cordoned:
        annos[codec.CORDON_ANNOTATION] = codec.encode_device_cordon(sorted(node.cordoned))
    if node.pair_scores:
        annos[codec.PAIR_SCORE_ANNOTATION] = encode_pair_scores(
            DevicePairScore(u, dict(s)) for u, s in sorted(node.pair_scores.items()))
    spec: dict = {}
    if node.unschedulable:
        spec["unschedulable"] = True
    if node.taints:
        spec["taints"] = [{"key": k, "value": v, "effect": e} for k, v, e in node.taints]
    slots = sum(d.count for d in node.devices)
    alloc = {"nvidia.com/gpu": str(slots)}
    for r, v in node.allocatable.items():  # what kube-scheduler's NodeResourcesFit reads
        alloc[r] = f"{v}m" if r == "cpu" else str(v)
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node.name, "labels": dict(node.labels), "annotations": annos},
            "spec": spec,
            "status": {"allocatable": alloc, "capacity": dict(alloc),
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def creatable(pod: dict) -> dict:
    """`pod` as a create body: what the server sets itself taken out, status dropped."""
    body = orjson.loads(orjson.dumps(pod))
    meta = body.setdefault("metadata", {})
    for k in _SERVER_META:
        meta.pop(k, None)
    body.pop("status", None)
    return body


# --------------------------------------------------------------------------- run


class _TimedLoop(KubeSchedulerLoop):
    """The kube-scheduler loop, noting when each pod's first scheduling cycle starts."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.first_attempt: dict[str, float] = {}
        self.rejected: set[str] = set()  # pods whose last cycle ended in a rejection (not an error)

    async def schedule_one(self, http, pod, *, on_assumed=None):
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        self.first_attempt.setdefault(key, self.clock())
        result = await super().schedule_one(http, pod, on_assumed=on_assumed)
        (self.rejected.add if result else self.rejected.discard)(key)
        return result

    def unschedulable(self, key: str) -> bool:
        """Rejected and waiting: parked, or (kube-scheduler 1.31 backs off an extender-only rejection)
        backing off after a rejection; a replay frees nothing, so its retries only repeat it."""
        where = self.queue.location(key)
        return bool(self.stats.attempts.get(key)) and (
            where == sq.UNSCHEDULABLE or (where == sq.BACKOFF and key in self.rejected))


def _device_plugin(store: Store, delay: float, tasks: set[asyncio.Task]):
    """Informer handler: a pod bound with bind-phase allocating gets what Allocate writes."""
    done: set[str] = set()

    async def allocate(ns: str, name: str, node: str) -> None:
        if delay > 0:
            await asyncio.sleep(delay)
        try:
            store.patch("pods", ns, name, orjson.dumps({"metadata": {"annotations": {
                codec.BIND_PHASE_ANNOTATION: "success"}}}), "application/merge-patch+json")
            store.patch("nodes", "", node, orjson.dumps({"metadata": {"annotations": {
                codec.NODE_LOCK_ANNOTATION: None}}}), "application/merge-patch+json")
        except ApiError:
            pass  # the pod or node went away meanwhile

    def on_pod(etype, old, new):
        if new is None:
            return
        meta = new.get("metadata") or {}
        node = (new.get("spec") or {}).get("nodeName")
        phase = (meta.get("annotations") or {}).get(codec.BIND_PHASE_ANNOTATION)
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if node and phase == "allocating" and key not in done:
            done.add(key)
            t = asyncio.get_running_loop().create_task(allocate(meta["namespace"], meta["name"], node))
            tasks.add(t)
            t.add_done_callback(tasks.discard)

    return on_pod


def _load(store: Store, cluster: Cluster, nodes: dict[str, NodeInfo], scenario: Scenario, taken: set[str],
          namespaces: set[str]) -> None:
    have = {e.obj["metadata"]["name"] for e in store.iter_entries("namespaces")}
    for ns in sorted(namespaces - have):
        store.create("namespaces", "", {"metadata": {"name": ns}})
    for name in sorted(nodes):
        store.create("nodes", "", node_object(nodes[name]))
    for p in cluster.pods:  # the pods that stay: holding their devices, or any pod bound to a node
        where = p.node if holds_devices(p) else p.bound_node
        if not where or where not in nodes or p.phase in TERMINAL or p.uid in taken:
            continue
        body = creatable(p.obj)
        if holds_devices(p):
            body["metadata"].setdefault("annotations", {})[codec.BIND_PHASE_ANNOTATION] = "success"
        body.setdefault("spec", {})["nodeName"] = where
        store.create("pods", p.namespace, body)
        store.patch("pods", p.namespace, p.name, orjson.dumps({"status": {"phase": p.phase or "Running"}}),
                    "application/merge-patch+json", subresource="status")
    quotas: dict[tuple[str, str], dict[str, str]] = {}
    for q in cluster.quotas:
        quotas[(q.namespace, q.name)] = {k: str(v) for k, v in q.hard.items()}
    for qc in scenario.changes.quotas:
        hard = {}
        if qc.memory is not None:
            hard[f"limits.{cluster.nvidia.resource_memory_name}"] = str(qc.memory)
        if qc.cores is not None:
            hard[f"limits.{cluster.nvidia.resource_core_name}"] = str(qc.cores)
        quotas[(qc.namespace, "whatif-quota")] = hard
    for (ns, name), hard in sorted(quotas.items()):
        store.create("resourcequotas", ns, {"metadata": {"name": name, "namespace": ns}, "spec": {"hard": hard}})


def _scheduler_config(cluster: Cluster, scenario: Scenario, defaults: SchedulerDefaults, kubeconfig: str) -> Config:
    """The scheduler role's settings for a timed run: the scenario's policies over the defaults."""
    policy = scenario.changes
    return Config(kube=KubeSettings(kubeconfig=kubeconfig), nvidia=cluster.nvidia, node_configs=cluster.node_configs,
                  scheduler=SchedulerSettings(
                      http_bind="127.0.0.1:0", metrics_bind_address="", scheduler_name=defaults.scheduler_name,
                      node_scheduler_policy=policy.node_policy or defaults.node_policy,
                      gpu_scheduler_policy=policy.gpu_policy or defaults.gpu_policy,
                      force_overwrite_default_scheduler=defaults.force_overwrite_default_scheduler,
                      # This server issues no tokens, so the scheduler calls it as system:admin: that is the
                      # account whose Bindings carry placements here.
                      trusted_placement_writers=(ADMIN["username"],)))


def _tally(out: TimingResult, created: dict[str, float], loop, start: float, replay: Result | None) -> None:
    """Per pod: the wait for its first attempt, the time to bound or its end state, its attempts; the
    makespan; how many placements match the instant replay's."""
    stats = loop.stats
    out.pods = len(created)
    for key, t0 in created.items():
        node = stats.node_of.get(key, "")
        out.nodes[key] = node
        if key in loop.first_attempt:
            out.wait.append(loop.first_attempt[key] - t0)
        if key in stats.bound_at:
            out.bound += 1
            out.to_bound.append(stats.bound_at[key] - t0)
        elif loop.unschedulable(key):
            out.unschedulable += 1
        else:
            out.unfinished += 1
        n = stats.attempts.get(key, 0)
        out.attempts += n
        if n > 1:
            out.retried += 1
    out.makespan = (max(stats.bound_at[k] for k in created if k in stats.bound_at) - start) if out.bound else 0.0
    if replay is not None:
        placed = {o.pod: o.node for o in replay.outcomes if o.node}
        out.replay_placed = len(placed)
        out.same_as_replay = sum(1 for k, n in out.nodes.items() if n and placed.get(k) == n)


async def _create_pods(player: KubeClient, pods: list[dict], creators: int, clock, out: TimingResult) -> dict:
    """Create the queue's pods (`creators` at a time): "ns/name" -> when each was created, in queue order;
    a creation the API refuses (the webhook, a quota) counts in `out.denied`."""
    created: dict[str, float] = {}
    order = {f"{b['metadata'].get('namespace') or 'default'}/{b['metadata']['name']}": i for i, b in enumerate(pods)}
    gate = asyncio.Semaphore(max(1, creators))

    async def create(body: dict) -> None:
        meta = body["metadata"]
        ns = meta.get("namespace") or "default"
        async with gate:
            try:
                await player.create("pods", body, ns)
            except ApiError:
                out.denied += 1
                return
        created[f"{ns}/{meta['name']}"] = clock()

    if creators <= 1:
        for body in pods:
            await create(body)
    else:
        await asyncio.gather(*(create(b) for b in pods))
    return dict(sorted(created.items(), key=lambda kv: order[kv[0]]))  # report in arrival order


async def run_timed(cluster: Cluster, scenario: Scenario, plan: Plan,
                    defaults: SchedulerDefaults = SchedulerDefaults(), replay: Result | None = None, *,
                    limit: float = 120.0, allocate_delay: float = 0.0, creators: int = 1,
                    queue_timings: sq.QueueTimings | None = None) -> TimingResult:
    """Schedule the scenario's queue through the embedded cluster; see the module docstring."""
    nodes, removed = apply_changes(cluster, scenario.changes)
    queue, taken = build_queue(cluster, scenario, plan, removed, defaults)
    pods = [creatable(q.pod) for q in queue]
    for body in pods:
        if scenario.changes.scoring_weights:
            body["metadata"].setdefault("annotations", {}).setdefault(
                codec.SCORING_WEIGHTS_ANNOTATION, scenario.changes.scoring_weights)
    namespaces = {p.namespace for p in cluster.pods} | {q.namespace for q in cluster.quotas} | {
        q.namespace for q in scenario.changes.quotas} | {b["metadata"].get("namespace") or "default" for b in pods}
    out = TimingResult(scenario.name)
    store = Store(watch_window=max(10000, 4 * (len(pods) + len(cluster.pods))))
    _load(store, cluster, nodes, scenario, taken, namespaces)
    server = ApiServer(store, "127.0.0.1", 0)
    await server.start()
    tmp = tempfile.mkdtemp(prefix="hami-whatif-")
    kubeconfig = server.write_kubeconfig(os.path.join(tmp, "kubeconfig"))
    from hami.scheduler.role import start_scheduler  # the scheduler role: only this mode needs it

    sched = await start_scheduler(_scheduler_config(cluster, scenario, defaults, kubeconfig), serve_metrics_too=False)
    player = await KubeClient.from_settings(KubeSettings(kubeconfig=kubeconfig, qps=0, burst=1000), role="sim")
    loop_client = await KubeClient.from_settings(KubeSettings(kubeconfig=kubeconfig, qps=50, burst=100), role="sim")
    stop = asyncio.Event()
    background: list[asyncio.Task] = []
    alloc_tasks: set[asyncio.Task] = set()
    try:
        if not await sched.wait_synced(30):
            raise RuntimeError("whatif --timing: the scheduler's caches did not sync")
        if sched.access is not None:
            await sched.access.wait_answered(10)
        # Every client here is the server's admin, standing for hami's own accounts: their Bindings
        # (which carry the placement) skip the webhook, as the chart's matchConditions skip hami's.
        server.admission = WebhookAdmission(sched.webhook_url + "/webhook", skip_users=(ADMIN["username"],))
        plugin = Informer(player, "pods", handler=_device_plugin(store, allocate_delay, alloc_tasks))
        background.append(asyncio.create_task(plugin.run(stop), name="whatif:device-plugin"))
        loop = _TimedLoop(loop_client, ExtenderConfig(sched.url), defaults.scheduler_name,
                          timings=queue_timings or sq.QueueTimings())
        background.append(asyncio.create_task(loop.run(stop), name="whatif:kube-scheduler"))
        await plugin.wait_synced(30)
        await loop.pods.wait_synced(30)
        await loop.nodes.wait_synced(30)
        start = loop.clock()
        created = await _create_pods(player, pods, creators, loop.clock, out)
        out.created_in = (max(created.values()) - start) if created else 0.0
        deadline = start + limit
        stats = loop.stats
        while True:
            waiting = [k for k in created if k not in stats.bound_at and not loop.unschedulable(k)]
            if not waiting:
                break
            if loop.clock() > deadline:
                out.timed_out = True
                break
            await asyncio.sleep(0.01)
        _tally(out, created, loop, start, replay)
        return out
    finally:
        stop.set()  # the informers and the loop end on stop; cancelling them would orphan their watches
        if background:
            await asyncio.wait(background, timeout=10)
        for t in background + list(alloc_tasks):
            t.cancel()
        await asyncio.gather(*background, *alloc_tasks, return_exceptions=True)
        await loop_client.close()
        await player.close()
        await sched.close()
        await server.stop()
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)
