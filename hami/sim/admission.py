"""Mutating admission for the embedded API server, as kube-apiserver calls HAMi's webhook.

The Helm chart registers the scheduler's `/webhook` as `vgpu.hami.io` on pod CREATE with
`failurePolicy: Ignore` and selectors excluding `hami.io/webhook=ignore`. In the embedded cluster the
API server calls it the same way, so `kubectl apply` of a GPU pod gets `schedulerName:
hami-scheduler` and HAMi's defaults exactly as on a real cluster: an AdmissionReview v1 request,
the JSONPatch of the answer applied, a denial turned into the error kubectl prints.
"""

from __future__ import annotations

import base64
import uuid

import aiohttp
import jsonpatch
import orjson

from hami.obs.log import get_logger
from hami.sim.store import ApiError

log = get_logger(__name__)

IGNORE_LABEL = ("hami.io/webhook", "ignore")


class WebhookAdmission:
    def __init__(self, url: str, *, name: str = "vgpu.hami.io", timeout: float = 10.0):
        self.url = url
        self.name = name
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self.calls = 0

    def _excluded(self, obj: dict, namespace_labels: dict) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        key, value = IGNORE_LABEL
        return labels.get(key) == value or namespace_labels.get(key) == value

    async def __call__(self, resource: str, namespace: str, obj: dict, namespace_labels: dict) -> dict:
        """The object to store: mutated by the webhook, unchanged when it is unreachable (Ignore)."""
        if resource != "pods" or self._excluded(obj, namespace_labels):
            return obj
        review = {
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()), "operation": "CREATE", "namespace": namespace,
                "name": (obj.get("metadata") or {}).get("name", ""),
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "object": obj, "dryRun": False,
            },
        }
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
