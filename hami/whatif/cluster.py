"""A cluster snapshot as whatif replays it: nodes, pods, quotas and device config, decoded (pure).

Input is what `kubectl get nodes,pods,resourcequotas -A -o json` prints (a `List` of objects), or
the same with ConfigMaps added (what `hami whatif snapshot` saves): a ConfigMap with a
`device-config.yaml` key is HAMi's device config, one with `config.json` its per-node config.
Objects are decoded with the scheduler's own codec (hami.device.codec), the same way the
scheduler's watch cache reads them (hami.scheduler.cache.state): a node counts when its register
annotation decodes to at least one device; a pod holds devices when it carries
`hami.io/vgpu-node` and is not Succeeded/Failed.

DRA (`--dra`): with `resourceslices,resourceclaims,resourceclaimtemplates,deviceclasses` added to
the kubectl command (`hami whatif snapshot` adds them), those objects are kept as read
(`Cluster.dra`), a node without HAMi's registration counts when some ResourceSlice gives it devices
(no cards of its own: `NodeInfo.dra`), and a pod with `spec.resourceClaims` holds devices through
its claims' allocations while it is bound and not finished (`PodInfo.dra`, `placed_on`).

Bad input raises `SnapshotError(source, path, problem)`, whose text names the file, the JSON path
of the object and the field. Annotations under `hami.io/` that this version does not know (a
newer HAMi) are reported in `Cluster.warnings` and otherwise ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from hami.device import codec
from hami.device.codec import keys
from hami.device.model import DeviceInfo, NodeDeviceConfig, NvidiaConfig
from hami.device.nodeconfig import DeviceSettings, settings_for_node
from hami.device.request import quantity_value
from hami.kubesched import intree
from hami.kubesched.drapools import Inventory
from hami.kubesched.nodeaffinity import node_matches, spec_required_terms
from hami.scheduler.placement.usage import init_released

from .draplace import DraObjects

TERMINAL = ("Succeeded", "Failed")

# Annotation keys this version reads or writes; any other `hami.io/...` key is from a newer HAMi.
KNOWN_ANNOTATIONS = frozenset(
    value for name, value in vars(codec).items()
    if name.endswith("_ANNOTATION") and isinstance(value, str)
) | {"hami.io/node-handshake-dcu", "hami.io/bind-phase", "hami.io/resource-pool"} | keys.HAMI_INFO_ANNOTATIONS


LIST_KINDS = {"NodeList": "Node", "PodList": "Pod", "ResourceQuotaList": "ResourceQuota",
              "ResourceSliceList": "ResourceSlice", "ResourceClaimList": "ResourceClaim",
              "ResourceClaimTemplateList": "ResourceClaimTemplate", "DeviceClassList": "DeviceClass"}
DRA_KINDS = ("ResourceSlice", "ResourceClaim", "ResourceClaimTemplate", "DeviceClass")
DRA_RESOURCES = ("resourceslices", "resourceclaims", "resourceclaimtemplates", "deviceclasses")


class SnapshotError(ValueError):
    """A snapshot that cannot be read: the file, the JSON path of the bad part, and why."""

    def __init__(self, source: str, path: str, problem: str):
        self.source, self.path, self.problem = source, path, problem
        super().__init__(f"{source}: {path}: {problem}")


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    devices: tuple[DeviceInfo, ...]
    physical_mem: tuple[int, ...]  # MiB per device, before deviceMemoryScaling
    settings: DeviceSettings  # what the node registered with (device config + its nodeconfig)
    cordoned: frozenset[str] = frozenset()
    pair_scores: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    unschedulable: bool = False
    taints: tuple[tuple[str, str, str], ...] = ()  # (key, value, effect) of NoSchedule/NoExecute taints
    # status.allocatable as kube-scheduler's NodeResourcesFit reads it (cpu in millicores, memory
    # and ephemeral-storage in bytes, pods); {} when the node reports none
    allocatable: Mapping[str, int] = field(default_factory=dict)
    # extended resources in status.allocatable (nvidia.com/gpu, and nvidia.com/gpumem where the agent
    # reports it): what Cluster Autoscaler's simulation checks (hami.whatif.scaleup)
    extended: Mapping[str, int] = field(default_factory=dict)
    # the Node as read: DRA slices with a nodeSelector match its labels; {} for device-plugin nodes a
    # scenario adds
    obj: Mapping = field(default_factory=dict)
    # the ResourceSlices of a DRA node a scenario adds (hami.dra.slices, as its plugin would publish)
    slices: tuple[Mapping, ...] = ()

    @property
    def dra(self) -> bool:
        """A node HAMi's agent does not register, in the snapshot for its ResourceSlices."""
        return not self.devices and bool(self.obj)


