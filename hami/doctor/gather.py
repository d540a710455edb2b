"""Reads the live cluster into the facts the pure decision modules (`tree`, `recommend`) take.

The only I/O of `hami doctor`: pods, events, nodes, ResourceQuotas, the leader Lease and the
chart's device ConfigMap through `hami.kube.client.KubeClient`, and the scheduler's /healthz over HTTP.

The doctor reads the deployment that is really there (`installation`): the namespace the chart was
installed into (`--hami-namespace`, else the namespace of the chart's device ConfigMap, found by the
label the chart sets), and the device config in that ConfigMap (custom resource names included).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import aiohttp
import yaml

from hami.config import (
    ConfigError,
    KubeSettings,
    default_vendor_table,
    parse_device_config,
    parse_duration,
    vendors_with_nvidia,
)
from hami.device import codec
from hami.device.model import NvidiaConfig
from hami.device.request import quantity_value
from hami.device.vendors import VendorError, VendorTable, apply_device_config
from hami.doctor.tree import EventFact, NodeFacts, QuotaFact, SchedulerFact
from hami.kube.client import ApiError, KubeClient

RECENT_EVENTS_S = 15 * 60.0
SCHEDULER_LABEL = "app.kubernetes.io/component=hami-scheduler"  # the chart's scheduler objects
DEVICE_CONFIG_KEY = "device-config.yaml"  # the chart's <release>-scheduler-device ConfigMap key
FALLBACK_NAMESPACE = "kube-system"


@dataclass(frozen=True, slots=True)
class Installation:
    """What the chart deployed, as read from the cluster."""

    namespace: str
    nvidia: NvidiaConfig
    source: str  # where the device config came from, for the evidence lines
    notes: tuple[str, ...] = field(default=())
    vendors: VendorTable = field(default_factory=default_vendor_table)  # with the device config's overrides


async def installation(client: KubeClient, args: argparse.Namespace) -> Installation:
    """The HAMi namespace and device config of the deployed chart (its device ConfigMap)."""
    wanted = getattr(args, "hami_namespace", "") or ""
    items = (await client.list("configmaps", wanted or None, label_selector=SCHEDULER_LABEL)).get("items") or []
    found = sorted((cm for cm in items if DEVICE_CONFIG_KEY in (cm.get("data") or {})),
                   key=lambda cm: ((cm.get("metadata") or {}).get("namespace", ""), cm["metadata"].get("name", "")))
    if not found:
        ns = wanted or FALLBACK_NAMESPACE
        return Installation(ns, NvidiaConfig(), "built-in defaults",
                            (f"no ConfigMap with {SCHEDULER_LABEL} holding {DEVICE_CONFIG_KEY} in "
                             f"{wanted or 'any namespace'}: using HAMi's default device config",))
    cm = found[0]
    meta = cm.get("metadata") or {}
    ns, source = meta.get("namespace", ""), f"configmap {meta.get('namespace', '')}/{meta.get('name', '')}"
    notes = []
    if len({(c.get("metadata") or {}).get("namespace") for c in found}) > 1:
        notes.append(f"several HAMi installations found; using {ns} (pass --hami-namespace to choose)")
    try:
        doc = yaml.safe_load(cm["data"][DEVICE_CONFIG_KEY])
        nvidia = parse_device_config(doc, source, lambda msg: None)
        vendors = vendors_with_nvidia(apply_device_config(default_vendor_table(), doc, source), nvidia)
    except (yaml.YAMLError, ConfigError, VendorError) as exc:
        return Installation(ns, NvidiaConfig(), "built-in defaults",
                            (*notes, f"{source}: unreadable device config ({exc}); using HAMi's defaults"))
    return Installation(ns, nvidia, source, tuple(notes), vendors)


async def client_from_args(args: argparse.Namespace) -> KubeClient:
    settings = KubeSettings(
        kubeconfig=getattr(args, "kubeconfig", None),
        qps=getattr(args, "kube_qps", 50.0),
        burst=getattr(args, "kube_burst", 100),
        timeout=getattr(args, "kube_timeout", 0.0),  # parsed as a Go duration by the flag table
    )
    return await KubeClient.from_settings(settings)


def lock_timeout(args: argparse.Namespace) -> float:
    return parse_duration(getattr(args, "node_lock_timeout", "5m") or "5m", key="--node-lock-timeout")


def parse_time(text: str | None) -> float:
    """RFC3339 (with or without fraction) -> unix seconds; 0 when absent or unreadable."""
    if not text:
        return 0.0
    try:
        return codec.parse_rfc3339(text, field="time")
    except codec.CodecError:
        return 0.0


def event_fact(ev: dict) -> EventFact:
    t = (parse_time(ev.get("lastTimestamp")) or parse_time(ev.get("eventTime"))
         or parse_time(ev.get("firstTimestamp")) or parse_time((ev.get("metadata") or {}).get("creationTimestamp")))
    comp = (ev.get("source") or {}).get("component") or ev.get("reportingComponent") or ""
    return EventFact(ev.get("reason", ""), ev.get("message", ""), ev.get("type", "Normal"), comp, t,
                     int(ev.get("count") or 1))


def node_facts(node: dict, resource: str = "nvidia.com/gpu") -> NodeFacts:
    meta = node.get("metadata") or {}
    status = node.get("status") or {}

    def count(part: str) -> int:
        v = (status.get(part) or {}).get(resource)
        return int(quantity_value(v) or 0) if v is not None else 0

    return NodeFacts(meta.get("name", ""), dict(meta.get("annotations") or {}), count("allocatable"),
                     count("capacity"), dict(meta.get("labels") or {}),
                     dict(status.get("capacity") or {}), dict(status.get("allocatable") or {}))


def quota_fact(q: dict) -> QuotaFact:
    def ints(m: dict | None) -> dict[str, int]:
        return {k: int(quantity_value(v) or 0) for k, v in (m or {}).items()}

    return QuotaFact((q.get("metadata") or {}).get("name", ""), ints((q.get("spec") or {}).get("hard")),
                     ints((q.get("status") or {}).get("used")))


async def pod_events(client: KubeClient, namespace: str, name: str, uid: str = "") -> list[EventFact]:
    items = (await client.list("events", namespace)).get("items") or []
    out = []
    for ev in items:
        obj = ev.get("involvedObject") or {}
        if obj.get("name") == name and (obj.get("kind") in (None, "", "Pod")) \
                and (not uid or obj.get("uid") in (None, "", uid)):
            out.append(event_fact(ev))
    return out


async def list_nodes(client: KubeClient, resource: str) -> list[NodeFacts]:
    return [node_facts(n, resource) for n in (await client.list_nodes()).get("items") or []]


async def list_quotas(client: KubeClient, namespace: str) -> list[QuotaFact]:
    return [quota_fact(q) for q in (await client.list("resourcequotas", namespace)).get("items") or []]


async def scheduler_fact(client: KubeClient, args: argparse.Namespace, now: float | None = None,
                         namespace: str = FALLBACK_NAMESPACE) -> SchedulerFact:
    """Is the scheduler running? /healthz when --scheduler-url is given, else the leader Lease's
    renew time, else whether it wrote any event recently; None when nothing tells."""
    now = time.time() if now is None else now
    url = getattr(args, "scheduler_url", "")
    if url:
        target = url.rstrip("/") + "/healthz"
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as s:
                async with s.get(target, ssl=False) as resp:
                    return SchedulerFact(resp.status == 200, f"GET {target}: {resp.status}")
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return SchedulerFact(False, f"GET {target}: {type(exc).__name__} {exc}")
    lease_ns = getattr(args, "scheduler_namespace", "") or namespace  # the chart's lease: release namespace
    try:
        lease = await client.get_lease(lease_ns, args.lease_name)
    except ApiError as exc:
        if not exc.not_found:
            raise
        lease = None
    if lease is not None:
        spec = lease.get("spec") or {}
        renew = parse_time(spec.get("renewTime"))
        duration = float(spec.get("leaseDurationSeconds") or 15)
        alive = renew > 0 and now - renew <= duration
        return SchedulerFact(alive, f"lease {lease_ns}/{args.lease_name} held by "
                                    f"{spec.get('holderIdentity', '?')}, renewed {int(now - renew)}s ago "
                                    f"(duration {int(duration)}s)")
    items = (await client.list("events")).get("items") or []
    recent = [e for e in map(event_fact, items)
              if e.component == args.scheduler_name and now - e.time <= RECENT_EVENTS_S]
    if recent:
        return SchedulerFact(True, f"{len(recent)} event(s) from {args.scheduler_name} in the last "
                                   f"{int(RECENT_EVENTS_S // 60)}m")
    return SchedulerFact(None, f"no lease {lease_ns}/{args.lease_name} and no event from "
                               f"{args.scheduler_name} in the last {int(RECENT_EVENTS_S // 60)}m; "
                               "pass --scheduler-url to check /healthz")


def names(items: Iterable[NodeFacts]) -> list[str]:
    return [n.name for n in items]
