"""A hostile tenant on the embedded cluster: the scheduler role, the kube-scheduler loop and a
device-plugin stand-in on the test's API server, which authenticates bearer tokens and calls the
scheduler's real /webhook over HTTP on pod CREATE, UPDATE and pods/binding (as kube-apiserver does
with the chart's MutatingWebhookConfiguration). The tenant is the embedded cluster's ordinary user
(`hami-demo-user`) with its own token; hami's clients (the kubeconfig's token) are hami's
scheduler service account, as the embedded cluster issues them."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import aiohttp
import orjson

from hami.principals import DEFAULT_TRUSTED_WRITERS, EMBEDDED_SCHEDULER_USER
from hami.sim.apiserver.admission import WebhookAdmission
from hami.sim.apiserver.authn import demo_user_info, service_account_info
from tests.sim._kubesched import Cluster, running_cluster

MERGE = "application/merge-patch+json"
JSONPATCH = "application/json-patch+json"


class Tenant:
    """The demo user's requests to the API server: (status, decoded body)."""

    def __init__(self, apiserver, cluster: Cluster, token: str, http: aiohttp.ClientSession):
        self.apiserver, self.cluster, self.token, self.http = apiserver, cluster, token, http
        self.env = cluster.env
        self.store = apiserver.store

    async def call(self, method: str, path: str, body=None, ctype: str = "application/json") -> tuple[int, dict]:
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": ctype}
        data = None if body is None else (body if isinstance(body, bytes) else orjson.dumps(body))
        async with self.http.request(method, self.apiserver.url + path, data=data, headers=headers) as r:
            raw = await r.read()
            return r.status, (orjson.loads(raw) if raw else {})

    async def create_pod(self, pod: dict) -> tuple[int, dict]:
        ns = pod["metadata"].get("namespace", "default")
        return await self.call("POST", f"/api/v1/namespaces/{ns}/pods", pod)

    async def patch_pod(self, name: str, patch, ns: str = "default", ctype: str = MERGE) -> tuple[int, dict]:
        return await self.call("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}", patch, ctype)

    async def bind(self, name: str, node: str, annotations: dict | None = None, ns: str = "default"):
        binding = {"apiVersion": "v1", "kind": "Binding",
                   "metadata": {"name": name, "namespace": ns, **({"annotations": annotations} if annotations else {})},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        return await self.call("POST", f"/api/v1/namespaces/{ns}/pods/{name}/binding", binding)


def webhook_admission(url: str) -> WebhookAdmission:
    """The chart's registration: CREATE and UPDATE (and pods/binding), hami's own UPDATEs skipped."""
    return WebhookAdmission(url, operations=("CREATE", "UPDATE"), skip_users=DEFAULT_TRUSTED_WRITERS)


@contextlib.asynccontextmanager
async def tenant_cluster(apiserver, nodes, **sched) -> AsyncIterator[Tenant]:
    async with running_cluster(apiserver, nodes, **sched) as cluster:
        # hami's clients carry the kubeconfig's token: from now on it is the scheduler's account.
        apiserver.authn.tokens["hami-sim"] = service_account_info(EMBEDDED_SCHEDULER_USER)
        token = apiserver.authn.issue(demo_user_info())
        apiserver.admission = webhook_admission(cluster.env.sched.url + "/webhook")
        async with aiohttp.ClientSession() as http:
            yield Tenant(apiserver, cluster, token, http)
