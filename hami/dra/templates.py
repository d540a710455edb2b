"""Creating the ResourceClaimTemplates the `--dra` webhook's pods reference (I/O).

Templates are named by the digest of their spec (hami.dra.claims), so creating one that exists is
a no-op (409 AlreadyExists is success) and a bounded memory of the ones made spares the API
server a create per pod of the same shape. The webhook answers only after its templates exist, so
the resourceclaim controller never waits for one.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Sequence

from hami.kube.client import ApiError, KubeClient
from hami.obs.log import get_logger

log = get_logger(__name__)


class TemplateMaker:
    def __init__(self, client: KubeClient, *, remember: int = 4096):
        self.client = client
        self._made: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._remember = remember
        self.created = 0

    async def ensure(self, namespace: str, templates: Sequence[dict]) -> str:
        """Make every template exist in `namespace`; "" or the error that stopped it."""
        for t in templates:
            key = (namespace, t["metadata"]["name"])
            if key in self._made:
                self._made.move_to_end(key)
                continue
            try:
                await self.client.create("resourceclaimtemplates", copy.deepcopy(t), namespace)
                self.created += 1
            except ApiError as exc:
                if exc.status != 409:
                    log.warning("Could not create a ResourceClaimTemplate", namespace=namespace,
                                template=key[1], error=exc.message)
                    return f"could not create ResourceClaimTemplate {namespace}/{key[1]}: {exc.message}"
            self._made[key] = None
            if len(self._made) > self._remember:
                self._made.popitem(last=False)
        return ""


def deny(review: dict, message: str) -> dict:
    """The AdmissionReview answer turned into a denial (the pod is not admitted without its templates)."""
    response = review.get("response") or {}
    response.pop("patch", None)
    response.pop("patchType", None)
    response["allowed"] = False
    response["status"] = {"code": 500, "message": message}
    return review
