"""Who may use the web UI, and how much of the cluster's API a visitor may spend (pure, no I/O).

- `peer_may_enter`: without a read-only token the UI answers loopback peers only (kubectl
  port-forward reaches the pod's loopback), unless `--ui-allow-anonymous` says anyone may read;
  with a token every request needs it (hami.ui.role's guard).
- `host_allowed`: the Host header must name the UI itself (localhost, a loopback address, the bound
  address, `--ui-allowed-hosts`): a page of another site whose name was rebound to 127.0.0.1 (DNS
  rebinding) sends its own name and is refused.
- `FormToken`: a POST (/whatif) must carry the token its form was rendered with, and an `Origin`
  header, when sent, must be the UI's own: another site's page cannot make a visitor's browser run
  one (cross-site request forgery).
- `DiagnosisBudget`: each pending pod's page runs `hami doctor pod` (several API calls, some
  cluster-wide); a diagnosis is kept for `ttl` seconds per pod and resourceVersion, and new ones
  are at most `rate` a second (burst `burst`); past that the page says so instead of diagnosing.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections import OrderedDict
from typing import Any

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def is_loopback(peer: str | None) -> bool:
    """Whether a peer address (aiohttp's request.remote) is this host's loopback."""
    if not peer:
        return False
    try:
        address = ipaddress.ip_address(peer.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def peer_may_enter(peer: str | None, *, token_set: bool, allow_anonymous: bool) -> bool:
    """Without a token, off-loopback peers only when anonymous reading was allowed."""
    return token_set or allow_anonymous or is_loopback(peer)


def host_name(header: str | None) -> str:
    """The name in a Host header, without its port, lower-cased ('' when absent or malformed)."""
    text = (header or "").strip().lower()
    if text.startswith("["):  # [v6]:port
        end = text.find("]")
        return text[1:end] if end > 0 else ""
    if text.count(":") == 1:
        text = text.split(":", 1)[0]
    return text


def allowed_hosts(bind_host: str, extra: str) -> frozenset[str]:
    """The Host names the UI answers: loopback names, the address it is bound to (when specific),
    and `--ui-allowed-hosts` (comma list; `*` for any)."""
    names = set(LOOPBACK_NAMES)
    bound = bind_host.strip("[]").lower()
    if bound and bound not in ("0.0.0.0", "::"):
        names.add(bound)
    names.update(n.strip().lower() for n in extra.split(",") if n.strip())
    return frozenset(names)


def host_allowed(header: str | None, allowed: frozenset[str]) -> bool:
    return "*" in allowed or host_name(header) in allowed


class FormToken:
    """The token each UI form carries; a POST is honoured only with it, from the UI's own origin."""

    def __init__(self, secret: bytes):
        self.value = hmac.new(secret, b"hami-ui-form", "sha256").hexdigest()

    def accepts(self, given: str | None, origin: str | None, host: str | None) -> bool:
        if not given or not hmac.compare_digest(given.encode(), self.value.encode()):
            return False
        if origin is None:  # browsers send Origin on every cross-site POST; a missing one is not cross-site
            return True
        return origin.lower() in (f"http://{(host or '').lower()}", f"https://{(host or '').lower()}")


class DiagnosisBudget:
    """Diagnoses kept per (pod, resourceVersion) for `ttl` seconds; new ones rate-limited."""

    def __init__(self, rate: float = 1.0, burst: int = 5, ttl: float = 15.0, max_kept: int = 256):
        self.rate, self.burst, self.ttl, self.max_kept = rate, burst, ttl, max_kept
        self.tokens = float(burst)
        self.at: float | None = None
        self.kept: OrderedDict[tuple, tuple[float, Any]] = OrderedDict()
        self.made = 0      # diagnoses run
        self.refused = 0   # diagnoses not run: over the rate
        self.reused = 0    # answered from what was kept

    def cached(self, key: tuple, now: float) -> tuple[bool, Any]:
        got = self.kept.get(key)
        if got is not None and now - got[0] < self.ttl:
            self.reused += 1
            return True, got[1]
        return False, None

    def take(self, now: float) -> bool:
        """One new diagnosis may run now."""
        if self.at is not None:
            self.tokens = min(float(self.burst), self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1.0:
            self.refused += 1
            return False
        self.tokens -= 1.0
        self.made += 1
        return True

    def keep(self, key: tuple, now: float, diagnosis: Any) -> None:
        self.kept[key] = (now, diagnosis)
        self.kept.move_to_end(key)
        while len(self.kept) > self.max_kept:
            self.kept.popitem(last=False)