@dataclass(frozen=True, slots=True)
class PodInfo:
    namespace: str
    name: str
    uid: str
    obj: dict  # the pod as read; never mutated
    node: str = ""  # hami.io/vgpu-node: where HAMi placed it ("" = not placed)
    devices: tuple = ()  # decoded hami.io/vgpu-devices-allocated
    mig: tuple = ()
    num_init: int = 0
    init_released: bool = False
    created: str = ""  # metadata.creationTimestamp (RFC 3339 sorts as text)
    phase: str = ""
    scheduler_name: str = ""
    bound_node: str = ""  # spec.nodeName
    # Finished pods (Succeeded/Failed) only: how long it held its devices, from status.startTime
    # (else creation) to the last container's terminated.finishedAt; None when the pod says not.
    ran_for: float | None = None
    dra: bool = False  # spec.resourceClaims: kube-scheduler's DynamicResources allocates its devices

    @property
    def placed_on(self) -> str:
        """Where its devices are: HAMi's node, or the node a pod with claims is bound to."""
        return self.node or (self.bound_node if self.dra else "")

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class QuotaInfo:
    namespace: str
    name: str
    hard: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class Cluster:
    nodes: Mapping[str, NodeInfo]
    pods: tuple[PodInfo, ...]
    quotas: tuple[QuotaInfo, ...]
    nvidia: NvidiaConfig = field(default_factory=NvidiaConfig)
    node_configs: tuple[NodeDeviceConfig, ...] = ()
    warnings: tuple[str, ...] = ()
    dra: DraObjects = field(default_factory=DraObjects)


def _want_map(value: Any, source: str, path: str, what: str = "an object") -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SnapshotError(source, path, f"expected {what}, got {type(value).__name__}")
    return value


def _strings(value: Any, source: str, path: str) -> dict[str, str]:
    out = _want_map(value, source, path, "an object of strings")
    for k, v in out.items():
        if not isinstance(v, str):
            raise SnapshotError(source, f"{path}[{k!r}]", f"expected a string, got {type(v).__name__}")
    return out


