"""The whatif scenario file: workloads to add and changes to try, parsed and checked (pure).

```yaml
seed: 7                       # arrival order and generated names are reproducible for a seed
arrival: sequential           # sequential (file order) | interleaved (round robin) | shuffled (seeded)
includePending: true          # the snapshot's pending pods are queued first (default true)
workloads:                    # shared by every scenario that sets none of its own
  - name: train               # pod name prefix: train-0, train-1, ...
    count: 300
    namespace: ml
    gpus: 1                   # nvidia.com/gpu per pod
    memory: 20000             # nvidia.com/gpumem (MiB per GPU); or memoryPercentage: 50
    cores: 30                 # nvidia.com/gpucores
    annotations: {nvidia.com/use-gputype: A100}
    nodeSelector: {pool: gpu}
  - name: custom
    count: 2
    pod: {spec: {containers: [...]}}   # a full pod template instead of the shorthand
  - replay: {since: "2026-11-24T00:00:00Z", until: "2026-11-25T00:00:00Z", namespace: ml}
scenarios:                    # the baseline (no change) is always run first
  - name: split-4
    changes:
      deviceSplitCount: 4     # global; deviceMemoryScaling, deviceCoreScaling alike
      nodeSchedulerPolicy: spread
      gpuSchedulerPolicy: binpack
      scoringWeights: "slot=1,core=1,memory=3"
      nodes: [{name: "pool-a-*", deviceSplitCount: 2, cordon: true}]
      addNodes: [{name: h100, count: 10, gpus: 8, type: NVIDIA-H100-80GB-HBM3, memory: 81920}]
                              # mode: dra (ResourceSlices) or device-plugin; default: dra when every
                              # node of the snapshot is a DRA node, else device-plugin
      removeNodes: ["old-*"]
      cordonGPUs: ["GPU-1234", "node-3/2"]   # a UUID, or NODE/INDEX
      quotas: [{namespace: ml, memory: 200000, cores: 400}]
```

Every error is a `ScenarioError(source, path, problem)`: the file, the path in it
(`scenarios[1].changes.deviceSplitCount`) and what was expected.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hami.scheduler.placement.policy import PolicyError, parse_scoring_weights

from .cluster import spec_shape_error

ARRIVALS = ("sequential", "interleaved", "shuffled")
NODE_POLICIES = ("binpack", "spread")
GPU_POLICIES = ("binpack", "spread", "topology-aware")
ADD_MODES = ("dra", "device-plugin")  # an added node publishes ResourceSlices, or registers its device plugin


class ScenarioError(ValueError):
    def __init__(self, source: str, path: str, problem: str):
        self.source, self.path, self.problem = source, path, problem
        super().__init__(f"{source}: {path}: {problem}")


@dataclass(frozen=True, slots=True)
class Replay:
    since: str = ""  # RFC 3339, inclusive; "" = from the start
    until: str = ""  # exclusive; "" = to the end
    namespace: str = ""  # "" = every namespace


@dataclass(frozen=True, slots=True)
class Workload:
    name: str = ""
    count: int = 1
    namespace: str = "default"
    gpus: int = 1
    memory: int | None = None
    memory_percentage: int | None = None
    cores: int | None = None
    annotations: tuple[tuple[str, str], ...] = ()
    node_selector: tuple[tuple[str, str], ...] = ()
    pod: dict | None = None  # a full template (replaces the shorthand fields)
    replay: Replay | None = None  # replay snapshot pods instead of generating any


@dataclass(frozen=True, slots=True)
class NodeChange:
    name: str  # exact name or shell glob
    split_count: int | None = None
    memory_scaling: float | None = None
    core_scaling: float | None = None
    cordon: bool | None = None


@dataclass(frozen=True, slots=True)
class AddNodes:
    name: str
    count: int = 1
    gpus: int = 8
    type: str = "NVIDIA-GPU"
    memory: int = 81920  # physical MiB per card
    split_count: int | None = None  # default: the scenario's, else the device config's
    labels: tuple[tuple[str, str], ...] = ()
    mode: str = ""  # ADD_MODES, "": dra when every node of the snapshot is a DRA node


@dataclass(frozen=True, slots=True)
class QuotaChange:
    namespace: str
    memory: int | None = None  # limits.<gpumem resource>, MiB; 0 removes the limit
    cores: int | None = None


@dataclass(frozen=True, slots=True)
class Changes:
    split_count: int | None = None
    memory_scaling: float | None = None
    core_scaling: float | None = None
    node_policy: str | None = None
    gpu_policy: str | None = None
    scoring_weights: str | None = None
    nodes: tuple[NodeChange, ...] = ()
    add_nodes: tuple[AddNodes, ...] = ()
    remove_nodes: tuple[str, ...] = ()
    cordon_gpus: tuple[str, ...] = ()
    quotas: tuple[QuotaChange, ...] = ()

    @property
    def empty(self) -> bool:
        return self == Changes()


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    changes: Changes = field(default_factory=Changes)
    workloads: tuple[Workload, ...] = ()


@dataclass(frozen=True, slots=True)
class Plan:
    """A whole file: the scenarios to compare (baseline first) and how pods arrive."""

    scenarios: tuple[Scenario, ...]
    seed: int = 0
    arrival: str = "sequential"
    include_pending: bool = True


# --------------------------------------------------------------------------- checking helpers


class _Reader:
    def __init__(self, source: str):
        self.source = source

    def fail(self, path: str, problem: str) -> ScenarioError:
        return ScenarioError(self.source, path, problem)

    def mapping(self, value: Any, path: str, keys: tuple[str, ...]) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(path, f"expected a mapping, got {type(value).__name__}")
        for k in value:
            if k not in keys:
                raise self.fail(f"{path}.{k}" if path else str(k), f"unknown field (expected one of {', '.join(keys)})")
        return value

    def seq(self, value: Any, path: str) -> list:
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(path, f"expected a list, got {type(value).__name__}")
        return value

    def int_(self, value: Any, path: str, lo: int = 0, hi: int | None = None) -> int | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"expected an integer, got {value!r}")
        if value < lo or (hi is not None and value > hi):
            raise self.fail(path, f"expected an integer in {lo}..{hi if hi is not None else ''}, got {value}")
        return value

    def num(self, value: Any, path: str) -> float | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise self.fail(path, f"expected a number > 0, got {value!r}")
        return float(value)

    def str_(self, value: Any, path: str, choices: tuple[str, ...] = (), empty_ok: bool = False) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or (not value and not empty_ok):
            raise self.fail(path, f"expected a non-empty string, got {value!r}")
        if choices and value not in choices:
            raise self.fail(path, f"expected one of {', '.join(choices)}, got {value!r}")
        return value

    def bool_(self, value: Any, path: str) -> bool | None:
        if value is None:
            return None
        if not isinstance(value, bool):
            raise self.fail(path, f"expected true or false, got {value!r}")
        return value

    def pairs(self, value: Any, path: str) -> tuple[tuple[str, str], ...]:
        if value is None:
            return ()
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            raise self.fail(path, "expected a mapping of strings to strings")
        return tuple(sorted(value.items()))


# --------------------------------------------------------------------------- parsing

_WORKLOAD_KEYS = ("name", "count", "namespace", "gpus", "memory", "memoryPercentage", "cores", "annotations",
                  "nodeSelector", "pod", "replay")
_CHANGE_KEYS = ("deviceSplitCount", "deviceMemoryScaling", "deviceCoreScaling", "nodeSchedulerPolicy",
                "gpuSchedulerPolicy", "scoringWeights", "nodes", "addNodes", "removeNodes", "cordonGPUs", "quotas")


def _workload(r: _Reader, raw: Any, path: str, index: int) -> Workload:
    w = r.mapping(raw, path, _WORKLOAD_KEYS)
    if not isinstance(raw, dict):
        raise r.fail(path, "expected a mapping")
    if "replay" in w:
        rp = r.mapping(w["replay"], f"{path}.replay", ("since", "until", "namespace"))
        others = [k for k in w if k != "replay"]
        if others:
            raise r.fail(f"{path}.{others[0]}", "a replay workload takes no other field")
        return Workload(name="replay", replay=Replay(
            since=r.str_(rp.get("since"), f"{path}.replay.since", empty_ok=True) or "",
            until=r.str_(rp.get("until"), f"{path}.replay.until", empty_ok=True) or "",
            namespace=r.str_(rp.get("namespace"), f"{path}.replay.namespace", empty_ok=True) or "",
        ))
    pod = w.get("pod")
    if pod is not None:
        if not isinstance(pod, dict):
            raise r.fail(f"{path}.pod", "expected a pod object")
        spec = pod.get("spec")
        if not isinstance(spec, dict) or not isinstance(spec.get("containers"), list) or not spec["containers"]:
            raise r.fail(f"{path}.pod.spec.containers", "expected a non-empty list of containers")
        problem = spec_shape_error(spec)
        if problem:
            raise r.fail(f"{path}.pod.spec.{problem[0]}", problem[1])
        if not isinstance(pod.get("metadata") or {}, dict):
            raise r.fail(f"{path}.pod.metadata", "expected a mapping")
        r.pairs((pod.get("metadata") or {}).get("annotations") or {}, f"{path}.pod.metadata.annotations")
    mem = r.int_(w.get("memory"), f"{path}.memory", 1)
    pct = r.int_(w.get("memoryPercentage"), f"{path}.memoryPercentage", 1, 100)
    if mem is not None and pct is not None:
        raise r.fail(f"{path}.memoryPercentage", "give memory or memoryPercentage, not both")
    return Workload(
        name=r.str_(w.get("name"), f"{path}.name") or f"w{index}",
        count=r.int_(w.get("count"), f"{path}.count", 0) if w.get("count") is not None else 1,
        namespace=r.str_(w.get("namespace"), f"{path}.namespace") or "default",
        gpus=r.int_(w.get("gpus"), f"{path}.gpus", 1) or 1,
        memory=mem,
        memory_percentage=pct,
        cores=r.int_(w.get("cores"), f"{path}.cores", 0, 100),
        annotations=r.pairs(w.get("annotations"), f"{path}.annotations"),
        node_selector=r.pairs(w.get("nodeSelector"), f"{path}.nodeSelector"),
        pod=pod,
    )


def _changes(r: _Reader, raw: Any, path: str) -> Changes:
    c = r.mapping(raw, path, _CHANGE_KEYS)
    weights = r.str_(c.get("scoringWeights"), f"{path}.scoringWeights")
    if weights is not None:
        try:
            parse_scoring_weights(weights)
        except PolicyError as exc:
            raise r.fail(f"{path}.scoringWeights", str(exc)) from None
    nodes = []
    for i, raw_node in enumerate(r.seq(c.get("nodes"), f"{path}.nodes")):
        p = f"{path}.nodes[{i}]"
        n = r.mapping(raw_node, p, ("name", "deviceSplitCount", "deviceMemoryScaling", "deviceCoreScaling", "cordon"))
        if not isinstance(raw_node, dict):
            raise r.fail(p, "expected a mapping")
        nodes.append(NodeChange(
            name=r.str_(n.get("name"), f"{p}.name") or _missing(r, f"{p}.name"),
            split_count=r.int_(n.get("deviceSplitCount"), f"{p}.deviceSplitCount", 1),
            memory_scaling=r.num(n.get("deviceMemoryScaling"), f"{p}.deviceMemoryScaling"),
            core_scaling=r.num(n.get("deviceCoreScaling"), f"{p}.deviceCoreScaling"),
            cordon=r.bool_(n.get("cordon"), f"{p}.cordon"),
        ))
    adds = []
    for i, raw_add in enumerate(r.seq(c.get("addNodes"), f"{path}.addNodes")):
        p = f"{path}.addNodes[{i}]"
        a = r.mapping(raw_add, p, ("name", "count", "gpus", "type", "memory", "deviceSplitCount", "labels", "mode"))
        if not isinstance(raw_add, dict):
            raise r.fail(p, "expected a mapping")
        adds.append(AddNodes(
            name=r.str_(a.get("name"), f"{p}.name") or _missing(r, f"{p}.name"),
            count=r.int_(a.get("count"), f"{p}.count", 1) or 1,
            gpus=r.int_(a.get("gpus"), f"{p}.gpus", 1) or 8,
            type=r.str_(a.get("type"), f"{p}.type") or "NVIDIA-GPU",
            memory=r.int_(a.get("memory"), f"{p}.memory", 1) or 81920,
            split_count=r.int_(a.get("deviceSplitCount"), f"{p}.deviceSplitCount", 1),
            labels=r.pairs(a.get("labels"), f"{p}.labels"),
            mode=r.str_(a.get("mode"), f"{p}.mode", ADD_MODES) or "",
        ))
    quotas = []
    for i, raw_q in enumerate(r.seq(c.get("quotas"), f"{path}.quotas")):
        p = f"{path}.quotas[{i}]"
        q = r.mapping(raw_q, p, ("namespace", "memory", "cores"))
        if not isinstance(raw_q, dict):
            raise r.fail(p, "expected a mapping")
        quotas.append(QuotaChange(
            namespace=r.str_(q.get("namespace"), f"{p}.namespace") or _missing(r, f"{p}.namespace"),
            memory=r.int_(q.get("memory"), f"{p}.memory", 0),
            cores=r.int_(q.get("cores"), f"{p}.cores", 0),
        ))
    return Changes(
        split_count=r.int_(c.get("deviceSplitCount"), f"{path}.deviceSplitCount", 1),
        memory_scaling=r.num(c.get("deviceMemoryScaling"), f"{path}.deviceMemoryScaling"),
        core_scaling=r.num(c.get("deviceCoreScaling"), f"{path}.deviceCoreScaling"),
        node_policy=r.str_(c.get("nodeSchedulerPolicy"), f"{path}.nodeSchedulerPolicy", NODE_POLICIES),
        gpu_policy=r.str_(c.get("gpuSchedulerPolicy"), f"{path}.gpuSchedulerPolicy", GPU_POLICIES),
        scoring_weights=weights,
        nodes=tuple(nodes),
        add_nodes=tuple(adds),
        remove_nodes=tuple(_str_list(r, c.get("removeNodes"), f"{path}.removeNodes")),
        cordon_gpus=tuple(_str_list(r, c.get("cordonGPUs"), f"{path}.cordonGPUs")),
        quotas=tuple(quotas),
    )


def _missing(r: _Reader, path: str) -> str:
    raise r.fail(path, "required")


def _str_list(r: _Reader, value: Any, path: str) -> list[str]:
    out = r.seq(value, path)
    for i, v in enumerate(out):
        r.str_(v, f"{path}[{i}]")
    return out


def parse_plan(doc: Any, source: str = "scenario") -> Plan:
    """A parsed YAML document -> Plan. The baseline is scenario 0 (added when not named)."""
    r = _Reader(source)
    top = r.mapping(doc, "", ("seed", "arrival", "includePending", "workloads", "scenarios"))
    if doc is not None and not isinstance(doc, dict):
        raise r.fail("(top level)", "expected a mapping")
    workloads = tuple(_workload(r, w, f"workloads[{i}]", i)
                      for i, w in enumerate(r.seq(top.get("workloads"), "workloads")))
    scenarios: list[Scenario] = []
    seen = set()
    for i, raw in enumerate(r.seq(top.get("scenarios"), "scenarios")):
        p = f"scenarios[{i}]"
        s = r.mapping(raw, p, ("name", "changes", "workloads"))
        if not isinstance(raw, dict):
            raise r.fail(p, "expected a mapping")
        name = r.str_(s.get("name"), f"{p}.name") or f"scenario-{i + 1}"
        if name in seen:
            raise r.fail(f"{p}.name", f"duplicate scenario name {name!r}")
        seen.add(name)
        own = tuple(_workload(r, w, f"{p}.workloads[{j}]", j)
                    for j, w in enumerate(r.seq(s.get("workloads"), f"{p}.workloads")))
        scenarios.append(Scenario(name, _changes(r, s.get("changes"), f"{p}.changes"), own or workloads))
    if not scenarios or scenarios[0].name != "baseline":
        if "baseline" in seen:
            raise r.fail("scenarios", "the scenario named baseline must come first")
        scenarios.insert(0, Scenario("baseline", Changes(), workloads))
    elif not scenarios[0].changes.empty:
        raise r.fail("scenarios[0].changes", "the baseline changes nothing")
    include = r.bool_(top.get("includePending"), "includePending")
    return Plan(
        scenarios=tuple(scenarios),
        seed=r.int_(top.get("seed"), "seed", 0) or 0,
        arrival=r.str_(top.get("arrival"), "arrival", ARRIVALS) or "sequential",
        include_pending=True if include is None else include,
    )


def parse_plan_text(text: str, source: str) -> Plan:
    """YAML (or JSON) text -> Plan; a YAML syntax error names the line."""
    import yaml

    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}" if mark is not None else "(yaml)"
        raise ScenarioError(source, where, f"not valid YAML: {getattr(exc, 'problem', exc)}") from None
    return parse_plan(doc, source)
