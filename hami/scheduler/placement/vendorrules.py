"""Rules of single vendors that HAMi's common vendor Fit does not have (pure, no I/O).

`fit.fit_vendor_devices` walks a vendor's devices as every HAMi vendor package does; the few
places where one vendor's package differs are here, as plain functions over values:

* Ascend vNPU modes (pkg/device/ascend/device.go Fit at HAMi v2.10.0; PR #2035 "allow
  mode-agnostic pods to schedule across vNPU-template and HAMi-core nodes"): a pod annotated
  `huawei.com/vnpu-mode: hami-core` (HAMi-core soft partitioning) only fits a node that runs it
  (the node annotation `hami-vnpu-core: "true"`, else the chip's `hamiVnpuCore` default), else the
  node is refused as a whole, `ModeNotFit`; any other pod fits either kind of node. In hami-core
  mode every card counts 100 cores whatever it registered.
* Ascend 910C super-pod pairing (`superPod` / `modulePairs`): a physical module is two NPUs
  (indexes 2k and 2k+1); several NPUs are taken as whole modules only, fuller modules first.
* Ascend 910 super-pod networks (pkg/device/ascend/device.go Fit, computeBestCombination,
  ScoreNode): when every NPU of a 910 chip's node names a `NetworkID` (its custominfo), the walk
  collects every fitting NPU; several NPUs are then taken from the networks holding most of
  them, and the node score gains 10 x (share of each container's NPUs on its largest network).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

from hami.device.codec.enflame import choose_profile
from hami.scheduler.placement.policy import f32

VNPU_MODE = "huawei.com/vnpu-mode"
VNPU_HAMI_CORE = "hami-core"
NODE_VNPU_CORE = "hami-vnpu-core"  # node annotation: "true" when the node runs HAMi-core for Ascend
MODULE_NPUS = 2  # NPUs per Ascend 910C module

T = TypeVar("T")


def vnpu_mode(annotations: Mapping[str, str] | None) -> str:
    return (annotations or {}).get(VNPU_MODE, "")


def mode_refuses_node(mode: str, node_hami_core: bool) -> bool:
    """Ascend Fit's node gate (v2.10.0): only a hami-core pod is refused, on a node without HAMi-core."""
    return mode == VNPU_HAMI_CORE and not node_hami_core


