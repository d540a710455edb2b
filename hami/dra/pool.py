"""The node's pool of ResourceSlices, as written: which slices, and what to write when (pure).

`pool_slices` lays a `PoolLayout` (hami.dra.slices) out as slices: the main one, one per
partitionable GPU, its counter sets 8 to a slice, all with the same `resourceSliceCount` and
generation. `next_pool` writes only when a slice differs from what is stored, and then every
slice with `pool.generation` one up (the scheduler uses only a pool's newest generation), and
deletes stored slices no longer laid out: a restart that sees the same GPUs writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hami.dra.slices import DRIVER, MAX_COUNTER_SETS_PER_SLICE, PoolLayout, build_slice, slice_name


def pool_slices(node: str, layout: PoolLayout, generation: int, *, driver: str = DRIVER,
                node_uid: str = "") -> list[dict]:
    """Every slice of the node's pool, the main one first."""
    main = slice_name(node, driver)
    parts: list[tuple[str, Sequence[dict], Sequence[dict]]] = [(main, layout.main, ())]
    parts += [(f"{main}-{suffix}", devs, ()) for suffix, devs in layout.partitioned]
    sets = layout.counter_sets
    parts += [(f"{main}-counters-{k // MAX_COUNTER_SETS_PER_SLICE}", (), sets[k:k + MAX_COUNTER_SETS_PER_SLICE])
              for k in range(0, len(sets), MAX_COUNTER_SETS_PER_SLICE)]
    return [build_slice(node, devs, generation, driver=driver, node_uid=node_uid, name=name, count=len(parts),
                        counter_sets=cs) for name, devs, cs in parts]


def _keep_time_added(want: dict, stored: Mapping | None) -> dict:
    """The API server stamps `timeAdded` on a taint written without one: carry the stored stamp
    over (same key, value and effect), so an unchanged taint does not count as a change."""
    old = {d.get("name"): d for d in ((stored or {}).get("spec") or {}).get("devices") or [] if isinstance(d, Mapping)}
    for d in want["spec"].get("devices") or []:
        stamped = {(t.get("key"), t.get("value"), t.get("effect")): t.get("timeAdded")
                   for t in (old.get(d["name"]) or {}).get("taints") or [] if isinstance(t, Mapping)}
        for t in d.get("taints") or []:
            at = stamped.get((t.get("key"), t.get("value"), t.get("effect")))
            if at and "timeAdded" not in t:
                t["timeAdded"] = at
    return want


@dataclass(frozen=True, slots=True)
class PoolWrite:
    put: tuple[dict, ...]  # bodies; with metadata.resourceVersion when replacing a stored slice
    delete: tuple[str, ...]  # stored slices of this pool no longer published
    generation: int


def _same(want: Mapping, stored: Mapping | None) -> bool:
    if stored is None:
        return False
    spec = stored.get("spec") or {}
    return {k: spec.get(k) for k in want["spec"]} == want["spec"] and set(spec) == set(want["spec"])


def next_pool(stored: Mapping[str, Mapping], node: str, layout: PoolLayout, *, driver: str = DRIVER,
              node_uid: str = "") -> PoolWrite | None:
    """What to write so the pool is `layout`, or None when the `stored` slices (name -> slice, this
    pool's) already are. Any change rewrites every slice with the generation one above the highest
    stored (starting at 1), and deletes stored slices the layout no longer has."""
    gens = [((s.get("spec") or {}).get("pool") or {}).get("generation") for s in stored.values()]
    gen = max([g for g in gens if type(g) is int and g >= 0], default=0)
    current = pool_slices(node, layout, gen, driver=driver, node_uid=node_uid)
    current = [_keep_time_added(s, stored.get(s["metadata"]["name"])) for s in current]
    names = {s["metadata"]["name"] for s in current}
    if all(_same(s, stored.get(s["metadata"]["name"])) for s in current) and names == set(stored):
        return None
    out = []
    for s in current:
        s["spec"]["pool"]["generation"] = gen + 1
        rv = ((stored.get(s["metadata"]["name"]) or {}).get("metadata") or {}).get("resourceVersion")
        if rv:
            s["metadata"]["resourceVersion"] = rv  # a replace that loses a race gets 409, not a clobber
        out.append(s)
    return PoolWrite(tuple(out), tuple(sorted(set(stored) - names)), gen + 1)
