"""The one error of the Kubernetes API, shared by the client (`hami.kube.client`) and the embedded
server (`hami.sim.apiserver.store`, `hami.sim.apiserver.server`); both modules re-export it. Pure: no imports.

`ApiError(status, reason, message, details)` is a Kubernetes Status: the HTTP `status` (0 when no
answer came, e.g. a timeout), `reason` (`NotFound`, `Conflict`, ...), `message` and `details`.
The client keeps the Status object the server sent as `body`; the server renders one with
`status_object()`.
"""

from __future__ import annotations


def status_body(code: int, reason: str, message: str, details: dict | None = None) -> dict:
    """A core/v1 Status object for a failure."""
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = details
    return body


class ApiError(Exception):
    """A request the API server refused (status >= 300) or that never got an answer (status 0)."""

    def __init__(self, status: int, reason: str = "", message: str = "", details: dict | None = None, *,
                 body: dict | None = None):
        self.status, self.reason, self.message, self.details = status, reason, message, details
        self.body = body or {}
        super().__init__(f"{status} {reason}: {message}" if message else f"{status} {reason}")

    @property
    def code(self) -> int:
        """Status.code: the HTTP status under the name the Status object gives it."""
        return self.status

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def gone(self) -> bool:
        return self.status == 410

    def status_object(self) -> dict:
        """The Status to answer with: the one received, else one built from the fields."""
        return self.body or status_body(self.status, self.reason, self.message, self.details)
