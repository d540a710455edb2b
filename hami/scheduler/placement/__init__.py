"""Where a pod's devices go, as pure functions and data (no I/O, no logging; .importlinter's
`pure-placement` contract): HAMi's Fit and its reasons (fit.py, vendorrules.py, migplace.py,
podfilter.py), node and device scores and policies (score.py, policy.py, vendorscore.py, gosort.py,
prioritize.py), the usage index the fit reads (usage.py, changelog.py), the candidate order kept
between requests (nodeorder.py), a burst's held decisions and when it may leave the policy's best
node (busy.py, contention.py), the re-check /bind runs
(recheck.py), the memos of a pod template's request (podshape.py) and the event texts (messages.py).

The names below are the package's public API: what hami.scheduler.placer, the extender, the
preemption planner, whatif and the doctor build a decision from.
"""

from hami.scheduler.placement.busy import Held, HeldView
from hami.scheduler.placement.changelog import ChangeLog
from hami.scheduler.placement.contention import (
    WRITES_PER_BIND,
    Contention,
    LockHold,
    choose,
    own_pending,
    rank,
)
from hami.scheduler.placement.fit import FitResult, PodRequest, fit_pod, memory_need, pod_request, try_pod
from hami.scheduler.placement.nodeorder import NameList, first_fit
from hami.scheduler.placement.podshape import RequestMemo, ShapeMemo
from hami.scheduler.placement.policy import PolicyError, ignored_policies, node_order_descending
from hami.scheduler.placement.prioritize import scale_scores
from hami.scheduler.placement.recheck import chosen_ids, only_devices, same_placement, taken_message
from hami.scheduler.placement.score import Selection, evaluate_nodes, select_node
from hami.scheduler.placement.usage import NodeUsage, UsageIndex
from hami.scheduler.placement.vendorrules import METAX_APP_CLASS, METAX_QOS, jittery_qos

__all__ = (
    "METAX_APP_CLASS", "METAX_QOS", "WRITES_PER_BIND", "ChangeLog", "Contention", "FitResult", "Held", "HeldView",
    "LockHold", "NameList", "NodeUsage", "PodRequest", "PolicyError", "RequestMemo", "Selection", "ShapeMemo",
    "UsageIndex", "choose", "chosen_ids", "evaluate_nodes", "first_fit", "fit_pod", "ignored_policies",
    "jittery_qos", "memory_need", "node_order_descending", "only_devices", "own_pending", "pod_request", "rank",
    "same_placement", "scale_scores", "select_node", "taken_message", "try_pod",
)
