"""`hami doctor pod`'s preemption line: is --gpu-preemption on, and what would it do for this pod?

The reads (`preemption_facts`): the scheduler's pods (label app.kubernetes.io/component=hami-scheduler,
as the chart and the embedded cluster run them) for the `--gpu-preemption` flag, the nodes, the pods,
PodDisruptionBudgets and PriorityClasses. The decision is the controller's own pure code
(hami.scheduler.preemption.plan.plan) over a usage index rebuilt from the placement annotations, with
HAMi's fit deciding which nodes refuse the pod now. `preemption_line` (pure) words the answer:
which victims it would take on which node, or why none (preemptionPolicy Never, no lower-priority
pods, no set frees enough, a PodDisruptionBudget the eviction would refuse), and that the controller
is off (or could not be told) when it is.
"""

from __future__ import annotations

from collections.abc import Mapping

from hami.device import codec
from hami.device.model import NvidiaConfig
from hami.device.vendorrequest import pod_vendor_requests
from hami.kube.client import ApiError, KubeClient
from hami.scheduler.placement import fit
from hami.scheduler.placement.usage import UsageIndex
from hami.scheduler.preemption import plan as gpupreempt

SCHEDULER_PODS = "app.kubernetes.io/component=hami-scheduler"


def flag_state(scheduler_pods: list[dict]) -> bool | None:
    """True/False from the scheduler containers' args; None when no scheduler pod was found."""
    seen = False
    for p in scheduler_pods:
        for c in (p.get("spec") or {}).get("containers") or []:
            args = [str(a) for a in list(c.get("command") or []) + list(c.get("args") or [])]
            if not any(a.startswith("--scheduler-name") or a == "scheduler" for a in args):
                continue
            seen = True
            for a in args:
                if a == "--gpu-preemption" or a.lower() in ("--gpu-preemption=true", "--gpu-preemption=1"):
                    return True
    return False if seen else None


def preemption_line(enabled: bool | None, verdict: gpupreempt.Plan | gpupreempt.Refusal | str,
                    names: Mapping[str, str]) -> str:
    """One line for the doctor (pure). `names`: victim uid -> namespace/name."""
    if isinstance(verdict, str):
        what = verdict
    elif isinstance(verdict, gpupreempt.Refusal):
        what = f"it would evict nothing: {verdict.reason}"
    elif not verdict.victims:
        what = f"it would evict nothing: the pod fits node {verdict.node} once pods already leaving are gone"
    else:
        victims = ", ".join(names.get(u, u) for u in verdict.victims)
        what = f"it would evict {victims} on node {verdict.node}"
        if verdict.pdb_violations:
            what += (f" ({verdict.pdb_violations} of them protected by a PodDisruptionBudget: the Eviction API "
                     "would refuse, and the preemption would be given up)")
    if enabled is True:
        return f"GPU preemption (--gpu-preemption) is on; {what}"
    state = "off" if enabled is False else "not known to be on (no hami-scheduler pod found)"
    return (f"GPU preemption is {state}: kube-scheduler never preempts for GPU shares alone; with "
            f"scheduler.gpuPreemption.enabled=true {what}")


def _index(nvidia: NvidiaConfig, nodes: list[dict], pods: list[dict]) -> tuple[UsageIndex, dict, dict[str, dict]]:
    index, devices_of = UsageIndex(nvidia), {}
    for n in nodes:
        text = ((n.get("metadata") or {}).get("annotations") or {}).get(codec.REGISTER_ANNOTATION)
        if not text:
            continue
        try:
            devices_of[n["metadata"]["name"]] = codec.decode_node_devices(text)
        except codec.CodecError:
            continue
        index.set_node(n["metadata"]["name"], devices_of[n["metadata"]["name"]])
    by_uid = {}
    for p in pods:
        meta = p.get("metadata") or {}
        node = (meta.get("annotations") or {}).get("hami.io/vgpu-node") or (p.get("spec") or {}).get("nodeName")
        text = (meta.get("annotations") or {}).get(codec.ALLOCATED_ANNOTATION)
        if not node or not text or (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        try:
            devices = codec.decode_pod_devices(text, field=codec.ALLOCATED_ANNOTATION)
        except codec.CodecError:
            continue
        uid = meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"
        index.add_pod(uid, node, devices, namespace=meta.get("namespace") or "default",
                      num_init=len((p.get("spec") or {}).get("initContainers") or []))
        by_uid[uid] = p
    return index, devices_of, by_uid


def decide(pod: dict, nvidia: NvidiaConfig, vendors, nodes: list[dict], pods: list[dict], pdbs: list[dict],
           classes: Mapping[str, Mapping]) -> tuple[gpupreempt.Plan | gpupreempt.Refusal | str, dict[str, str]]:
    """The controller's decision for `pod` on the cluster as read (pure)."""
    meta = pod.get("metadata") or {}
    try:
        requests = pod_vendor_requests(pod, vendors, nvidia)
    except ValueError as exc:
        return f"its GPU request does not parse: {exc}", {}
    if not any(r is not None and (r.__class__ is tuple or r.nums > 0) for r in requests):
        return "it asks for no HAMi GPU", {}
    request = fit.pod_request(requests, len((pod.get("spec") or {}).get("initContainers") or []),
                              meta.get("annotations") or {}, namespace=meta.get("namespace") or "default",
                              vendors=vendors)
    others = [p for p in pods if (p.get("metadata") or {}).get("uid") != meta.get("uid")]
    index, devices_of, by_uid = _index(nvidia, nodes, others)
    failed, facts = {}, {}
    for name, usage in index.nodes.items():
        r = fit.try_pod(usage, request)
        if r.__class__ is str:
            failed[name] = r
        on_node = {u: rec for u in index.pods_on(name) if (rec := index.pod(u)) is not None}
        bound = {u: by_uid[u] for u in on_node if (by_uid[u].get("spec") or {}).get("nodeName") == name}
        facts[name] = gpupreempt.NodeFacts(name, devices_of[name], usage.cordoned, on_node, bound)
    if len(failed) < len(index.nodes):
        return "it fits a node now: preemption is not needed", {}
    names = {u: f"{(p.get('metadata') or {}).get('namespace')}/{(p.get('metadata') or {}).get('name')}"
             for u, p in by_uid.items()}
    return gpupreempt.plan(nvidia, pod, request, failed, facts, pdbs, pods, classes=classes), names


async def preemption_facts(client: KubeClient, pod: dict, nvidia: NvidiaConfig, vendors) -> str:
    """Read what the decision needs and word it."""
    try:
        sched = (await client.list("pods", label_selector=SCHEDULER_PODS)).get("items") or []
    except ApiError:
        sched = []
    nodes = (await client.list("nodes")).get("items") or []
    pods = (await client.list("pods")).get("items") or []
    pdbs = (await client.list("poddisruptionbudgets")).get("items") or []
    try:
        classes = {c["metadata"]["name"]: c for c in (await client.list("priorityclasses")).get("items") or []}
    except ApiError:  # a server without scheduling.k8s.io (or no RBAC): spec.priority alone
        classes = {}
    verdict, names = decide(pod, nvidia, vendors, nodes, pods, pdbs, classes)
    return preemption_line(flag_state(sched), verdict, names)