def _meta(obj: dict, source: str, path: str, *, namespaced: bool) -> tuple[str, str, dict[str, str], dict[str, str]]:
    meta = _want_map(obj.get("metadata"), source, f"{path}.metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise SnapshotError(source, f"{path}.metadata.name", "missing or not a string")
    ns = meta.get("namespace", "default" if namespaced else "")
    if not isinstance(ns, str):
        raise SnapshotError(source, f"{path}.metadata.namespace", "not a string")
    annos = _strings(meta.get("annotations"), source, f"{path}.metadata.annotations")
    labels = _strings(meta.get("labels"), source, f"{path}.metadata.labels")
    return name, ns or ("default" if namespaced else ""), annos, labels


def parse_snapshot(doc: Any, source: str = "snapshot") -> Cluster:
    """Decode a snapshot document (already parsed JSON/YAML) into a Cluster."""
    if not isinstance(doc, dict):
        raise SnapshotError(source, "(top level)", f"expected an object, got {type(doc).__name__}")
    kind = doc.get("kind")
    if kind is not None and not isinstance(kind, str):
        raise SnapshotError(source, "kind", f"expected a string, got {type(kind).__name__}")
    items = doc.get("items") if "items" in doc else None
    if doc.get("kind") not in ("List", *LIST_KINDS) and items is None:
        if doc.get("kind") in ("Node", "Pod", "ResourceQuota", "ConfigMap", *DRA_KINDS):
            items = [doc]
        else:
            raise SnapshotError(source, "kind", f"expected a List of objects (kubectl get ... -o json), "
                                                f"got {doc.get('kind')!r}")
    if not isinstance(items, list):
        raise SnapshotError(source, "items", f"expected an array, got {type(items).__name__}")
    default_kind = LIST_KINDS.get(doc.get("kind"))
    warnings: dict[str, set[str]] = {}
    nodes_raw, pods_raw, quotas, nvidia_doc, node_doc = [], [], [], None, None
    dra: dict[str, dict] = {kind: {} for kind in DRA_KINDS}
    for i, obj in enumerate(items):
        path = f"items[{i}]"
        if not isinstance(obj, dict):
            raise SnapshotError(source, path, f"expected an object, got {type(obj).__name__}")
        kind = obj.get("kind", default_kind)
        if kind is not None and not isinstance(kind, str):
            raise SnapshotError(source, f"{path}.kind", f"expected a string, got {type(kind).__name__}")
        if kind == "Node":
            nodes_raw.append((path, obj))
        elif kind == "Pod":
            pods_raw.append((path, obj))
        elif kind == "ResourceQuota":
            name, ns, _, _ = _meta(obj, source, path, namespaced=True)
            hard = _want_map(_want_map(obj.get("spec"), source, f"{path}.spec").get("hard"), source,
                             f"{path}.spec.hard")
            parsed = {}
            for k, v in hard.items():
                n = quantity_value(v)
                if n is None:
                    raise SnapshotError(source, f"{path}.spec.hard[{k!r}]", f"not a quantity: {v!r}")
                parsed[k] = n
            quotas.append(QuotaInfo(ns, name, parsed))
        elif kind == "ConfigMap":
            data = _strings(obj.get("data"), source, f"{path}.data")
            if "device-config.yaml" in data:
                nvidia_doc = (f"{path}.data['device-config.yaml']", data["device-config.yaml"])
            if "config.json" in data:
                node_doc = (f"{path}.data['config.json']", data["config.json"])
        elif kind in DRA_KINDS:
            name, ns, _, _ = _meta(obj, source, path, namespaced=kind in ("ResourceClaim", "ResourceClaimTemplate"))
            if not isinstance(obj.get("spec"), dict):
                raise SnapshotError(source, f"{path}.spec", f"a {kind} needs a spec object")
            dra[kind][f"{ns}/{name}" if ns else name] = obj
        elif kind is None:
            raise SnapshotError(source, f"{path}.kind", "missing")
        # Other kinds (Services, Events, ...) are not needed for placement: skipped.
    nvidia, node_configs = _device_config(source, nvidia_doc, node_doc, warnings)
    objects = DraObjects(tuple(dra["ResourceSlice"].values()), dra["ResourceClaim"], dra["ResourceClaimTemplate"],
                         dra["DeviceClass"])
    devices = Inventory(objects.slices) if objects.slices else None
    nodes: dict[str, NodeInfo] = {}
    for path, obj in nodes_raw:
        node = _node(obj, source, path, nvidia, node_configs, warnings, devices)
        if node is not None:
            nodes[node.name] = node
    pods = tuple(_pod(obj, source, path, warnings) for path, obj in pods_raw)
    notes = tuple(
        f"unknown annotation {key} on {', '.join(sorted(where)[:3])}"
        f"{f' and {len(where) - 3} more' if len(where) > 3 else ''} (from a newer HAMi?): ignored"
        for key, where in sorted(warnings.items())
    ) + _dra_note(pods_raw, objects) + _preemption_note(pods_raw)
    return Cluster(nodes, pods, tuple(quotas), nvidia, node_configs, notes, objects)


def _dra_note(pods_raw, objects: DraObjects) -> tuple[str, ...]:
    """Pods with claims are replayed through the DRA allocator: say so when the snapshot lacks the
    objects that needs (taken with kubectl get nodes,pods,resourcequotas only)."""
    dra = [f"{(o.get('metadata') or {}).get('namespace', '')}/{(o.get('metadata') or {}).get('name', '')}"
           for _, o in pods_raw if isinstance(o.get("spec"), dict) and o["spec"].get("resourceClaims")]
    if not dra or objects.slices:
        return ()
    return (f"{len(dra)} pod(s) use DRA claims ({', '.join(dra[:3])}{' ...' if len(dra) > 3 else ''}) but the "
            f"snapshot has no ResourceSlices: they stay pending in the replay; take it with `hami whatif snapshot` "
            f"or add {','.join(DRA_RESOURCES)} to kubectl get",)


def _preemption_note(pods_raw) -> tuple[str, ...]:
    """whatif has no preemption scenario: say so when pending pods outrank placed ones."""
    def prio(o) -> int:
        v = (o.get("spec") or {}).get("priority") if isinstance(o.get("spec"), dict) else None
        return v if isinstance(v, int) and not isinstance(v, bool) else 0
    placed = [prio(o) for _, o in pods_raw if isinstance(o.get("spec"), dict) and o["spec"].get("nodeName")]
    lowest = min(placed, default=None)
    outrank = [f"{(o.get('metadata') or {}).get('namespace', '')}/{(o.get('metadata') or {}).get('name', '')}"
               for _, o in pods_raw if isinstance(o.get("spec"), dict) and not o["spec"].get("nodeName")
               and lowest is not None and prio(o) > lowest]
    if not outrank:
        return ()
    return (f"{len(outrank)} pending pod(s) outrank placed pods ({', '.join(outrank[:3])}"
            f"{' ...' if len(outrank) > 3 else ''}): whatif has no preemption scenario, so it replays them "
            "without evicting anyone (hami doctor pod says what --gpu-preemption would evict for one)",)


def _device_config(source, nvidia_doc, node_doc, warnings) -> tuple[NvidiaConfig, tuple[NodeDeviceConfig, ...]]:
    import orjson
    import yaml

    from hami.config import ConfigError, parse_device_config, parse_node_configs

    nvidia, node_configs = NvidiaConfig(), ()
    notes: list[str] = []
    if nvidia_doc is not None:
        path, text = nvidia_doc
        try:
            nvidia = parse_device_config(yaml.safe_load(text), f"{source}: {path}", notes.append)
        except (yaml.YAMLError, ConfigError) as exc:
            raise SnapshotError(source, path, str(exc)) from None
    if node_doc is not None:
        path, text = node_doc
        try:
            node_configs = parse_node_configs(orjson.loads(text), f"{source}: {path}", notes.append)
        except (orjson.JSONDecodeError, ConfigError) as exc:
            raise SnapshotError(source, path, str(exc)) from None
    for note in notes:
        warnings.setdefault(note, set())
    return nvidia, node_configs


def _unknown(annos: Mapping[str, str], where: str, warnings: dict[str, set[str]]) -> None:
    for key in annos:
        if key.startswith("hami.io/") and key not in KNOWN_ANNOTATIONS:
            warnings.setdefault(key, set()).add(where)


def spec_shape_error(spec: dict) -> tuple[str, str] | None:
    """(field, problem) when a pod spec is not shaped like one where the scheduler reads it."""
    for group in ("containers", "initContainers"):
        ctrs = spec.get(group)
        if ctrs is None:
            continue
        if not (isinstance(ctrs, list) and all(isinstance(c, dict) for c in ctrs)):
            return group, "expected an array of objects"
        for i, c in enumerate(ctrs):
            res = c.get("resources")
            if res is None:
                continue
            if not isinstance(res, dict):
                return f"{group}[{i}].resources", "expected an object"
            for part in ("limits", "requests"):
                v = res.get(part)
                flat = isinstance(v, dict) and all(isinstance(x, (str, int, float)) for x in v.values())
                if v is not None and not flat:
                    return f"{group}[{i}].resources.{part}", "expected an object of quantities"
    for key in ("nodeSelector",):
        v = spec.get(key)
        if v is not None and not (isinstance(v, dict) and all(isinstance(x, str) for x in v.values())):
            return key, "expected an object of strings"
    return None


def physical_memory(devmem: int, settings: DeviceSettings) -> int:
    """The card's MiB before scaling: the inverse of DeviceSettings.devmem (MIG is never scaled)."""
    if settings.mode == "mig" or settings.memory_scaling == 1.0:
        return devmem
    return int(round(devmem / settings.memory_scaling))


def _node(obj, source, path, nvidia, node_configs, warnings, dra: Inventory | None = None) -> NodeInfo | None:
    name, _, annos, labels = _meta(obj, source, path, namespaced=False)
    _unknown(annos, f"node {name}", warnings)
    text = annos.get(codec.REGISTER_ANNOTATION)
    if text is None:
        if dra is not None and dra.pools_for(obj):  # a DRA node: its GPUs are in ResourceSlices
            return _plain_node(obj, source, path, name, labels, settings_for_node(nvidia, node_configs, name))
        return None  # not a HAMi GPU node
    field_path = f"{path}.metadata.annotations[{codec.REGISTER_ANNOTATION!r}]"
    try:
        devices = tuple(codec.decode_node_devices(text))
    except codec.CodecError as exc:
        raise SnapshotError(source, field_path, f"cannot decode (node {name}): {exc}") from None
    if not devices:
        return None
    try:
        cordoned = frozenset(codec.decode_device_cordon(annos.get(codec.CORDON_ANNOTATION)))
    except codec.CodecError as exc:
        raise SnapshotError(source, f"{path}.metadata.annotations[{codec.CORDON_ANNOTATION!r}]", str(exc)) from None
    pair: dict = {}
    score_text = annos.get(codec.PAIR_SCORE_ANNOTATION)
    if score_text:
        try:
            pair = {e.uuid: dict(e.scores) for e in codec.decode_pair_scores(score_text)}
        except codec.CodecError as exc:
            raise SnapshotError(source, f"{path}.metadata.annotations[{codec.PAIR_SCORE_ANNOTATION!r}]",
                                str(exc)) from None
    settings = _registered_settings(settings_for_node(nvidia, node_configs, name), devices)
    spec = _want_map(obj.get("spec"), source, f"{path}.spec")
    status = _want_map(obj.get("status"), source, f"{path}.status")
    alloc = _want_map(status.get("allocatable"), source, f"{path}.status.allocatable")
    return NodeInfo(
        name=name, devices=devices, physical_mem=tuple(physical_memory(d.devmem, settings) for d in devices),
        settings=settings, cordoned=cordoned, pair_scores=pair, labels=labels,
        unschedulable=bool(spec.get("unschedulable")),
        taints=_taints(spec.get("taints"), source, f"{path}.spec.taints"),
        allocatable=intree.allocatable({"status": {"allocatable": alloc}}),
        extended=intree.extended_allocatable({"status": {"allocatable": alloc}}), obj=obj,
    )


def _plain_node(obj, source, path, name, labels, settings: DeviceSettings) -> NodeInfo:
    """A node without HAMi's registration (no cards in the UsageIndex): what kube-scheduler reads."""
    spec = _want_map(obj.get("spec"), source, f"{path}.spec")
    status = _want_map(obj.get("status"), source, f"{path}.status")
    alloc = _want_map(status.get("allocatable"), source, f"{path}.status.allocatable")
    return NodeInfo(name=name, devices=(), physical_mem=(), settings=settings, labels=labels,
                    unschedulable=bool(spec.get("unschedulable")),
                    taints=_taints(spec.get("taints"), source, f"{path}.spec.taints"),
                    allocatable=intree.allocatable({"status": {"allocatable": alloc}}),
                    extended=intree.extended_allocatable({"status": {"allocatable": alloc}}), obj=obj)


def _taints(value: Any, source: str, path: str) -> tuple[tuple[str, str, str], ...]:
    if value is None:
        return ()
    if not (isinstance(value, list) and all(isinstance(t, dict) for t in value)):
        raise SnapshotError(source, path, "expected an array of objects")
    out = []
    for t in value:
        if t.get("effect") in ("NoSchedule", "NoExecute"):
            out.append((str(t.get("key") or ""), str(t.get("value") or ""), str(t["effect"])))
    return tuple(out)


def node_affinity_ok(spec: Mapping, name: str, labels: Mapping[str, str]) -> bool:
    """NodeAffinity's Filter for the pod's required node affinity (the scheduler's one matcher,
    which checks every shape: a snapshot's pod spec is read as it is). No required affinity: every node."""
    return node_matches(None, spec_required_terms(spec), labels, name)


def _registered_settings(settings: DeviceSettings, devices: tuple[DeviceInfo, ...]) -> DeviceSettings:
    """What the registration itself says wins over the config: split count (the cards' count) and
    core scaling (devcore / 100) when every non-MIG card agrees. Memory scaling cannot be read
    back from a registration; it comes from the device config (1 without one)."""
    cards = [d for d in devices if d.mode != "mig"]
    counts = {d.count for d in cards}
    cores = {d.devcore for d in cards}
    changes = {}
    if len(counts) == 1 and (c := counts.pop()) != settings.split_count:
        changes["split_count"] = c
    if len(cores) == 1 and (k := cores.pop()) != settings.devcore():
        changes["core_scaling"] = k / 100
    return replace(settings, **changes) if changes else settings


def _pod(obj, source, path, warnings) -> PodInfo:
    name, ns, annos, _ = _meta(obj, source, path, namespaced=True)
    _unknown(annos, f"pod {ns}/{name}", warnings)
    spec = _want_map(obj.get("spec"), source, f"{path}.spec")
    status = _want_map(obj.get("status"), source, f"{path}.status")
    problem = spec_shape_error(spec)
    if problem:
        raise SnapshotError(source, f"{path}.spec.{problem[0]}", problem[1])
    inits = status.get("initContainerStatuses")
    if inits is not None and not (isinstance(inits, list) and all(isinstance(c, dict) for c in inits)):
        raise SnapshotError(source, f"{path}.status.initContainerStatuses", "expected an array of objects")
    for i, c in enumerate(inits or ()):
        state = c.get("state") or {}
        if not isinstance(state, dict) or not isinstance(state.get("terminated") or {}, dict):
            raise SnapshotError(source, f"{path}.status.initContainerStatuses[{i}].state", "expected an object")
    meta = obj.get("metadata") or {}
    node = annos.get(codec.VGPU_NODE_ANNOTATION, "")
    devices: tuple = ()
    mig: tuple = ()
    if node:
        text = annos.get(codec.ALLOCATED_ANNOTATION, "")
        try:
            devices = codec.decode_pod_devices(text) if text else ()
        except codec.CodecError as exc:
            raise SnapshotError(source, f"{path}.metadata.annotations[{codec.ALLOCATED_ANNOTATION!r}]",
                                f"cannot decode (pod {ns}/{name}): {exc}") from None
        mig_text = annos.get(codec.MIG_ALLOCATIONS_ANNOTATION)
        if mig_text:
            try:
                mig = tuple((a.gpu_uuid, a.placement) for a in codec.decode_mig_allocations(mig_text))
            except codec.CodecError as exc:
                raise SnapshotError(source, f"{path}.metadata.annotations[{codec.MIG_ALLOCATIONS_ANNOTATION!r}]",
                                    str(exc)) from None
    n_init = len(spec.get("initContainers") or [])
    phase = str(status.get("phase") or "")
    return PodInfo(
        namespace=ns, name=name, uid=str(meta.get("uid") or f"{ns}/{name}"), obj=obj, node=node,
        devices=devices, mig=mig, num_init=n_init, init_released=init_released(obj),
        created=str(meta.get("creationTimestamp") or ""), phase=phase,
        scheduler_name=str(spec.get("schedulerName") or ""), bound_node=str(spec.get("nodeName") or ""),
        ran_for=_ran_for(meta, status) if phase in TERMINAL else None, dra=bool(spec.get("resourceClaims")),
    )


def epoch(text: Any) -> float | None:
    """An RFC 3339 timestamp as Unix seconds; None when it is not one."""
    return codec.kube_time(text)


def _ran_for(meta: Mapping, status: Mapping) -> float | None:
    """A finished pod's run time: status.startTime (else creation) to the latest finishedAt."""
    ends = []
    for c in status.get("containerStatuses") or () if isinstance(status.get("containerStatuses"), list) else ():
        term = ((c.get("state") or {}) if isinstance(c, dict) and isinstance(c.get("state"), dict) else {}).get(
            "terminated")
        end = epoch(term.get("finishedAt")) if isinstance(term, dict) else None
        if end is not None:
            ends.append(end)
    start = epoch(status.get("startTime"))
    if start is None:
        start = epoch(meta.get("creationTimestamp"))
    if not ends or start is None:
        return None
    return max(0.0, max(ends) - start)


def holds_devices(pod: PodInfo) -> bool:
    """The scheduler counts this pod's devices (state.on_pod): placed and not finished."""
    return bool(pod.node) and pod.phase not in TERMINAL
