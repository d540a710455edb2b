"""Mutating admission for the embedded API server, as kube-apiserver calls HAMi's webhook.

The Helm chart registers the scheduler's `/webhook` as `vgpu.hami.io` on pod CREATE and UPDATE and on
pods/binding CREATE with `failurePolicy: Ignore`, skipping namespaces labelled `hami.io/webhook=ignore` (a pod's own
label does not opt it out: a tenant could skip the webhook's rules) and, through matchConditions, UPDATEs from hami's
own service accounts. In the embedded cluster the API server calls it the same way, so `kubectl apply` of a GPU
pod gets `schedulerName: hami-scheduler` and HAMi's defaults exactly as on a real cluster: an
AdmissionReview v1 request carrying the caller's userInfo (and the old object on UPDATE), the JSONPatch
of the answer applied, a denial turned into the error kubectl prints. `operations` says which
operations are sent (CREATE only unless asked), `skip_users` the matchConditions' principals (their
UPDATEs and Bindings skip the call; every pod CREATE is mutated, whoever makes it, e.g. the embedded Job
controller). A Binding (`subresource="binding"`) is sent as kube-apiserver sends it, kind Binding on
resource pods, subResource binding, only when it carries annotations (the chart's matchConditions:
the plain Bindings of every scheduler need no round trip; its annotations are what lands on the pod).
A pods/status UPDATE that changes annotations is sent too (subResource status): on a real cluster the
chart's ValidatingAdmissionPolicy judges it with the same rule, and this server runs no policies.
"""

from __future__ import annotations

import base64
import uuid

import aiohttp
import jsonpatch
import orjson

from hami.obs.log import get_logger
from hami.sim.apiserver.store import ApiError

log = get_logger(__name__)

IGNORE_LABEL = ("hami.io/webhook", "ignore")


def _annotations(obj: dict | None) -> dict:
    meta = (obj or {}).get("metadata")
    annos = meta.get("annotations") if isinstance(meta, dict) else None
    return annos if isinstance(annos, dict) else {}


class WebhookAdmission:
    def __init__(self, url: str, *, name: str = "vgpu.hami.io", timeout: float = 10.0,
                 operations: tuple[str, ...] = ("CREATE",), skip_users: tuple[str, ...] = ()):
        self.url = url
        self.name = name
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self.operations = operations
        self.skip_users = frozenset(skip_users)
        self.calls = 0

    def _excluded(self, namespace_labels: dict) -> bool:
        key, value = IGNORE_LABEL  # the operator's namespace label; a pod's own label is no opt-out
        return namespace_labels.get(key) == value

    async def __call__(self, resource: str, namespace: str, obj: dict, namespace_labels: dict, *,
                       user: dict | None = None, operation: str = "CREATE", old: dict | None = None,
                       subresource: str = "") -> dict:
        """The object to store: mutated by the webhook, unchanged when it is unreachable (Ignore)."""
        if resource != "pods" or operation not in self.operations or self._excluded(namespace_labels):
            return obj
        if subresource not in ("", "binding", "status"):
            return obj
        if subresource == "status" and _annotations(obj) == _annotations(old):
            # pods/status writes the pod's metadata too: the chart's ValidatingAdmissionPolicy judges it.
            # This server runs no policies, so it asks the webhook the same question, only when the
            # annotations change (every kubelet status write would otherwise pay a round trip).
            return obj
        trusted = user is not None and user.get("username") in self.skip_users
        if (operation == "UPDATE" or subresource) and trusted:
            return obj  # the chart's matchConditions: hami's own updates and bindings need no round trip
        if subresource == "binding" and not _annotations(obj):
            return obj  # a Binding without annotations writes only spec.nodeName: nothing for the webhook
        request = {
            "uid": str(uuid.uuid4()), "operation": operation, "namespace": namespace,
            "name": (obj.get("metadata") or {}).get("name", ""),
            "kind": {"group": "", "version": "v1", "kind": "Binding" if subresource == "binding" else "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "object": obj, "dryRun": False,
        }
        if subresource:
            request["subResource"] = subresource
        if user is not None:
            request["userInfo"] = user
        if old is not None:
            request["oldObject"] = old
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
        self.calls += 1
        try:
            async with aiohttp.ClientSession(timeout=self.timeout) as http, \
                    http.post(self.url, data=orjson.dumps(review),
                              headers={"Content-Type": "application/json"}, ssl=False) as resp:
                body = await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"HTTP {resp.status}")
            answer = (orjson.loads(body) or {}).get("response") or {}
        except (aiohttp.ClientError, TimeoutError, OSError, RuntimeError, orjson.JSONDecodeError) as exc:
            # failurePolicy: Ignore, as the chart registers it.
            log.v(2).info("Admission webhook unreachable; admitting unchanged", webhook=self.name, error=str(exc))
            return obj
        if not answer.get("allowed", False):
            result = answer.get("status") or answer.get("result") or {}  # AdmissionResponse.Result is "status"
            code = int(result.get("code") or 400)
            raise ApiError(code, "Forbidden" if code == 403 else "BadRequest",
                           f'admission webhook "{self.name}" denied the request: {result.get("message", "")}')
        patch = answer.get("patch")
        if not patch:
            return obj
        try:
            ops = orjson.loads(base64.b64decode(patch))
            return jsonpatch.apply_patch(obj, ops)
        except (ValueError, jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            raise ApiError(500, "InternalError",
                           f'admission webhook "{self.name}" returned an invalid patch: {exc}') from None
