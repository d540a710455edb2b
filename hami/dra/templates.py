"""The ResourceClaimTemplates `--dra` pods reference, made from pods that exist in the API (I/O).

The webhook creates nothing: a review's body proves no pod exists, and anyone who reaches /webhook
can send one (with the scheduler's cluster-wide create right, a forged review named any namespace).
Instead `TemplateReconciler` watches pods (the scheduler's pod informer): a pod labelled
`hami.io/dra: "true"` that references templates its own `hami.io/dra-claims` shapes rebuild to
(hami.dra.claims.templates_of) gets them created in its own namespace, nowhere else. The
resourceclaim controller retries a pod whose template is not there yet, on the template's event.

Templates are named by the digest of their spec, so creating one that exists is a no-op (409
AlreadyExists is success) and a bounded memory of the ones made spares the API server a create per
pod of the same shape. A refused create is logged and retried with a growing delay (at most
`max_delay` seconds); a malformed annotation is logged once per pod and nothing is made for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections import OrderedDict
from collections.abc import Callable, Sequence

from hami.dra import claims
from hami.kube.client import ApiError, KubeClient
from hami.obs.log import get_logger

log = get_logger(__name__)

TERMINAL = ("Succeeded", "Failed")


class TemplateMaker:
    def __init__(self, client: KubeClient, *, remember: int = 4096):
        self.client = client
        self._made: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._remember = remember
        self.created = 0

    def made(self, namespace: str, name: str) -> bool:
        return (namespace, name) in self._made

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


class TemplateReconciler:
    """Pod informer handler + background loop: the templates admitted DRA pods reference."""

    def __init__(self, maker: TemplateMaker, *, is_leader: Callable[[], bool] = lambda: True,
                 max_delay: float = 30.0):
        self.maker = maker
        self.is_leader = is_leader
        self.max_delay = max_delay
        self.pending: dict[tuple[str, str], dict] = {}  # (namespace, template name) -> template
        self.wake = asyncio.Event()
        self._refused: OrderedDict[str, None] = OrderedDict()  # pod uids whose annotation was logged

    def on_pod(self, etype: str, old: dict | None, new: dict | None) -> None:
        if new is None:
            return
        meta = new.get("metadata") or {}
        if (meta.get("labels") or {}).get(claims.DRA_LABEL) != "true" or meta.get("deletionTimestamp"):
            return
        if (new.get("status") or {}).get("phase") in TERMINAL:
            return
        if old is not None and _same_claims(old, new):
            return  # status and other updates: judged when the pod's claims last changed
        try:
            templates = claims.templates_of(new)
        except claims.ClaimError as exc:
            uid = str(meta.get("uid") or "")
            if uid not in self._refused:
                self._refused[uid] = None
                if len(self._refused) > 4096:
                    self._refused.popitem(last=False)
                log.warning("DRA pod's claim shapes unreadable: no template made", error=str(exc),
                            pod=f"{meta.get('namespace')}/{meta.get('name')}")
            return
        ns = str(meta.get("namespace") or "")
        for name, tmpl in templates.items():
            if ns and not self.maker.made(ns, name):
                self.pending[(ns, name)] = tmpl
        if self.pending:
            self.wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        delay = 0.0
        while not stop.is_set():
            waiter = asyncio.ensure_future(self.wake.wait())
            stopper = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait({waiter, stopper}, timeout=delay or None, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for t in (waiter, stopper):
                    t.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await t
            if stop.is_set():
                return
            self.wake.clear()
            if not self.pending or not self.is_leader():
                delay = 1.0 if self.pending else 0.0
                continue
            failed = False
            for key in list(self.pending):
                tmpl = self.pending.pop(key)
                if await self.maker.ensure(key[0], [tmpl]):
                    self.pending.setdefault(key, tmpl)
                    failed = True
            delay = min(self.max_delay, max(1.0, delay * 2)) if failed else 0.0


def _same_claims(old: dict, new: dict) -> bool:
    def of(pod: dict):
        meta = pod.get("metadata") or {}
        return ((meta.get("annotations") or {}).get(claims.CLAIMS_ANNOTATION),
                (pod.get("spec") or {}).get("resourceClaims"), (meta.get("labels") or {}).get(claims.DRA_LABEL))
    return of(old) == of(new)