def whole_modules(candidates: Sequence[T], index_of, want: int) -> list[T]:
    """computeBestCombination910C: group the fitting NPUs by module (index // 2), take whole
    modules (both NPUs fit) in the order the walk met them until `want` NPUs are covered. The
    caller refuses the node when the result is not exactly `want` long (a partial module is never
    handed out, and an odd `want` can only be met in hami-core split mode, where no pairing runs)."""
    modules: dict[int, list[T]] = {}
    for c in candidates:
        modules.setdefault(index_of(c) // MODULE_NPUS, []).append(c)
    out: list[T] = []
    left = want
    for members in modules.values():
        if left <= 0:
            break
        if len(members) == MODULE_NPUS:
            out.extend(members)
            left -= MODULE_NPUS
    return out


ASCEND_910 = "Ascend910"  # HAMi's Ascend910Prefix: the chips whose NPUs group by NetworkID
NETWORK_WEIGHT = 10  # HAMi's Ascend910NetworkWeight


def uses_networks(vendor_name: str, devices: Sequence, networks: Mapping[str, int | None] | None) -> bool:
    """HAMi's needTopology for Ascend: a 910 chip, and every device of the fit names a NetworkID."""
    return (networks is not None and vendor_name.startswith(ASCEND_910)
            and all(d.id in networks for d in devices))


def network_groups(candidates: Sequence[T], uuid_of, networks: Mapping[str, int | None], want: int) -> list[T]:
    """computeBestCombination: the fitting NPUs grouped by NetworkID (numbers only), the networks
    with most of them first, taken in walk order until `want`. HAMi breaks ties between networks
    of the same size by Go map order (random); here the network met first in the walk goes first."""
    return _fullest_groups_first(candidates, lambda c: networks.get(uuid_of(c)), want)


def _fullest_groups_first(candidates: Sequence[T], key_of, want: int) -> list[T]:
    """Group the candidates by `key_of` (None: left out), the biggest groups first (stable: walk
    order breaks ties), taken until `want` (Ascend networks, Vastai cards)."""
    groups: dict = {}
    for c in candidates:
        key = key_of(c)
        if key is not None:
            groups.setdefault(key, []).append(c)
    out: list[T] = []
    for members in sorted(groups.values(), key=len, reverse=True):
        for c in members:
            out.append(c)
            if len(out) == want:
                return out
    return out


_NO_SCORE = object()  # a chosen device that makes the whole term 0


def _largest_share(containers: Sequence[Sequence[str]], key_of) -> float:
    """Per container with devices, the share of them in its largest group (`key_of(uuid)`: the
    group, None to leave the device out, `_NO_SCORE` to make the term 0), float32 sums."""
    score = 0.0
    for uuids in containers:
        counts: dict = {}
        for u in uuids:
            key = key_of(u)
            if key is _NO_SCORE:
                return 0.0
            if key is not None:
                counts[key] = counts.get(key, 0) + 1
        total = sum(counts.values())
        if total:
            score = f32(score + f32(f32(max(counts.values())) / f32(total)))
    return score


def network_score(containers: Sequence[Sequence[str]], networks: Mapping[str, int | None] | None) -> float:
    """Ascend ScoreNode for one 910 chip: per container with devices, the share of its NPUs on
    its largest network (float32 sums), times 10; 0 when any chosen NPU names no NetworkID."""
    if not networks:
        return 0.0
    return f32(_largest_share(containers, lambda u: networks[u] if u in networks else _NO_SCORE) * NETWORK_WEIGHT)


# --------------------------------------------------------------------------- AWS Neuron

# HAMi's reason keys (pkg/device/common) the Neuron fit gives; fit.py names the same strings.
_NOT_HEALTH = "CardNotHealth"
_TYPE_MISMATCH = "CardTypeMismatch"
_UUID_MISMATCH = "CardUuidMismatch"
_SLICING_EXHAUSTED = "CardTimeSlicingExhausted"
_EXCLUSIVE_CONFLICT = "ExclusiveDeviceAllocateConflict"
_INSUFFICIENT_CORE = "CardInsufficientCore"
_NUMA_NOT_FIT = "NumaNotFit"
NEURON_GROUP_SIZES = (1, 4, 8, 16)  # devices a non-ring node hands out together, aligned
RING = "ring"  # mode of the devices of an Inferentia node (codec.awsneuron)


def _free_bits(used: int, want: int, width: int) -> int:
    """addCoreUsage: the lowest `want` bits of `width` that `used` leaves free."""
    got = 0
    for bit in range(width):
        if want <= 0:
            break
        if not used & (1 << bit):
            got |= 1 << bit
            want -= 1
    return got


def neuron_group(devices: Sequence, count: int) -> list:
    """graphSelect: `count` free, healthy devices next to each other by index; on a ring
    (Inferentia) any run, elsewhere only runs of 1, 4, 8 or 16 starting at a multiple of the size."""
    ordered = sorted(devices, key=lambda d: d.index)
    if not ordered:
        return []
    ring = ordered[0].mode == RING
    if not ring and count not in NEURON_GROUP_SIZES:
        return []
    step = 1 if ring else count
    for start in range(0, len(ordered) - count + 1, step):
        window = ordered[start:start + count]
        if all(d.used == 0 and d.health for d in window):
            return window
    return []


def fit_neuron(devices: Sequence, request, vendor, use_uuids, nouse_uuids, is_mutex: bool, make):
    """AWS Neuron's Fit (pkg/device/awsneuron): several devices as one group (NumaNotFit when no
    group is free, every device whole); one device walked from the end with its cores as mask
    bits (`popcount(total) - popcount(used) >= cores asked`). `make(dev, usedmem, usedcores)`
    builds the ContainerDevice. Returns (fits, devices, reason counts). A container's usedcores
    are the bits it takes (HAMi writes the device's whole mask after it, which its own usage sum
    then counts twice for a second container on a device)."""
    if request.nums > 1:
        group = neuron_group(devices, request.nums)
        if not group:
            return False, [], {_NUMA_NOT_FIT: 1}
        return True, [make(d, d.totalmem, d.totalcore) for d in group], {}
    reason: dict[str, int] = {}
    for dev in reversed(devices):
        if not dev.health:
            key = _NOT_HEALTH
        elif request.type not in dev.type or request.type != vendor.name:
            key = _TYPE_MISMATCH
        elif (use_uuids is not None and dev.id not in use_uuids) or (
                nouse_uuids is not None and dev.id in nouse_uuids):
            key = _UUID_MISMATCH
        elif dev.count <= dev.used:
            key = _SLICING_EXHAUSTED
        elif is_mutex and dev.used > 0:
            key = _EXCLUSIVE_CONFLICT
        elif dev.totalcore.bit_count() - (dev.usedcores & dev.totalcore).bit_count() < request.coresreq:
            key = _INSUFFICIENT_CORE
        else:
            bits = _free_bits(dev.usedcores, request.coresreq, dev.totalcore.bit_length())
            return True, [make(dev, 0, bits)], {}
        reason[key] = reason.get(key, 0) + 1
    return False, [], reason


# --------------------------------------------------------------------------- Kunlunxin XPU

# An 8-XPU board: two wings of 4 (0-3, 4-7). Cards linked across the wings, pairs inside a wing,
# and the groups of 4 that are fully linked (pkg/device/kunlun topo.go).
XPU_CROSS_PAIRS = ((0, 4), (1, 5), (2, 6), (3, 7))
XPU_WING_PAIRS = ((0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3), (4, 5), (4, 6), (4, 7), (5, 6), (5, 7), (6, 7))
XPU_QUADS = ((0, 1, 4, 5), (2, 3, 6, 7), (0, 2, 4, 6), (1, 3, 5, 7), (0, 3, 4, 7), (1, 2, 5, 6))
_ODD_ORDER = (1, 3, 2, 4)  # the wing sizes tried, in order, for a one-card request


def _xpu_pick(free: Sequence[int], start: int, count: int, total: int) -> list[int]:
    """devicepick: the first `count` free cards from `start` on (fewer when they run out)."""
    out = [i for i in free if start <= i < min(8, total)]
    return out[:count]


def _xpu_interconnect(free: Sequence[int], count: int) -> list[int]:
    if count == 2:
        for a in free:
            for b in free:
                if a != b and ((a, b) in XPU_CROSS_PAIRS or (b, a) in XPU_CROSS_PAIRS):
                    return [a, b]
    if count == 4:
        have = set(free)
        if len(have) in (4, 5):
            for quad in XPU_QUADS:
                if have >= set(quad):
                    return list(quad)
        if len(have) == 6:
            chosen: list[int] = []
            for quad in XPU_QUADS:
                if have >= set(quad):
                    chosen = list(quad)
                    rest = have - set(quad)
                    if any(rest >= set(p) for p in XPU_CROSS_PAIRS + XPU_WING_PAIRS):
                        return chosen  # the two cards left over stay linked to each other
            return chosen
    return []


def xpu_select(devices: Sequence, count: int, usable=None) -> list[int]:
    """graghSelect over the board (usable: a whole XPU nothing runs on, or `usable(dev)`): 8 takes
    the board; 1, 2 or 4 take cards from the wing whose usable cards match the request most snugly
    (for one card a wing of 1, then 3, 2, 4), else linked cards across the wings; other counts never
    fit. Cards are taken by index (HAMi walks its score-sorted list by position)."""
    ordered = sorted(devices, key=lambda d: d.index)
    free = [d.index for d in ordered if (usable(d) if usable is not None else d.used == 0)]
    left = sum(1 for i in free if i < 4)
    right = len(free) - left
    if count == 8:
        return list(range(8)) if left + right == 8 else []
    if count not in (1, 2, 4):
        return []
    if left >= count or right >= count:
        for slots in range(count, 5):
            want = _ODD_ORDER[slots - 1] if count % 2 else slots
            if left == want:
                return _xpu_pick(free, 0, count, len(ordered))
            if right == want:
                return _xpu_pick(free, 4, count, len(ordered))
    return _xpu_interconnect(free, count)


# Both Kunlunxin rows read both pairs of use/nouse UUID annotations (pkg/device/kunlun device.go
# and vdevice.go Fit at v2.10.0: hami.io/{use,no-use}-xpu-uuid and baidu.com/{use,nouse}-gpuuuid).
KUNLUN_UUID_KEYS = (("hami.io/use-xpu-uuid", "hami.io/no-use-xpu-uuid"),
                    ("baidu.com/use-gpuuuid", "baidu.com/nouse-gpuuuid"))
_UUID_MISMATCH = "CardUuidMismatch"


def fit_xpu(devices: Sequence, request, make, shared: bool = False, is_mutex: bool = False, uuid_ok=None):
    """Kunlunxin's Fit: whole XPUs (each takes its memory and cores), or vXPU slices (`shared`: a
    card is usable when it has the memory and is empty or runs slices of the size asked,
    `usedmem / used == memreq`; mutex: only empty cards). `uuid_ok(id)`: the pod's use/nouse UUID
    annotations (KUNLUN_UUID_KEYS), applied card by card inside the board walk as HAMi's fitFn, so
    the topology still sees every card. When no cards are picked: under mutex
    ExclusiveDeviceAllocateConflict for each card already in use, else CardUuidMismatch for each
    card the annotations refused, else NumaNotFit."""
    refused: set[str] = set()

    def allowed(d) -> bool:
        if uuid_ok is not None and not uuid_ok(d.id):
            refused.add(d.id)
            return False
        return True

    def usable(d):
        if not allowed(d):
            return False
        if not shared:
            return d.used == 0
        if d.totalmem - d.usedmem < request.memreq:
            return False
        return d.used == 0 or (not is_mutex and d.usedmem // d.used == request.memreq)

    chosen = xpu_select(devices, request.nums, usable)
    if len(chosen) != request.nums:
        busy = sum(1 for d in devices if d.used > 0)
        if shared and is_mutex and busy:
            return False, [], {_EXCLUSIVE_CONFLICT: busy}
        if refused:
            return False, [], {_UUID_MISMATCH: len(refused)}
        return False, [], {_NUMA_NOT_FIT: 1}
    by_index = {d.index: d for d in devices}
    if shared:
        return True, [make(by_index[i], request.memreq, request.coresreq) for i in chosen], {}
    return True, [make(by_index[i], by_index[i].totalmem, by_index[i].totalcore) for i in chosen], {}


# --------------------------------------------------------------------------- MetaX sGPU

METAX_QOS = "metax-tech.com/sgpu-qos-policy"
METAX_APP_CLASS = "metax-tech.com/sgpu-app-class"
METAX_QOS_POLICIES = ("best-effort", "fixed-share", "burst-share")
METAX_APP_CLASSES = ("online", "offline")
_APP_CLASS_MISMATCH = "CardAppClassMismatch"
_CARD_UNHEALTHY = "CardUnhealthy"  # MetaX's own reason keys (pkg/device/metax sdevice.go)
_QOS_MISMATCH = "CardQosPolicyMismatch"
_MEMORY = "CardInsufficientMemory"
_EXHAUSTED = "CardComputeUnitsExhausted"
_ALLOCATED_INSUFFICIENT = "AllocatedCardsInsufficientRequest"


def app_class_fits(request_class: str, used: int, counts: Sequence[int] | None) -> bool:
    """checkAppClass: an idle card takes any pod; a card running online/offline pods takes only
    online/offline pods (an offline pod not where an online one runs), a card running other pods
    only other pods. `counts` = (online, offline) pods on the card."""
    if used == 0:
        return True
    online, offline = counts if counts is not None else (0, 0)
    classed = request_class in METAX_APP_CLASSES
    if (online > 0 or offline > 0) != classed:
        return False
    return not (online > 0 and request_class == "offline")


def online_order_key(counts: Sequence[int] | None) -> tuple[bool, int, int]:
    """prioritizeOnlineDevices' order for an online pod: cards with fewer online pods first, cards
    running only offline pods last (fewer of them first), ties by fewer offline pods."""
    online, offline = counts if counts is not None else (0, 0)
    if online == 0 and offline > 0:
        return (True, offline, 0)
    return (False, online, offline)


METAX_TOPOLOGY_AWARE = "metax-tech.com/sgpu-topology-aware"
_GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_GO_FALSE = ("0", "f", "F", "FALSE", "false", "False")


def metax_topology_aware(annotations: Mapping[str, str], default: bool = False) -> bool:
    """The pod's `metax-tech.com/sgpu-topology-aware` (Go ParseBool), else HAMi's
    `--sgpu-topology-aware` default (off)."""
    value = annotations.get(METAX_TOPOLOGY_AWARE)
    return True if value in _GO_TRUE else False if value in _GO_FALSE else default


def metax_scored(annotations: Mapping[str, str], default: bool = False) -> bool:
    """Whether MetaX sGPU's ScoreNode can add a term for this pod: an online pod, or a
    topology-aware one (whose whole cards are scored by MetaLink; `default` is the row's
    `topologyAware`, HAMi's --sgpu-topology-aware)."""
    return annotations.get(METAX_APP_CLASS) == "online" or metax_topology_aware(annotations, default)


def prioritize_link_zones(candidates: Sequence[T], zone_of, want: int) -> list[T]:
    """prioritizeExclusiveDevices: whole cards for a pod that names no app class, MetaLink first:
    the smallest zone holding all `want`, else zones from the smallest up, then cards in no zone.
    HAMi orders zones of the same size by Go map order (random); here the zone met first."""
    zones: dict[int, list[T]] = {}
    loose: list[T] = []
    for c in candidates:
        z = zone_of(c)
        if z > 0:
            zones.setdefault(z, []).append(c)
        else:
            loose.append(c)
    groups = sorted(zones.values(), key=len)
    for g in groups:
        if len(g) >= want:
            return g[:want]
    out = [c for g in groups for c in g] + loose
    return out[:want] if len(out) >= want else list(candidates[:want])


def jittery_qos(request_qos: str, devices: Sequence, registered: Mapping[str, str]) -> dict[str, str]:
    """addJitteryQos: the QoS policy each card the pod was just given will switch to (the pod's,
    none for a whole card), for the cards whose registered policy differs; the fit uses it until
    the card registers it (JitteryQosCache, pkg/device/metax/qos.go)."""
    out = {}
    for cd in devices:
        if cd.uuid in registered:
            expected = "" if cd.usedcores == 100 else request_qos
            if registered[cd.uuid] != expected:
                out[cd.uuid] = expected
    return out


def fit_metax(devices: Sequence, request, use_uuids, nouse_uuids, is_mutex: bool,
              annotations: Mapping[str, str], make, app_classes: Mapping[str, Sequence[int]] | None = None,
              link_zones: Mapping[str, int] | None = None, qos_expected: Mapping[str, str] | None = None):
    """MetaX sGPU's Fit: every device walked from the end is a candidate unless refused (type,
    CardUnhealthy, CardAppClassMismatch, QoS policy, UUID, slots, mutex, memory; for pods that are
    not `online`, cores, exclusive use and exhausted compute); too few candidates is
    AllocatedCardsInsufficientRequest, else the first ones walked, or for an `online` pod the
    cards with the fewest online pods (`online_order_key`; HAMi's unstable sort, stable here), and
    a whole-card request of a pod naming no app class MetaLink zones (`prioritize_link_zones`). A
    used card keeps its QoS policy (the device's mode) unless the request takes it whole; an
    `online` pod uses no cores of its own. `app_classes`: {card: (online, offline) pods}."""
    reason: dict[str, int] = {}
    app_class = annotations.get(METAX_APP_CLASS, "")
    online = app_class == "online"
    req_qos = annotations.get(METAX_QOS, "")
    classes = app_classes or {}
    candidates = []
    for dev in reversed(devices):
        memreq = request.memreq if request.memreq > 0 else dev.totalmem * request.mempercentagereq // 100
        if request.type != dev.type:
            key = _TYPE_MISMATCH
        elif not dev.health:
            key = _CARD_UNHEALTHY
        elif not app_class_fits(app_class, dev.used, classes.get(dev.id)):
            key = _APP_CLASS_MISMATCH
        elif not online and dev.used > 0 and request.coresreq != 100 and (
                qos_expected.get(dev.id, dev.mode) if qos_expected else dev.mode) not in ("", req_qos):
            key = _QOS_MISMATCH
        elif (use_uuids is not None and dev.id not in use_uuids) or (
                nouse_uuids is not None and dev.id in nouse_uuids):
            key = _UUID_MISMATCH
        elif dev.count <= dev.used:
            key = _SLICING_EXHAUSTED
        elif is_mutex and dev.used > 0:
            key = _EXCLUSIVE_CONFLICT
        elif dev.totalmem - dev.usedmem < memreq:
            key = _MEMORY
        elif not online and dev.totalcore - dev.usedcores < request.coresreq:
            key = _INSUFFICIENT_CORE
        elif not online and dev.totalcore == 100 and request.coresreq == 100 and dev.used > 0:
            key = _EXCLUSIVE_CONFLICT
        elif not online and dev.totalcore != 0 and dev.usedcores == dev.totalcore and request.coresreq == 0:
            key = _EXHAUSTED
        else:
            candidates.append((dev, memreq))
            continue
        reason[key] = reason.get(key, 0) + 1
    if len(candidates) < request.nums:
        if candidates:
            reason[_ALLOCATED_INSUFFICIENT] = len(candidates)
        return False, [], reason
    if len(candidates) > request.nums:
        if online:
            candidates.sort(key=lambda c: online_order_key(classes.get(c[0].id)))
        elif METAX_APP_CLASS not in annotations and request.coresreq == 100:
            zones = link_zones or {}
            candidates = prioritize_link_zones(candidates, lambda c: zones.get(c[0].id, 0), request.nums)
    cores = 0 if online else request.coresreq
    return True, [make(dev, mem, cores) for dev, mem in candidates[:request.nums]], {}


# --------------------------------------------------------------------------- AMD Instinct vGPU

_CARD_NOT_HEALTH = "CardNotHealth"
_TYPE_MISMATCH = "CardTypeMismatch"
_SLOTS_EXHAUSTED = "CardTimeSlicingExhausted"
_CORE = "CardInsufficientCore"


def card_walk(devices: Sequence, nums: int, type_ok, uuid_ok, is_mutex: bool, share, make):
    """The walk AMD's and Enflame DRS's Fit share (their device.go at v2.10.0), from the end:
    health, type (`type_ok(card type)`, None: any), the pod's UUID annotations (`uuid_ok(id)`),
    sharing slots, mutex, then `share(dev)`: (memory, cores) the card gives, or the reason it does
    not; the first `nums` cards that fit are chosen (`make(dev, memory, cores)`). Returns (fits,
    chosen, reason counts)."""
    chosen: list = []
    reason: dict[str, int] = {}
    for dev in reversed(devices):
        if not dev.health:
            key = _CARD_NOT_HEALTH
        elif type_ok is not None and not type_ok(dev.type):
            key = _TYPE_MISMATCH
        elif not uuid_ok(dev.id):
            key = _UUID_MISMATCH
        elif dev.count <= dev.used:
            key = _SLOTS_EXHAUSTED
        elif is_mutex and dev.used > 0:
            key = _EXCLUSIVE_CONFLICT
        else:
            got = share(dev)
            if got.__class__ is str:
                key = got
            else:
                if nums > 0:
                    nums -= 1
                    chosen.append(make(dev, *got))
                if nums == 0:
                    return True, chosen, {}
                continue
        reason[key] = reason.get(key, 0) + 1
    if chosen:
        reason[_ALLOCATED_INSUFFICIENT] = len(chosen)
    return False, chosen, reason


def fit_amd(devices: Sequence, request, type_ok, uuid_ok, is_mutex: bool, make):
    """AMD's Fit (pkg/device/amd/device.go at v2.10.0, PR #2290): `card_walk` with the amd.com
    use/nouse gputype and gpu-uuid annotations; memory 0 asks for the whole card; cores are
    `coresreq` percent of the card's registered compute units (at least 1, at most all), all of
    them for a whole-card memory ask without cores."""
    def share(dev):
        mem = request.memreq if request.memreq > 0 or dev.totalmem <= 0 else dev.totalmem
        if dev.totalmem - dev.usedmem < mem:
            return _MEMORY
        cores = 0
        if request.coresreq > 0:
            if dev.totalcore <= 0:
                return _CORE
            cores = min(max(dev.totalcore * request.coresreq // 100, 1), dev.totalcore)
        elif dev.totalmem > 0 and mem >= dev.totalmem:
            cores = dev.totalcore
        return _CORE if dev.totalcore - dev.usedcores < cores else (mem, cores)

    return card_walk(devices, request.nums, type_ok, uuid_ok, is_mutex, share, make)


# --------------------------------------------------------------------------- Vastai dies

VASTAI_DIE = "die"


def die_mode(devices: Sequence, dies: Mapping[str, tuple[str | None, str | None]] | None) -> bool:
    """isDieMode (pkg/device/vastai/device.go at v2.10.0): the first device of the fit's list
    says `DeviceStrategy: die`."""
    return bool(devices) and dies is not None and dies.get(devices[0].id, (None, None))[0] == VASTAI_DIE


def occupied_cards(devices: Sequence, dies: Mapping[str, tuple[str | None, str | None]]) -> frozenset[str]:
    """Under mutex in die mode: the physical cards (AIC) any of whose dies is in use."""
    return frozenset(aic for d in devices if d.used > 0 for aic in (dies.get(d.id, (None, None))[1],) if aic)


def card_groups(candidates: Sequence[T], uuid_of, dies: Mapping[str, tuple[str | None, str | None]],
                want: int) -> list[T]:
    """Vastai's computeBestCombination: the fitting dies grouped by their card (AIC; dies without
    one are left out), the cards with most of them first (stable: HAMi's map order, here the walk's,
    breaks ties), taken until `want`."""
    return _fullest_groups_first(candidates, lambda c: dies.get(uuid_of(c), (None, None))[1], want)


def aic_score(containers: Sequence[Sequence[str]], dies: Mapping[str, tuple[str | None, str | None]] | None) -> float:
    """Vastai's ScoreNode: per container with devices, the share of its dies on its fullest card
    (float32 sums, no weight); 0 when a chosen device has no custominfo, names a strategy other
    than die, or names no AIC."""
    if not dies:
        return 0.0

    def card_of(u: str):
        strategy, aic = dies.get(u, (VASTAI_DIE, None))
        return _NO_SCORE if aic is None or (strategy is not None and strategy != VASTAI_DIE) else aic

    return _largest_share(containers, card_of)


# --------------------------------------------------------------------------- Enflame DRS vGCU

_MODE_NOT_FIT = "ModeNotFit"
_INT32_MAX = (1 << 31) - 1


def fit_drs(devices: Sequence, request, drs, direct: bool, uuid_ok, is_mutex: bool, make):
    """Enflame DRS's Fit (pkg/device/enflame/device.go at v2.10.0): the profile the request names
    (codec.enflame.choose_profile over the node's profiles, `drs`), else the node is `ModeNotFit`;
    then `card_walk` with the enflame.com use/nouse gpuuuid annotations, each card needing the
    profile's memory (GB x 1024) and core percent, which it books."""
    profile = choose_profile(drs, request.memreq, request.coresreq, direct) if drs is not None else None
    if (profile is None or not 0 < profile.size <= _INT32_MAX or not 0 < profile.memory_gb <= _INT32_MAX // 1024
            or profile.core_percent > _INT32_MAX):
        return False, [], {_MODE_NOT_FIT: 1}
    mem, cores = profile.memory_gb * 1024, profile.core_percent

    def share(dev):
        if dev.totalmem - dev.usedmem < mem:
            return _MEMORY
        if dev.totalcore > 0 and dev.totalcore - dev.usedcores < cores:
            return _CORE
        return mem, cores

    return card_walk(devices, request.nums, None, uuid_ok, is_mutex, share, make)
