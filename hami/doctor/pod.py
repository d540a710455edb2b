"""`hami doctor pod NAMESPACE/NAME [--json]`: why is this pod Pending?

    hami doctor pod default/train-1 [--kubeconfig FILE] [--scheduler-url https://10.0.0.5:443]
                    [--scheduler-name hami-scheduler] [--hami-namespace NS] [--json]

HAMi's namespace and device config are read from the cluster: the chart's device ConfigMap
(label app.kubernetes.io/component=hami-scheduler, key device-config.yaml) gives both, so custom
resource names are recognised; --hami-namespace picks the installation when there are several.

Gathers the pod, its events, the nodes, the namespace's ResourceQuotas and the scheduler's health
(`hami.doctor.gather`), walks the runbook's decision tree (`hami.doctor.tree.diagnose_pod`) and
prints the leaf reached, the evidence and the fix; for a pod that is not fine, `whatif:` names the
one change (split count, memory scaling, a policy, uncordoning GPUs, lifting the quota) under which
the scheduler's own code would place it (`hami.whatif.suggest.single_change_fits`); `preemption:` says whether
--gpu-preemption is on and which victims it would take for this pod, or why none (hami.doctor.preemption);
`scale-up:` says whether Cluster Autoscaler could add a node for it, and why not (hami.doctor.scaleup).
Exit code 0 when the pod is fine, 1 when a
problem leaf was reached, 2 on usage errors.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time

import orjson

from hami.doctor import dra, gather
from hami.doctor.preemption import preemption_facts
from hami.doctor.tree import Diagnosis, PodFacts, diagnose_pod, render_diagnosis
from hami.dra import podclaims
from hami.kube.client import ApiError
from hami.kubesched import cel
from hami.scheduler.admission import gpumode

# The diagnosis proper (pure, and for a DRA pod every tenant's CEL selector on every device) runs in
# a thread, so a caller's event loop (the web UI's) keeps serving; its selectors stop at this deadline.
DIAGNOSIS_DEADLINE_S = 5.0

OK_LEAVES = ("not-pending",)


def configure(parser: argparse.ArgumentParser) -> None:
    """The argument and options are the flag table's (hami.config.flagtable, command "doctor pod")."""
    from hami.cli.flags import add_command_flags

    add_command_flags(parser, "doctor pod")


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("pod", help="walk the debugging decision tree for one pod",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    configure(p)
    p.set_defaults(doctor_main=main)
    return p


async def diagnose(client, args: argparse.Namespace, now: float | None = None) -> Diagnosis:
    d, pod = await _diagnose(client, args, now)
    mode = gpu_mode_line(pod)
    return dataclasses.replace(d, setup=(*d.setup, mode)) if mode else d


def gpu_mode_line(pod: dict) -> str:
    """With --dra: which GPU mode the webhook gave the pod and why (admission.gpumode's record)."""
    annos = (pod.get("metadata") or {}).get("annotations") or {}
    text = annos.get(gpumode.DECISION_ANNOTATION)
    if not isinstance(text, str) or not text:
        return ""
    return f"GPU mode {text[:300]} (the webhook's decision at admission)"


async def _diagnose(client, args: argparse.Namespace, now: float | None) -> tuple[Diagnosis, dict]:
    ns, _, name = args.pod.rpartition("/")
    ns = ns or "default"
    now = time.time() if now is None else now
    pod = await client.get_pod(ns, name)
    if dra.uses_claims(pod) and not (pod.get("spec") or {}).get("nodeName") and \
            (pod.get("status") or {}).get("phase", "Pending") == "Pending":
        return await _diagnose_dra(client, pod), pod
    inst = await gather.installation(client, args)
    cfg = inst.nvidia
    facts = PodFacts(
        pod=pod,
        events=await gather.pod_events(client, ns, name, (pod.get("metadata") or {}).get("uid", "")),
        scheduler=await gather.scheduler_fact(client, args, now, inst.namespace),
        nodes=await gather.list_nodes(client, cfg.resource_count_name),
        quotas=await gather.list_quotas(client, ns),
        now=now,
        scheduler_name=args.scheduler_name,
        nvidia=cfg,
        lock_timeout=gather.lock_timeout(args),
        hami_namespace=inst.namespace,
        vendors=inst.vendors,
    )
    d = await off_loop(diagnose_pod, facts)
    setup = (f"HAMi in namespace {inst.namespace}, device config from {inst.source} "
             f"(resource {cfg.resource_count_name})", *inst.notes)
    return dataclasses.replace(d, setup=setup), pod


async def off_loop(fn, *args, seconds: float = DIAGNOSIS_DEADLINE_S):
    """`fn(*args)` in a thread, its CEL selectors stopped after `seconds` (hami.kubesched.cel)."""
    def bounded():
        with cel.deadline(seconds, time.monotonic):
            return fn(*args)
    return await asyncio.to_thread(bounded)


async def _diagnose_dra(client, pod: dict) -> Diagnosis:
    """A pending pod with DRA claims: the allocator's verdict per node (hami.doctor.dra)."""
    claims = (await client.list("resourceclaims")).get("items") or []
    slices = (await client.list("resourceslices")).get("items") or []
    classes = (await client.list("deviceclasses")).get("items") or []
    nodes = (await client.list("nodes")).get("items") or []
    ns = (pod.get("metadata") or {}).get("namespace") or "default"
    templates, labels = None, None
    if podclaims.claim_names(pod)[1]:  # a claim not made yet: its template and the namespace say why
        try:
            templates = {f"{ns}/{t['metadata']['name']}": t
                         for t in (await client.list("resourceclaimtemplates", ns)).get("items") or []}
            labels = ((await client.get("namespaces", ns)).get("metadata") or {}).get("labels") or {}
        except ApiError as exc:
            if exc.status not in (403, 404):
                raise
    d = await off_loop(dra.diagnose_dra_pod, pod,
                       {f"{c['metadata'].get('namespace', '')}/{c['metadata']['name']}": c for c in claims},
                       slices, {c["metadata"]["name"]: c for c in classes}, nodes, templates, labels)
    return dataclasses.replace(d, setup=(f"DRA: {len(slices)} ResourceSlice(s), {len(claims)} claim(s), "
                                         f"{len(classes)} DeviceClass(es)",))


async def would_fit_if(client, args: argparse.Namespace) -> str | None:
    """whatif: the one change under which this pending pod would be placed (hami.whatif.suggest)."""
    from hami.whatif.cluster import SnapshotError, parse_snapshot
    from hami.whatif.engine import SchedulerDefaults
    from hami.whatif.snapshot import take_with
    from hami.whatif.suggest import single_change_fits

    ns, _, name = args.pod.rpartition("/")
    try:
        cluster = parse_snapshot(await take_with(client), "live cluster")
    except SnapshotError as exc:
        return f"(no whatif: {exc})"
    defaults = SchedulerDefaults(node_policy=args.node_scheduler_policy, gpu_policy=args.gpu_scheduler_policy,
                                 scheduler_name=args.scheduler_name)
    change = single_change_fits(cluster, ns or "default", name, defaults)
    return f"this pod would fit if {change}" if change else None


async def preemption(client, args: argparse.Namespace) -> str | None:
    """The GPU preemption line for a pending, unbound pod (hami.doctor.preemption); None otherwise."""
    ns, _, name = args.pod.rpartition("/")
    pod = await client.get_pod(ns or "default", name)
    if (pod.get("spec") or {}).get("nodeName") or (pod.get("status") or {}).get("phase", "Pending") != "Pending":
        return None
    inst = await gather.installation(client, args)
    return await preemption_facts(client, pod, inst.nvidia, inst.vendors)


async def scale_up(client, args: argparse.Namespace) -> str | None:
    """The scale-up line for a pending pod asking extended resources (hami.doctor.scaleup)."""
    from hami.doctor.scaleup import scale_up_line

    ns, _, name = args.pod.rpartition("/")
    pod = await client.get_pod(ns or "default", name)
    if (pod.get("spec") or {}).get("nodeName") or (pod.get("status") or {}).get("phase", "Pending") != "Pending":
        return None
    nodes = (await client.list_nodes()).get("items") or []
    pods = (await client.list("pods")).get("items") or []
    events = await gather.pod_events(client, ns or "default", name, (pod.get("metadata") or {}).get("uid", ""))
    return scale_up_line(pod, nodes, pods, events)


async def main(args: argparse.Namespace) -> int:
    client = await gather.client_from_args(args)
    whatif = preempt = scale = None
    try:
        d = await diagnose(client, args)
        if d.leaf.startswith("dra-"):  # whatif's knob search changes registered cards, not ResourceSlices
            whatif = "(hami whatif replays pods with claims through this allocator; its knob search does not " \
                     "change ResourceSlices)"
        elif d.leaf not in OK_LEAVES:
            preempt = await preemption(client, args)
            scale = await scale_up(client, args)
            if args.whatif:
                whatif = await would_fit_if(client, args)
    except ApiError as exc:
        print(f"hami doctor pod: {args.pod}: {exc}", file=sys.stderr)
        return 2 if exc.not_found else 1
    finally:
        await client.close()
    if args.json:
        sys.stdout.write(orjson.dumps({**d.as_dict(), "whatif": whatif, "preemption": preempt, "scaleUp": scale},
                                      option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(render_diagnosis(d) + (f"  preemption: {preempt}\n" if preempt else "")
                         + (f"  scale-up: {scale}\n" if scale else "")
                         + (f"  whatif: {whatif}\n" if whatif else ""))
    return 0 if d.leaf in OK_LEAVES else 1
