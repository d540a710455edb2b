"""HAMi's flow of /filter: the placement is patched on the pod before the answer.

hami's own Extender holds the decision in the Placer and /bind writes it with bind-phase in one patch,
re-checking the fit under the node lock. HAMi's patch at /filter costs one more write per pod, a round
trip before answering, and annotations left behind by a replica that dies before /bind. This subclass
keeps that flow for the end-to-end benchmark's model of HAMi (scripts/bench_e2e --hami) and for the
tests of the placements it leaves on pending pods; no role starts it.
"""

from __future__ import annotations

from hami.kube.client import ApiError
from hami.kube.events import WARNING
from hami.obs.log import get_logger
from hami.scheduler.cache.state import VGPU_NODE
from hami.scheduler.extender.server import Extender
from hami.scheduler.placement import messages
from hami.scheduler.placer import Choice

log = get_logger(__name__)


class PatchAtFilter(Extender):
    patch_failures = 0

    def place(self, pod, uid, ns, name, annos, requests, num_init, names, node_names) -> Choice | str:
        """The decision is committed as written: the pod carries it once the patch lands."""
        return self.placer.place(pod, uid, ns, name, annos, requests, num_init, names, node_names,
                                 written=self.client is not None)

    def placed(self, pod, ns, name, uid, choice: Choice, node_names):
        if self.client is None:
            return self.filter_succeeded(pod, ns, name, choice, node_names)
        return self._patch_then_answer(pod, ns, name, uid, choice, node_names)

    async def _patch_then_answer(self, pod, ns, name, uid, choice: Choice, node_names) -> dict:
        node = choice.decision.node
        patch = {"metadata": {"annotations": choice.decision.annotations, "labels": {VGPU_NODE: node}}}
        try:
            await self.client.patch_pod(ns, name, patch)
        except ApiError as exc:
            self.placer.drop(uid)
            self.patch_failures += 1
            log.warning("Pod annotation patch failed", pod=f"{ns}/{name}", node=node, error=str(exc))
            self.events.record(pod, WARNING, messages.FILTERING_FAILED, str(exc))
            return {"Error": str(exc)}
        return self.filter_succeeded(pod, ns, name, choice, node_names)


def patch_at_filter(extender: Extender) -> PatchAtFilter:
    """Switch a running scheduler's extender to HAMi's flow (same state, same listeners)."""
    extender.__class__ = PatchAtFilter
    return extender  # type: ignore[return-value]
