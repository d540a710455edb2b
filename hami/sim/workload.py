"""`--demo-workload`: a stream of sample GPU pods of mixed sizes, some that cannot fit.

`sample_pod(i)` is pure and deterministic (a fixed cycle of shapes), so the demo and the tests see
the same mix; `run_workload` submits them through the API and prints a live one-line summary.
"""

from __future__ import annotations

import asyncio
import sys

from hami.device import codec
from hami.device.request import quantity_as_int64
from hami.kube.client import ApiError, KubeClient

# name, limits. The last two never fit a 40 GiB card: too much memory, too many GPUs.
NEVER_FITS = ("huge-mem", "too-many")
SHAPES: tuple[tuple[str, dict[str, str]], ...] = (
    ("small", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"}),
    ("half", {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50", "nvidia.com/gpucores": "50"}),
    ("medium", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10000", "nvidia.com/gpucores": "20"}),
    ("pair", {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "8000", "nvidia.com/gpucores": "25"}),
    ("tiny", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024", "nvidia.com/gpucores": "10"}),
    ("whole", {"nvidia.com/gpu": "1"}),
    ("huge-mem", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "200000"}),
    ("too-many", {"nvidia.com/gpu": "16", "nvidia.com/gpumem": "1000"}),
)


def sample_pod(i: int, scheduler_name: str, namespace: str = "default") -> dict:
    shape, limits = SHAPES[i % len(SHAPES)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"demo-{shape}-{i}", "namespace": namespace,
                     "labels": {"app": "hami-demo", "hami-demo/shape": shape}},
        "spec": {
            "schedulerName": scheduler_name,
            "containers": [{"name": "cuda", "image": "nvidia/cuda:12.4.0-base-ubuntu22.04",
                            "command": ["sleep", "infinity"], "resources": {"limits": dict(limits)}}],
        },
    }


def _claims_mib(pods: list[dict], claims: list[dict]) -> int:
    """DRA mode: the memory the demo pods' claims hold (consumedCapacity), in MiB."""
    uids = {(p.get("metadata") or {}).get("uid") for p in pods
            if (p.get("status") or {}).get("phase", "Pending") in ("Running", "Pending")}
    total = 0
    for c in claims:
        status = c.get("status") or {}
        if not any(r.get("uid") in uids for r in status.get("reservedFor") or []):
            continue
        for r in ((status.get("allocation") or {}).get("devices") or {}).get("results") or []:
            value = quantity_as_int64((r.get("consumedCapacity") or {}).get("memory", "0"))
            total += (value or 0) >> 20
    return total


def summarize(pods: list[dict], claims: list[dict] | None = None) -> dict[str, int]:
    """Counts for the one-line summary: running, pending (and how many of those are the shapes that
    never fit, so a newcomer does not take them for a fault), failed, GPU memory allocated (MiB)."""
    out = {"running": 0, "pending": 0, "never_fits": 0, "failed": 0, "gpumem_mib": 0}
    for pod in pods:
        phase = (pod.get("status") or {}).get("phase", "Pending")
        ann = (pod.get("metadata") or {}).get("annotations") or {}
        if phase == "Running":
            out["running"] += 1
        elif phase == "Failed" or ann.get(codec.BIND_PHASE_ANNOTATION) == "failed":
            out["failed"] += 1
        elif phase == "Pending":
            out["pending"] += 1
            if ((pod.get("metadata") or {}).get("labels") or {}).get("hami-demo/shape") in NEVER_FITS:
                out["never_fits"] += 1
        allocated = ann.get(codec.ALLOCATED_ANNOTATION)
        if phase in ("Running", "Pending") and allocated:
            try:
                containers = codec.decode_pod_devices(allocated, field=codec.ALLOCATED_ANNOTATION)
            except codec.CodecError:
                continue  # a damaged annotation counts no memory; the scheduler reports it
            out["gpumem_mib"] += sum(d.usedmem for c in containers for d in c)
    out["gpumem_mib"] += _claims_mib(pods, claims or [])
    return out


async def run_workload(client: KubeClient, scheduler_name: str, stop: asyncio.Event, *,
                       interval: float = 2.0, limit: int = 40, out=None) -> int:
    """Submit up to `limit` sample pods, one every `interval` seconds, printing a summary line."""
    out = out or sys.stdout
    submitted = 0
    hinted = False
    last_line = ""
    while not stop.is_set():
        if submitted < limit:
            try:
                await client.create("pods", sample_pod(submitted, scheduler_name), "default")
            except ApiError as exc:
                if not exc.conflict:
                    print(f"demo: could not submit pod: {exc}", file=out, flush=True)
            submitted += 1
        try:
            pods = (await client.list("pods", "default", label_selector="app=hami-demo")).get("items") or []
            claims = ((await client.list("resourceclaims", "default")).get("items") or []) if any(
                (p.get("spec") or {}).get("resourceClaims") for p in pods) else []
            s = summarize(pods, claims)
            line = (f"demo: {submitted} submitted | running {s['running']} | pending {s['pending']} "
                    f"({s['never_fits']} never fit by design, {s['pending'] - s['never_fits']} wait for room) | "
                    f"failed {s['failed']} | GPU memory allocated {s['gpumem_mib']} MiB")
            if line != last_line:  # once the workload settles, silence until something changes
                print(line, file=out, flush=True)
                last_line = line
            if submitted == limit and not hinted and s["never_fits"]:
                hinted = True
                example = next(p["metadata"]["name"] for p in pods
                               if p["metadata"].get("labels", {}).get("hami-demo/shape") in NEVER_FITS)
                print(f"demo: all {limit} submitted. Why is a pod pending? hami doctor pod default/{example}",
                      file=out, flush=True)
        except ApiError:
            pass
        try:
            await asyncio.wait_for(stop.wait(), timeout=interval)
        except TimeoutError:
            pass
    return submitted
