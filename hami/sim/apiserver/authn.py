"""Authentication of the embedded API server: bearer tokens -> the caller's userInfo (pure).

Without tokens (the test fixture's server) every caller is `system:admin`, as before. The embedded
cluster (`--embedded`) registers one token per identity, as a real cluster issues them: people's
kubeconfig authenticates as the ordinary user `hami-demo-user` (group `system:authenticated`), hami's
scheduler and node roles as their service accounts (hami.principals). kubectl sends no bearer token to an
`http://` server, so a request without credentials is that ordinary user too (`anonymous`); an unknown
token is 401, as kube-apiserver answers it. The userInfo goes into every AdmissionReview the server sends, so the
webhook judges who wrote what (hami.scheduler.admission.placementguard; docs/security.md).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from hami.apierror import ApiError
from hami.principals import DEMO_USER, service_account_groups

ADMIN = {"username": "system:admin", "groups": ["system:masters", "system:authenticated"]}


def demo_user_info() -> dict:
    return {"username": DEMO_USER, "groups": ["system:authenticated"]}


def service_account_info(user: str) -> dict:
    return {"username": user, "groups": service_account_groups(user)}


@dataclass
class Authenticator:
    tokens: dict[str, dict] = field(default_factory=dict)  # bearer token -> userInfo
    anonymous: dict | None = None  # who a request without credentials is, once tokens are issued

    def issue(self, user_info: dict) -> str:
        """A new random token for `user_info` (what a kubeconfig then carries)."""
        token = secrets.token_urlsafe(24)
        self.tokens[token] = dict(user_info)
        return token

    def user(self, authorization: str | None) -> dict:
        """The caller's userInfo from its Authorization header; 401 for a token this server never issued."""
        if not self.tokens:
            return dict(ADMIN)
        if not authorization and self.anonymous is not None:
            return dict(self.anonymous)
        scheme, _, token = (authorization or "").partition(" ")
        info = self.tokens.get(token.strip()) if scheme.lower() == "bearer" else None
        if info is None:
            raise ApiError(401, "Unauthorized", "Unauthorized")
        return dict(info)
