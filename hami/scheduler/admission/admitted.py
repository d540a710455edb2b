"""Is the webhook reachable from the API server? Judged from pods actually admitted (no I/O).

A review this scheduler answers proves only that someone reached /webhook: anyone who can open the
port can send one. What the missed-pod reconciler (hami.scheduler.admission.missed) needs to know is
that the API server calls the webhook and applies its answer. So every pod CREATE the webhook allows
gets a mark, `hami.io/admitted: <nonce>`, a random value this process issued for that answer and
remembers (bounded, `remember` values, each for `ttl` seconds). When the pod watch shows a pod carrying
a nonce this process issued, the API server has applied one of its answers: `last_admitted()` moves
to that moment and the nonce is spent (each one proves one admission).

A pod creator controls the mark like any annotation: a value this process did not issue, or one
already seen, is ignored. A nonce can only be learnt from an answer of the webhook, that is by
reaching /webhook (the chart's networkPolicy.webhookFrom keeps that to the control plane), and then
proves no more than one admission.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from hami.device.codec.keys import ADMITTED_ANNOTATION

MARK_ANNOTATION = ADMITTED_ANNOTATION


class AdmissionMarks:
    def __init__(self, *, clock: Callable[[], float] = time.time, remember: int = 65536, ttl: float = 600.0):
        self.clock = clock
        self.remember = remember
        self.ttl = ttl
        self._issued: OrderedDict[str, float] = OrderedDict()  # nonce -> unix time issued
        self._last = 0.0
        self.proven = 0  # marks seen on pods in the API
        self._lock = threading.Lock()  # a big review is answered on the webhook's worker thread

    def issue(self) -> str:
        """A fresh nonce for one answer's mark."""
        now = self.clock()
        nonce = secrets.token_urlsafe(12)
        with self._lock:
            self._issued[nonce] = now
            while self._issued and (len(self._issued) > self.remember
                                    or next(iter(self._issued.values())) < now - self.ttl):
                self._issued.popitem(last=False)
        return nonce

    def on_pod(self, etype: str, old: dict | None, new: dict | None) -> None:
        """Informer handler: a pod showing a mark this process issued proves an admission."""
        if new is None:
            return
        value = ((new.get("metadata") or {}).get("annotations") or {}).get(MARK_ANNOTATION)
        if not isinstance(value, str):
            return
        with self._lock:
            if self._issued.pop(value, None) is None:
                return
        self._last = self.clock()
        self.proven += 1

    def last_admitted(self) -> float:
        """Unix time a pod admitted by this webhook was last seen in the API (0.0: never)."""
        return self._last
