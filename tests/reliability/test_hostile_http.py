"""Hostile input to the scheduler's HTTP surfaces: /filter, /bind and /webhook of a
running scheduler over HTTP get bodies derived from valid ones by the seeded fuzzer in _fuzz.py
(truncated, nested thousands deep, huge, wrong types, unicode and lone surrogates, missing
fields, damaged bytes). Every answer is a clear error (HTTP 200 with a non-empty `Error` string
for the extender, HTTP 400 with text or an AdmissionReview refusal for the webhook, 413 for bodies
over the limit), never a 500 or a dropped connection, and the process keeps serving: after
each target a valid filter and bind still place a pod. The number of inputs per target is
recorded for docs/reliability.md."""

from __future__ import annotations

import zlib

import orjson
import pytest

from tests.kube.helpers import pod_obj
from tests.kube.scheduler_env import hami_nodes, running_env
from tests.reliability._fuzz import bodies
from tests.reliability._record import record

pytestmark = pytest.mark.timeout(120)
N = 500


@pytest.fixture
async def env(apiserver):
    async with running_env(apiserver, hami_nodes(2)) as e:
        # a bind naming a pod the cache has not seen waits `catch_up` (1 s) for the watch; fuzzed
        # names are never coming, so a short wait keeps 500 inputs from costing minutes
        e.sched.extender.binder.catch_up = 0.02
        yield e


async def post(env, path: str, body: bytes) -> tuple[int, bytes]:
    async with env.http.post(env.sched.url + path, data=body,
                             headers={"Content-Type": "application/json"}) as r:
        return r.status, await r.read()


async def still_serving(env, name: str) -> None:
    async with env.http.get(env.sched.url + "/healthz") as r:
        assert r.status == 200
    pod = env.create_pod(pod_obj(name, mem=1000))
    node = (await env.filter(pod, ["n0", "n1"]))["NodeNames"][0]
    assert (await env.bind(pod, node)) == {"Error": ""}


def seeds(env) -> dict[str, dict]:
    victim = env.create_pod(pod_obj("victim", mem=2000, cores=10))
    return {
        "/filter": {"Pod": victim, "NodeNames": ["n0", "n1"]},
        "/filter (Nodes)": {"Pod": victim, "Nodes": {"items": [env.store.get("nodes", "", "n0")]}},
        "/bind": {"PodName": "victim", "PodNamespace": "default", "PodUID": victim["metadata"]["uid"],
                  "Node": "n0"},
        "/webhook": {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                     "request": {"uid": "u-1", "namespace": "default", "operation": "CREATE",
                                 "object": pod_obj("w", mem=1000, scheduler="")}},
    }


@pytest.mark.parametrize("target", ["/filter", "/filter (Nodes)", "/bind", "/webhook"])
async def test_fuzzed_bodies_get_clear_errors_and_the_process_keeps_serving(env, target):
    path = target.split()[0]
    seed = seeds(env)[target]
    statuses: dict[int, int] = {}
    errors = 0
    n = 0
    for body in bodies(seed, N, seed=zlib.crc32(target.encode())):
        n += 1
        status, data = await post(env, path, body)
        statuses[status] = statuses.get(status, 0) + 1
        assert status in (200, 400, 413), (status, body[:300], data[:300])
        if status == 200:
            doc = orjson.loads(data)
            assert isinstance(doc, dict)
            if path == "/webhook":
                resp = doc["response"]
                assert isinstance(resp["allowed"], bool)
                if not resp["allowed"]:
                    assert resp["status"]["message"], doc
                    errors += 1
            else:
                assert isinstance(doc.get("Error"), str)
                errors += bool(doc["Error"])
        elif status == 400:
            assert data.strip(), body[:200]
            errors += 1
    huge = orjson.dumps({**seed, "pad": "x" * (env.sched.config.scheduler.max_request_bytes + 1)})
    status, _ = await post(env, path, huge)
    assert status == 413
    n += 1
    await still_serving(env, "after-" + target.strip("/").replace(" ", "").replace("(", "-").replace(")", "").lower())
    record(f"fuzz {target}", fuzz_inputs=n, clear_errors=errors + 1, http_status=statuses)
