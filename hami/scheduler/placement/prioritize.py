"""/prioritize scores (pure): HAMi's node score scaled to the extender range 0..10.

HAMi prefers, among fitting nodes, the highest node score under binpack and the lowest under
spread (score.order_nodes). kube-scheduler adds extender scores (0..MaxExtenderPriority, times the
extender's weight, times MaxNodeScore/MaxExtenderPriority) to its own plugins' scores, so the
preferred node gets 10, the least preferred fitting node 0, the others in proportion; when every
fitting node scores the same they all get 10. Nodes that do not fit get 0.
"""

from __future__ import annotations

from collections.abc import Mapping

from hami.scheduler.placement.policy import node_order_descending

MIN_EXTENDER_PRIORITY = 0
MAX_EXTENDER_PRIORITY = 10


def scale_scores(fit_scores: Mapping[str, float], node_names, policy: str) -> list[dict]:
    """HostPriorityList for `node_names`: {"Host": name, "Score": 0..10}."""
    if fit_scores:
        lo, hi = min(fit_scores.values()), max(fit_scores.values())
    higher_better = node_order_descending(policy)
    out = []
    for name in node_names:
        s = fit_scores.get(name)
        if s is None:
            score = MIN_EXTENDER_PRIORITY
        elif hi == lo:
            score = MAX_EXTENDER_PRIORITY
        else:
            frac = (s - lo) / (hi - lo) if higher_better else (hi - s) / (hi - lo)
            score = round(frac * MAX_EXTENDER_PRIORITY)
        out.append({"Host": name, "Score": int(score)})
    return out
