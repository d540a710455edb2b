"""kube-scheduler's preemption dry run on one node (pure).

DefaultPreemption's `SelectVictimsOnNode` (pkg/scheduler/framework/plugins/defaultpreemption/
default_preemption.go, 1.31): take every lower-priority pod off the node; if the preemptor still
fails the in-tree filters, preemption cannot help there. Otherwise put the pods back one at a
time, most important first (`util.MoreImportantPod`: higher priority, then the earlier start),
the PodDisruptionBudget-violating ones before the others (`filterPodsWithPDBViolation`), keeping a
pod off only when putting it back makes the preemptor fail. What stays off is the node's victims.

The in-tree filters never count extender-managed resources (HAMi's chart marks every GPU resource
`ignoredByScheduler: true`), so a shortage of GPU slices alone leaves no victims, and
`DryRunPreemption` keeps only nodes with at least one (`len(pods) != 0`): the extender's
`preemptVerb` is then never called. `select_victims_on_node` returns that empty list; the caller
decides (see `ExtenderConfig.gpu_only_preemption`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from hami.kubesched.pdb import victims_violating
from hami.kubesched.schedqueue import pod_priority


def more_important_first(pods: Iterable[Mapping]) -> list[Mapping]:
    """util.MoreImportantPod order: priority high to low, then the earlier status.startTime."""
    return sorted(pods, key=lambda p: (-pod_priority(p), str((p.get("status") or {}).get("startTime") or "")))


def uid_of(pod: Mapping) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def select_victims_on_node(potential: Sequence[Mapping], fits_without: Callable[[frozenset[str]], bool],
                           pdbs: Sequence[Mapping], all_pods: Iterable[Mapping]
                           ) -> tuple[list[Mapping], int] | None:
    """`potential`: the node's lower-priority pods; `fits_without(uids)`: do the in-tree filters
    pass with those pods off the node? None when they fail even with every one off; else
    (victims, how many of them violate a PodDisruptionBudget)."""
    off = frozenset(uid_of(p) for p in potential)
    if not fits_without(off):
        return None
    violating, fine = victims_violating(more_important_first(potential), pdbs, all_pods)
    victims: list[Mapping] = []
    n_violating = 0
    for group, counts in ((violating, True), (fine, False)):
        for pod in group:
            back = off - {uid_of(pod)}
            if fits_without(back):
                off = back
            else:
                victims.append(pod)
                n_violating += counts
    return victims, n_violating
