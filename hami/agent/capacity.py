"""`--report-node-capacity` (HAMi #2839, PR #2874): what the node agent writes into the Node's
`status.capacity` and `status.allocatable`, and the patch that gets it there. Pure.

* `<memory resource>` (`nvidia.com/gpumem`): the sum of the registered `devmem` of every healthy GPU,
  which is already the GPU's MiB x `deviceMemoryScaling` (hami.agent.register);
* `<core resource>` (`nvidia.com/gpucores`): the sum of the registered `devcore` of every healthy GPU,
  100 per GPU at the default `deviceCoreScaling` of 1.

Only what the agent registers counts: a GPU `filterdevices` drops, a static-MIG parent (its MIG
devices are served as their own resources) or an unhealthy GPU adds nothing. The values are the same
for capacity and allocatable (nothing is reserved), so kube-scheduler's NodeResourcesFit, Cluster
Autoscaler's template nodes and kube-state-metrics see one figure. docs/autoscaling.md says what
the in-tree filters then do with a pod's limits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hami.device.model import DeviceInfo


def node_capacity(devices: Iterable[DeviceInfo], memory_resource: str, core_resource: str) -> dict[str, str]:
    """{memory resource: MiB, core resource: percent} over the healthy registered GPUs."""
    healthy = [d for d in devices if d.health]
    return {memory_resource: str(sum(d.devmem for d in healthy)),
            core_resource: str(sum(d.devcore for d in healthy))}


def _reported(node: Mapping, field: str, names: Iterable[str]) -> dict[str, object]:
    values = ((node.get("status") or {}).get(field) or {})
    return {n: values[n] for n in names if isinstance(values, Mapping) and n in values}


def status_patch(node: Mapping, want: Mapping[str, str] | None, names: Iterable[str]) -> dict | None:
    """The strategic-merge patch of `nodes/status` that makes `node` carry `want` in capacity and
    allocatable (None: carry none of `names`, each present one set to null, which deletes it), or
    None when the node already does. Quantities compare as written: the agent writes plain integers."""
    names = tuple(names)
    body: dict[str, dict] = {}
    for field in ("capacity", "allocatable"):
        have = _reported(node, field, names)
        if want is None:
            change = {n: None for n in have}
        else:
            change = {n: v for n, v in want.items() if have.get(n) != v}
        if change:
            body[field] = change
    return {"status": body} if body else None
