"""Authorization of the embedded API server: which requests the caller may make, and the
SelfSubjectAccessReview answer that tells a client so in advance.

Pure (no I/O). Allow-all by default, as a server whose caller is cluster-admin; a test denies
(verb, group, resource[/subresource]) rules to stand for an RBAC role that lacks them. The same
decision answers every request (403 with kube-apiserver's `forbiddenMessage` text) and every
SelfSubjectAccessReview (`status.allowed`), as RBAC does behind both on a real server
(k8s.io/apiserver pkg/endpoints/handlers/responsewriters/errors.go; pkg/registry/authorization/
selfsubjectaccessreview/rest.go: `spec` needs exactly one of resourceAttributes /
nonResourceAttributes, else 422).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hami.apierror import ApiError

SSAR_KIND = "SelfSubjectAccessReview"
SSAR_API_VERSION = "authorization.k8s.io/v1"


@dataclass(frozen=True, slots=True)
class Attributes:
    verb: str
    group: str
    resource: str
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    @property
    def full_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


@dataclass
class Authorizer:
    user: str = "system:admin"
    # (verb, group, "resource" or "resource/subresource") -> reason; "*" matches any verb
    denied: dict[tuple[str, str, str], str] = field(default_factory=dict)

    def deny(self, verb: str, resource: str, group: str = "", reason: str = "") -> None:
        self.denied[(verb, group, resource)] = reason

    def allow_all(self) -> None:
        self.denied.clear()

    def decide(self, a: Attributes) -> tuple[bool, str]:
        """(allowed, reason); reason is empty unless a denial rule gives one."""
        for verb in (a.verb, "*"):
            rule = self.denied.get((verb, a.group, a.full_resource))
            if rule is not None:
                return False, rule
        return True, ""

    def check(self, a: Attributes) -> None:
        """Raise kube-apiserver's 403 when `a` is not allowed."""
        allowed, reason = self.decide(a)
        if not allowed:
            raise forbidden(self.user, a, reason)


def forbidden(user: str, a: Attributes, reason: str = "") -> ApiError:
    """responsewriters.forbiddenMessage + NewForbidden: `<resource> "<name>" is forbidden: User
    "<user>" cannot <verb> resource "<res>" in API group "<group>" in the namespace "<ns>"`."""
    res = a.full_resource
    where = f' in the namespace "{a.namespace}"' if a.namespace else " at the cluster scope"
    why = f'User "{user}" cannot {a.verb} resource "{res}" in API group "{a.group}"{where}'
    if reason:
        why += f": {reason}"
    qualified = f"{res}.{a.group}" if a.group else res
    subject = f'{qualified} "{a.name}"' if a.name else qualified
    return ApiError(403, "Forbidden", f"{subject} is forbidden: {why}",
                    {"name": a.name, "group": a.group, "kind": a.resource})


def review(authorizer: Authorizer, body: dict) -> dict:
    """Answer a SelfSubjectAccessReview (what the create returns; nothing is stored)."""
    if not isinstance(body, dict) or body.get("kind", SSAR_KIND) != SSAR_KIND:
        raise ApiError(400, "BadRequest", f"the body of a {SSAR_KIND} must be a {SSAR_KIND} object")
    spec = body.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    ra, nra = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if (ra is None) == (nra is None):
        raise ApiError(422, "Invalid", f'{SSAR_KIND}.authorization.k8s.io "" is invalid: spec.resourceAttributes: '
                       "Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must "
                       "be specified", {"kind": SSAR_KIND, "group": "authorization.k8s.io"})
    if ra is not None:
        if not isinstance(ra, dict):
            raise ApiError(400, "BadRequest", "spec.resourceAttributes must be an object")
        attrs = Attributes(str(ra.get("verb") or ""), str(ra.get("group") or ""), str(ra.get("resource") or ""),
                           str(ra.get("subresource") or ""), str(ra.get("namespace") or ""), str(ra.get("name") or ""))
        allowed, reason = authorizer.decide(attrs)
    else:
        allowed, reason = True, ""  # non-resource URLs (/healthz, ...) are not restricted here
    status: dict = {"allowed": allowed}
    if reason:
        status["reason"] = reason
    return {"kind": SSAR_KIND, "apiVersion": SSAR_API_VERSION, "metadata": {"creationTimestamp": None},
            "spec": spec, "status": status}
