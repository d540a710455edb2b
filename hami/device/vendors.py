"""The vendor table: every accelerator HAMi schedules, described as data (pure, no I/O).

HAMi has one Go package per vendor (`pkg/device/<vendor>/`); most of them differ only in names:
resource names, annotation keys, the word that marks their devices. Here those names are rows of
one table (`config/vendors.yaml`, shipped inside the package as `hami/device/vendors.yaml`), and
code exists only where HAMi's rules really differ, as a small named hook:

* `nvidia`    the NVIDIA fit of `hami.scheduler.placement.fit` (MIG, topology, quota, numa-bind, ...);
* `generic`   HAMi's common vendor Fit (Hygon, Iluvatar, Mthreads, ...): count, memory, cores;
* `ascend`    generic fit, memory rounded up to the chip's vNPU templates (`templates`);
* `cambricon` generic fit, memory in 256 MiB units paired with cores in the DSMLU profile;
* `mthreads`  generic fit, requests split over the cards asked for, every container of a pod on
              the same card, admission fills whole cards (`memoryPerCard`) and checks `legalMemory`;
* `awsneuron` NeuronCores as bits of a per-device mask; several devices only as a contiguous
              group (a ring on Inferentia nodes, aligned groups of 1/4/8/16 elsewhere); a
              container may ask for cores alone (`coreRequests`);
* `kunlunxin` whole XPUs of an 8-card board (two wings of 4) picked by its interconnect:
              a wing that holds the request snugly, else linked pairs / groups of 4;
* `metax`     MetaX sGPU: the card's QoS policy must match the pod's, unhealthy cards are
              `CardUnhealthy`, candidates first and then the ones asked for.

Data flags any row may set: `oneCardPerPod` (HAMi's customFilterRule: every container of a pod
on the card the first one got; Mthreads, MetaX GPU); `exclusiveCards` (a used card is
ExclusiveDeviceAllocateConflict; Enflame GCU); capacity cards counted by the count
resource with `register.cardCount`/`cardMemory` (MetaX GPU).

`register.source` says where a node's devices come from: `annotation` (the vendor's device
plugin writes a register annotation: `json` as NVIDIA >= v2.8, or the `legacy` colon form) or
`capacity` (Cambricon: cards are derived from the node's extended-resource capacity).

API: `Vendor`, `Template`, `VendorTable` (lookups built once), `parse_vendor_table(doc, source)`,
`apply_device_config(table, doc, source)` (HAMi's device-config sections override the names),
`VendorError` (names the key and the source).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hami.device.vendorhooks import HOOKS

REGISTER_SOURCES = ("annotation", "capacity")
REGISTER_FORMATS = ("json", "legacy", "metax", "enflame-drs")


class VendorError(ValueError):
    """A vendor table entry that cannot be used; the message names the key and the source."""


@dataclass(frozen=True, slots=True)
class Template:
    """One Ascend vNPU template (`vnpus[].templates[]` in HAMi's device config)."""

    name: str
    memory: int  # MiB
    ai_core: int = 0
    ai_cpu: int = 0


@dataclass(frozen=True, slots=True)
class Vendor:
    """One row of the table. `name` is HAMi's device type (the request type, the TYPE field of
    the pod device string, `DeviceVendor`); for Ascend chips it is the chip's commonWord."""

    name: str
    family: str
    hook: str = "generic"
    count_resource: str = ""
    memory_resource: str = ""
    percentage_resource: str = ""
    core_resource: str = ""
    # Multiplies the memory request (Cambricon asks in 256 MiB units).
    memory_unit: int = 1
    # Cores a container gets when it names none (Cambricon: 100, a whole card).
    default_cores: int = 0
    register_source: str = "annotation"
    register_key: str = ""
    register_format: str = "json"
    # Capacity registration (Cambricon): device id format, cores per card.
    capacity_id: str = ""
    cores_per_card: int = 100
    handshake_key: str = ""
    to_allocate_key: str = ""
    allocated_key: str = ""
    use_uuid_key: str = ""
    nouse_uuid_key: str = ""
    use_type_key: str = ""
    nouse_type_key: str = ""
    node_lock_key: str = "hami.io/mutex.lock"
    # Ascend: templates sorted by memory, whole-card sizes, the allocation annotation.
    templates: tuple[Template, ...] = ()
    memory_capacity: int = 0
    memory_allocatable: int = 0
    allocation_key: str = ""
    # Request and admission rules some vendors add (Iluvatar): cores outside 0..max_cores make
    # the request empty (0: no check); a multi-card container gets count x 100 cores; an env
    # variable carrying the container name.
    max_cores: int = 0
    multi_card_cores: bool = False
    container_name_env: str = ""
    # Mthreads: each card model's memory in memory units (`memoryPerCard`: one size, or a list for
    # a mixed S4000/S5000 cluster), the sGPU memory sizes admission accepts (`legalMemory`; by
    # default every power of two from 2 below a card size plus the size itself, over all sizes),
    # and the whole-card resource a container may not mix with sGPU slices.
    memory_per_card: tuple[int, ...] = ()
    legal_memory: tuple[int, ...] = ()
    whole_card_resource: str = ""
    # Ascend 910C: one physical module is two NPUs; several NPUs are taken as whole modules and
    # admission turns 1 into 2 (HAMi's super-pod pairing). Ascend `hamiVnpuCore`: nodes run
    # HAMi-core soft partitioning unless their `hami-vnpu-core` annotation says otherwise.
    module_pairs: bool = False
    vnpu_core: bool = False
    # Ascend admission (pkg/device/ascend MutateAdmission): `overwriteEnv` gives every container
    # without this chip `ASCEND_VISIBLE_DEVICES=""` (it sees no NPU the runtime would otherwise
    # mount); `runtimeClassName` is set on a pod asking for the chip unless it names one.
    overwrite_env: bool = False
    runtime_class_name: str = ""
    # AWS Neuron: a container naming only the core resource asks for this vendor too.
    core_requests: bool = False
    # HAMi's customFilterRule (Mthreads, MetaX GPU): all of a pod's containers on one card.
    one_card_per_pod: bool = False
    # Whole cards only (Enflame GCU): a card anything uses is ExclusiveDeviceAllocateConflict.
    exclusive_cards: bool = False
    # Capacity registration counting cards by the count resource (MetaX GPU): each card's count
    # (sharing slots) and memory; its cores are `cores_per_card`.
    card_count: int = 0
    card_memory: int = 0
    # MetaX GPU (exclusive): node annotations mapping a card count to a topology loss / score
    # (`{"1":100,"2":200}`), read by its ScoreNode (pkg/device/metax/device.go).
    topology_losses_key: str = ""
    topology_scores_key: str = ""
    # MetaX sGPU: HAMi's --sgpu-topology-aware (the MetaLink term for pods that do not say).
    topology_aware: bool = False
    # Cards shared by sharing slots alone (Biren, Vastai: their Fit checks health, type, UUID,
    # count and mutex, and books neither memory nor cores).
    slots_only: bool = False
    # The cores every registered card is given whatever the plugin wrote (Biren, Vastai: HAMi sets
    # Devcore = 100 at GetNodeDevices, "only for calscore use"); 0 keeps the registered value.
    register_cores: int = 0
    # Vastai's die strategy: dies registered with custominfo `{"DeviceStrategy":"die","AIC":...}`
    # are grouped by their physical card (AIC) in the fit, under mutex, and in the node score.
    die_groups: bool = False

    @property
    def resource_names(self) -> tuple[str, ...]:
        return tuple(n for n in (self.count_resource, self.memory_resource, self.percentage_resource,
                                 self.core_resource) if n)

    @property
    def node_score(self) -> str:
        """The term this vendor adds to the node score (scheduler.vendorscore): "network" for
        Ascend 910 chips (HAMi keys it on the commonWord prefix `Ascend910`), "board" for
        Kunlunxin's whole cards, "metax" for MetaX sGPU (online pods, MetaLink), "" for every other row
        (HAMi's ScoreNode returns 0)."""
        hook = HOOKS[self.hook]
        if hook.network_score_prefix and self.name.startswith(hook.network_score_prefix):
            return "network"
        if hook.whole_card_score and not self.memory_resource:
            return hook.whole_card_score
        if hook.score:
            return hook.score  # MetaX sGPU: online pods, and whole cards of topology-aware pods
        if self.topology_losses_key or self.topology_scores_key:
            return "topology"  # MetaX GPU: the node's topology loss / score for the cards taken
        if self.die_groups:
            return "aic"  # Vastai: the share of each container's dies on one physical card
        return ""

    @property
    def capacity_trigger(self) -> str:
        """The capacity whose presence means the node registers this capacity vendor: its cards
        (AWS Neuron, Kunlunxin, plain cards) or its cores (Cambricon, Mthreads)."""
        if HOOKS[self.hook].counted_by_cards or self.card_count:
            return self.count_resource
        return self.core_resource

    def trim_memory(self, mib: int) -> tuple[int, str]:
        """Ascend trimMemory: the smallest template holding `mib` (memory, template name); a whole
        card (memoryAllocatable, "") up to memoryCapacity; (0, "") beyond."""
        for t in self.templates:
            if mib <= t.memory:
                return t.memory, t.name
        if mib <= self.memory_capacity:
            return self.memory_allocatable, ""
        return 0, ""


@dataclass(frozen=True)
class VendorTable:
    """The vendors in table order, with the lookups the hot paths need built once."""

    vendors: tuple[Vendor, ...]
    by_name: Mapping[str, Vendor] = field(init=False, repr=False)
    by_count: Mapping[str, Vendor] = field(init=False, repr=False)
    others: tuple[Vendor, ...] = field(init=False, repr=False)
    other_counts: frozenset[str] = field(init=False, repr=False)
    other_allocated: tuple[tuple[str, Vendor], ...] = field(init=False, repr=False)
    # What a node must carry for any other vendor to register there (a register annotation, or
    # a capacity): a node with none of them skips the per-row registration work.
    register_annotations: frozenset[str] = field(init=False, repr=False)
    register_capacities: frozenset[str] = field(init=False, repr=False)
    # Ascend chips whose `overwriteEnv` the webhook applies to every container without them.
    overwrite_env: tuple[Vendor, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        names: dict[str, Vendor] = {}
        counts: dict[str, Vendor] = {}
        for v in self.vendors:
            if v.name in names:
                raise VendorError(f"vendor {v.name!r} is listed twice")
            names[v.name] = v
            if v.count_resource:
                if v.count_resource in counts:
                    raise VendorError(f"resource {v.count_resource!r} belongs to both "
                                      f"{counts[v.count_resource].name} and {v.name}")
                counts[v.count_resource] = v
        others = tuple(v for v in self.vendors if not HOOKS[v.hook].nvidia)
        object.__setattr__(self, "by_name", names)
        object.__setattr__(self, "by_count", counts)
        object.__setattr__(self, "others", others)
        object.__setattr__(self, "other_counts", frozenset(
            [v.count_resource for v in others if v.count_resource]
            + [v.core_resource for v in others if v.core_requests and v.core_resource]
            # AMD's and Enflame DRS's admission take a pod naming only their memory or cores.
            + [r for v in others if HOOKS[v.hook].admits_memory_or_cores
               for r in (v.memory_resource, v.core_resource) if r]))
        object.__setattr__(self, "other_allocated",
                           tuple((v.allocated_key, v) for v in others if v.allocated_key))
        object.__setattr__(self, "register_annotations", frozenset(
            v.register_key for v in others if v.register_source == "annotation" and v.register_key))
        object.__setattr__(self, "overwrite_env", tuple(v for v in others if v.overwrite_env))
        object.__setattr__(self, "register_capacities", frozenset(
            v.capacity_trigger for v in others if v.register_source == "capacity" and v.capacity_trigger))

    def get(self, name: str) -> Vendor | None:
        return self.by_name.get(name)

    @property
    def resource_names(self) -> tuple[str, ...]:
        return tuple(n for v in self.vendors for n in v.resource_names)

    def with_vendor(self, vendor: Vendor) -> VendorTable:
        """The table with `vendor` replacing the row of the same name, or appended."""
        rows = [vendor if v.name == vendor.name else v for v in self.vendors]
        if vendor.name not in self.by_name:
            rows.append(vendor)
        return VendorTable(tuple(rows))


# --------------------------------------------------------------------------- parsing

_SCALARS = {
    "name": ("name", str), "family": ("family", str), "hook": ("hook", str),
    "memoryUnit": ("memory_unit", int), "defaultCores": ("default_cores", int),
    "handshake": ("handshake_key", str), "useUUID": ("use_uuid_key", str),
    "noUseUUID": ("nouse_uuid_key", str), "useType": ("use_type_key", str),
    "noUseType": ("nouse_type_key", str), "nodeLock": ("node_lock_key", str),
    "memoryCapacity": ("memory_capacity", int), "memoryAllocatable": ("memory_allocatable", int),
    "allocationAnnotation": ("allocation_key", str), "maxCores": ("max_cores", int),
    "multiCardCores": ("multi_card_cores", bool), "containerNameEnv": ("container_name_env", str),
    "modulePairs": ("module_pairs", bool), "wholeCardResource": ("whole_card_resource", str),
    "coreRequests": ("core_requests", bool), "oneCardPerPod": ("one_card_per_pod", bool),
    "exclusiveCards": ("exclusive_cards", bool),
    "hamiVnpuCore": ("vnpu_core", bool),
    "overwriteEnv": ("overwrite_env", bool), "runtimeClassName": ("runtime_class_name", str),
    "topologyLosses": ("topology_losses_key", str), "topologyScores": ("topology_scores_key", str),
    "topologyAware": ("topology_aware", bool), "slotsOnly": ("slots_only", bool),
    "dieGroups": ("die_groups", bool),
}
_RESOURCES = {"count": "count_resource", "memory": "memory_resource",
              "memoryPercentage": "percentage_resource", "cores": "core_resource"}
_REGISTER = {"source": ("register_source", str), "key": ("register_key", str),
             "format": ("register_format", str), "id": ("capacity_id", str),
             "coresPerCard": ("cores_per_card", int), "cardCount": ("card_count", int),
             "cardMemory": ("card_memory", int), "cores": ("register_cores", int)}
_ALLOCATION = {"toAllocate": "to_allocate_key", "allocated": "allocated_key"}


def _want(value: Any, typ: type, key: str, source: str) -> Any:
    if typ is int and (type(value) is not int):
        raise VendorError(f"{key} in {source}: want an integer, got {value!r}")
    if typ is bool and type(value) is not bool:
        raise VendorError(f"{key} in {source}: want true or false, got {value!r}")
    if typ is str and not isinstance(value, str):
        raise VendorError(f"{key} in {source}: want a string, got {value!r}")
    return value


def _section(entry: Mapping, key: str, where: str, source: str) -> Mapping:
    sec = entry.get(key) or {}
    if not isinstance(sec, Mapping):
        raise VendorError(f"{where}.{key} in {source}: want a mapping, got {sec!r}")
    return sec


def parse_vendor(entry: Any, where: str, source: str) -> Vendor:
    if not isinstance(entry, Mapping):
        raise VendorError(f"{where} in {source}: want a mapping, got {entry!r}")
    values: dict[str, Any] = {}
    for key, value in entry.items():
        if key in _SCALARS:
            attr, typ = _SCALARS[key]
            values[attr] = _want(value, typ, f"{where}.{key}", source)
        elif key == "resources":
            for rk, rv in _section(entry, key, where, source).items():
                if rk not in _RESOURCES:
                    raise VendorError(f"{where}.resources.{rk} in {source}: unknown key")
                values[_RESOURCES[rk]] = _want(rv, str, f"{where}.resources.{rk}", source)
        elif key == "register":
            for rk, rv in _section(entry, key, where, source).items():
                if rk not in _REGISTER:
                    raise VendorError(f"{where}.register.{rk} in {source}: unknown key")
                attr, typ = _REGISTER[rk]
                values[attr] = _want(rv, typ, f"{where}.register.{rk}", source)
        elif key == "allocation":
            for rk, rv in _section(entry, key, where, source).items():
                if rk not in _ALLOCATION:
                    raise VendorError(f"{where}.allocation.{rk} in {source}: unknown key")
                values[_ALLOCATION[rk]] = _want(rv, str, f"{where}.allocation.{rk}", source)
        elif key == "templates":
            values["templates"] = _templates(value, f"{where}.templates", source)
        elif key == "legalMemory":
            if not isinstance(value, list) or not all(type(x) is int for x in value):
                raise VendorError(f"{where}.legalMemory in {source}: want a list of integers, got {value!r}")
            values["legal_memory"] = tuple(value)
        elif key == "memoryPerCard":
            values["memory_per_card"] = card_sizes(value, f"{where}.memoryPerCard", source)
        else:
            raise VendorError(f"{where}.{key} in {source}: unknown key")
    for required in ("name", "family"):
        if not values.get(required):
            raise VendorError(f"{where}.{required} in {source}: required")
    if values.get("memory_per_card") and not values.get("legal_memory"):
        values["legal_memory"] = legal_slices(values["memory_per_card"])
    v = Vendor(**values)
    _check(v, where, source)
    return v


def card_sizes(value: Any, where: str, source: str) -> tuple[int, ...]:
    """`memoryPerCard`: one positive integer or a list of them (memory units per card model)."""
    items = value if isinstance(value, list) else [value]
    if not items or not all(type(x) is int and x > 0 for x in items):
        raise VendorError(f"{where} in {source}: want a positive integer or a list of them, got {value!r}")
    return tuple(items)


def legal_slices(sizes: Sequence[int]) -> tuple[int, ...]:
    """The sGPU memory sizes a card model takes: powers of two from 2 below its size, and the
    whole card; for several models their union, sorted (admission lets any model's size in, the
    fit then checks the chosen card)."""
    out: set[int] = set()
    for size in sizes:
        p = 2
        while p < size:
            out.add(p)
            p *= 2
        out.add(size)
    return tuple(sorted(out))


def _templates(items: Any, where: str, source: str) -> tuple[Template, ...]:
    if not isinstance(items, list):
        raise VendorError(f"{where} in {source}: want a list, got {items!r}")
    out = []
    for i, t in enumerate(items):
        if not isinstance(t, Mapping) or not isinstance(t.get("name"), str) or type(t.get("memory")) is not int:
            raise VendorError(f"{where}[{i}] in {source}: want {{name: str, memory: int}}, got {t!r}")
        out.append(Template(t["name"], t["memory"], int(t.get("aiCore") or 0), int(t.get("aiCPU") or 0)))
    # HAMi sorts templates by memory at start-up (InitDevices).
    return tuple(sorted(out, key=lambda t: t.memory))


def _check(v: Vendor, where: str, source: str) -> None:
    if v.hook not in HOOKS:
        raise VendorError(f"{where}.hook in {source}: {v.hook!r} is not one of {', '.join(HOOKS)}")
    if v.register_source not in REGISTER_SOURCES:
        raise VendorError(f"{where}.register.source in {source}: {v.register_source!r} is not one of "
                          f"{', '.join(REGISTER_SOURCES)}")
    if v.register_format not in REGISTER_FORMATS:
        raise VendorError(f"{where}.register.format in {source}: {v.register_format!r} is not one of "
                          f"{', '.join(REGISTER_FORMATS)}")
    if not v.count_resource:
        raise VendorError(f"{where}.resources.count in {source}: required")
    if v.register_source == "annotation" and not v.register_key:
        raise VendorError(f"{where}.register.key in {source}: required for annotation registration")
    # Cards counted by their cores (Cambricon, Mthreads), or by the count resource itself
    # (AWS Neuron, Kunlunxin XPU).
    counted_by_cards = HOOKS[v.hook].counted_by_cards or v.card_count > 0
    if v.register_source == "capacity" and (not (v.core_resource or counted_by_cards) or not v.capacity_id):
        raise VendorError(f"{where}.register in {source}: capacity registration needs resources.cores "
                          "and register.id")
    if v.memory_unit < 1:
        raise VendorError(f"{where}.memoryUnit in {source}: must be >= 1")
    if not HOOKS[v.hook].nvidia and not v.allocated_key:
        raise VendorError(f"{where}.allocation in {source}: allocated is required")


def parse_vendor_table(doc: Any, source: str) -> VendorTable:
    """`{vendors: [entry, ...]}` as in config/vendors.yaml."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("vendors"), list):
        raise VendorError(f"(top level) in {source}: want a mapping with a `vendors:` list")
    rows = tuple(parse_vendor(e, f"vendors[{i}]", source) for i, e in enumerate(doc["vendors"]))
    try:
        return VendorTable(rows)
    except VendorError as exc:
        raise VendorError(f"{exc} in {source}") from None


# --------------------------------------------------------------------------- HAMi device config

# HAMi device-config sections (charts/hami/templates/scheduler/device-configmap.yaml) whose
# resource names override a table row, by family.
_SECTION_FAMILY = {"cambricon": "cambricon", "hygon": "hygon", "mthreads": "mthreads",
                   "awsneuron": "awsneuron", "kunlun": "kunlunxin", "enflame": "enflame",
                   "metax": "metax", "amd": "amd", "biren": "biren", "vastai": "vastai"}
_SECTION_KEYS = {"resourceCountName": "count_resource", "resourceMemoryName": "memory_resource",
                 "resourceCoreName": "core_resource", "resourceName": "count_resource"}
_SECTION_INTS = {"memoryFactor": "memory_unit"}  # hygon.memoryFactor multiplies memory asks
# Sections whose family has several rows name each row's resources with their own keys (HAMi
# v2.10's chart: `kunlun:` resourceCountName is the whole XPU, resourceV*Name the vXPU; `metax:`
# resourceCountName the exclusive GPU, resourceV*Name the sGPU; `enflame:` resourceNameGCU the
# whole GCU). Row name -> {section key: row attribute}; a key of another row never touches it.
_SECTION_ROWS = {
    "kunlun": {"kunlun": {"resourceCountName": "count_resource"},
               "XPU": {"resourceVCountName": "count_resource", "resourceVMemoryName": "memory_resource"}},
    "metax": {"Metax-GPU": {"resourceCountName": "count_resource"},
              "Metax-SGPU": {"resourceVCountName": "count_resource", "resourceVMemoryName": "memory_resource",
                             "resourceVCoreName": "core_resource"}},
    "enflame": {"GCU": {"resourceNameGCU": "count_resource"},
                "Enflame": {"resourceNameDRSGCU": "count_resource", "resourceNameGCUMemory": "memory_resource",
                            "resourceNameGCUCore": "core_resource"}},
}


def _section_changes(section: str, sec: Mapping, row: Vendor, source: str) -> dict[str, Any]:
    """What one HAMi device-config section changes in one row of its family."""
    keys = _SECTION_ROWS.get(section, {}).get(row.name) if section in _SECTION_ROWS else _SECTION_KEYS
    changes = {attr: sec[k] for k, attr in (keys or {}).items() if isinstance(sec.get(k), str) and sec[k]}
    changes.update({attr: sec[k] for k, attr in _SECTION_INTS.items() if type(sec.get(k)) is int and sec[k] >= 1})
    if section == "metax" and HOOKS[row.hook].sgpu and isinstance(sec.get("sgpuTopologyAware"), bool):
        changes["topology_aware"] = sec["sgpuTopologyAware"]
    if section == "mthreads" and sec.get("memoryPerCard") is not None:
        sizes = card_sizes(sec["memoryPerCard"], f"{section}.memoryPerCard", source)
        changes.update(memory_per_card=sizes, legal_memory=legal_slices(sizes))
    return changes


def apply_device_config(table: VendorTable, doc: Any, source: str) -> VendorTable:
    """HAMi's device config overrides the table as HAMi's own does: the `<vendor>:` sections rename
    resources; `vnpus:` (a list, or `{configs: [...]}`) defines Ascend chips, each replacing the row
    with its commonWord or adding one; `vendors:` (our row format) replaces or adds rows."""
    if not isinstance(doc, Mapping):
        return table
    for section, family in _SECTION_FAMILY.items():
        sec = doc.get(section)
        if not isinstance(sec, Mapping):
            continue
        for v in table.vendors:
            if v.family == family and not HOOKS[v.hook].nvidia:
                changes = _section_changes(section, sec, v, source)
                if changes:
                    table = table.with_vendor(replace(v, **changes))
    vnpus = doc.get("vnpus")
    every_chip: dict[str, Any] = {}
    if isinstance(vnpus, Mapping):
        # HAMi's settings for every chip (VNPUs: hamiVnpuCore, overwriteEnv, runtimeClassName).
        for key, (attr, typ) in (("hamiVnpuCore", ("vnpu_core", bool)), ("overwriteEnv", ("overwrite_env", bool)),
                                 ("runtimeClassName", ("runtime_class_name", str))):
            if vnpus.get(key) is not None:
                every_chip[attr] = _want(vnpus[key], typ, f"vnpus.{key}", source)
        vnpus = vnpus.get("configs")
    if isinstance(vnpus, list):
        for i, chip in enumerate(vnpus):
            table = table.with_vendor(_ascend_chip(chip, f"vnpus[{i}]", source))
    if every_chip:  # (hamiVnpuCore is the default: a node's hami-vnpu-core annotation wins)
        for v in table.vendors:
            if HOOKS[v.hook].vnpu_chips:
                table = table.with_vendor(replace(v, **every_chip))
    extra = doc.get("vendors")
    if isinstance(extra, list):
        for i, e in enumerate(extra):
            table = table.with_vendor(parse_vendor(e, f"vendors[{i}]", source))
    return table


def _ascend_chip(chip: Any, where: str, source: str) -> Vendor:
    """One `vnpus:` entry of HAMi's device config as a table row (keys as pkg/device/ascend)."""
    if not isinstance(chip, Mapping):
        raise VendorError(f"{where} in {source}: want a mapping, got {chip!r}")
    cw = chip.get("commonWord")
    res = chip.get("resourceName")
    if not isinstance(cw, str) or not cw or not isinstance(res, str) or not res:
        raise VendorError(f"{where} in {source}: commonWord and resourceName are required")
    ints = {}
    for k in ("memoryAllocatable", "memoryCapacity", "memoryFactor"):
        val = chip.get(k, 0)
        if type(val) is not int:
            raise VendorError(f"{where}.{k} in {source}: want an integer, got {val!r}")
        ints[k] = val
    flags: dict[str, Any] = {}
    for k, attr in (("superPod", "module_pairs"), ("hamiVnpuCore", "vnpu_core"), ("overwriteEnv", "overwrite_env")):
        val = chip.get(k, False)
        if type(val) is not bool:
            raise VendorError(f"{where}.{k} in {source}: want true or false, got {val!r}")
        flags[attr] = val
    flags["runtime_class_name"] = _want(chip.get("runtimeClassName") or "", str, f"{where}.runtimeClassName", source)
    return Vendor(
        name=cw, family="ascend", hook="ascend", count_resource=res, **flags,
        memory_resource=str(chip.get("resourceMemoryName") or ""),
        core_resource=str(chip.get("resourceCoreName") or ""),
        register_key=f"hami.io/node-register-{cw}", register_format="json",
        handshake_key=f"hami.io/node-handshake-{cw}",
        to_allocate_key=f"hami.io/{cw}-devices-to-allocate",
        allocated_key=f"hami.io/{cw}-devices-allocated",
        use_uuid_key=f"hami.io/use-{cw}-uuid", nouse_uuid_key=f"hami.io/no-use-{cw}-uuid",
        templates=_templates(chip.get("templates") or [], f"{where}.templates", source),
        memory_capacity=ints["memoryCapacity"], memory_allocatable=ints["memoryAllocatable"],
        memory_unit=max(ints["memoryFactor"], 1),  # HAMi: a MemoryFactor above 1 multiplies memory asks
        allocation_key=f"huawei.com/{cw}",
    )
