"""GPU-to-GPU link scores for `hami.io/node-nvidia-score` (pure: link facts in, scores out).

HAMi (`pkg/device/nvidia/links.go`, `calculate_score.go`) scores each ordered pair of GPUs by
adding one term per link it finds between them:

* the PCIe path, from NVML's common ancestor level: same board 60, one PCIe switch 50, several
  switches 40, host bridge 30, same CPU/NUMA node 20, across CPUs 10;
* NVLink: 100 per link, counted either as direct links (remote PCI bus id is the peer) or, when
  both GPUs hang off NVSwitches, the smaller of the two GPUs' switch link counts (1..18).

A pair whose link lists differ in length between the two directions is asymmetric: HAMi scores
it 0 (and warns). `LinkFacts` is what a backend reports; `pair_scores` builds the annotation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

# NVML nvmlGpuTopologyLevel_t values and the names the fake GPU file uses for them.
LEVELS = {"internal": 0, "single": 10, "multiple": 20, "hostbridge": 30, "node": 40, "system": 50}
LEVEL_SCORE = {0: 60, 10: 50, 20: 40, 30: 30, 40: 20, 50: 10}
NVLINK_SCORE = 100
MAX_NVLINKS = 18  # NVML_NVLINK_MAX_LINKS: more than this is not a known link type


@dataclass(frozen=True, slots=True)
class PairLink:
    """What connects GPU a to GPU b, as seen from a. `level` None: NVML could not tell."""

    level: int | None
    nvlinks: int = 0

    def link_count(self) -> int:
        """How many links HAMi's P2PLink list holds for this direction."""
        return int(self.level in LEVEL_SCORE) + int(1 <= self.nvlinks <= MAX_NVLINKS)


@dataclass(frozen=True, slots=True)
class GpuLinks:
    """Per-GPU NVLink facts: bus id, remote bus ids of its enabled links, links to NVSwitches."""

    uuid: str
    bus_id: str = ""
    remote_bus_ids: tuple[str, ...] = ()
    switch_links: int = 0


def nvlink_count(a: GpuLinks, b: GpuLinks) -> int:
    """HAMi GetNVLink: direct links a->b, else min switch links when both use NVSwitch."""
    direct = sum(1 for r in a.remote_bus_ids if b.bus_id and r == b.bus_id)
    if direct:
        return direct
    if a.switch_links and b.switch_links:
        return min(a.switch_links, b.switch_links)
    return 0


def pair_score(ab: PairLink, ba: PairLink) -> int:
    """HAMi calculateGPUPairScore for the pair seen from a (0 when the two directions disagree)."""
    if ab.link_count() != ba.link_count():
        return 0
    score = LEVEL_SCORE.get(ab.level, 0) if ab.level is not None else 0
    if 1 <= ab.nvlinks <= MAX_NVLINKS:
        score += NVLINK_SCORE * ab.nvlinks
    return score


def pair_scores(
    uuids: Sequence[str], links: Mapping[tuple[str, str], PairLink],
) -> tuple[tuple[str, dict[str, int]], ...]:
    """[(uuid, {other uuid: score})] over `uuids` in order; missing pairs count as no link."""
    none = PairLink(None, 0)
    out = []
    for a in uuids:
        scores = {b: pair_score(links.get((a, b), none), links.get((b, a), none)) for b in uuids if b != a}
        out.append((a, scores))
    return tuple(out)


def asymmetric_pairs(uuids: Sequence[str], links: Mapping[tuple[str, str], PairLink]) -> list[tuple[str, str]]:
    """Pairs scored 0 because the two directions report a different number of links."""
    none = PairLink(None, 0)
    return [
        (a, b) for i, a in enumerate(uuids) for b in uuids[i + 1:]
        if links.get((a, b), none).link_count() != links.get((b, a), none).link_count()
    ]


@runtime_checkable
class TopologySource(Protocol):
    """A backend that can report how its GPUs are linked."""

    def links(self) -> dict[tuple[str, str], PairLink]:
        """(uuid a, uuid b) -> PairLink for every ordered pair of distinct GPUs it knows."""
        ...
