"""One fit for /filter and /bind, for every row of the vendor table, through the real
extender over HTTP against the embedded API server.

Hypothesis generates, per row of config/vendors.yaml, a node registered the way that vendor's
device plugin registers it (hami.sim.kubelet.vendornodes.vendor_registration; NVIDIA's register annotation
and handshake for the NVIDIA row; Ascend nodes with or without `hami-vnpu-core`; Vastai nodes of
dies naming their card in custominfo, or of plain cards) and a pod asking for that vendor (count,
memory, cores, Ascend's `huawei.com/vnpu-mode: hami-core`). A pod /filter
places on the otherwise idle cluster then binds: /bind answers no error, writes exactly the
placement /filter chose (every allocation annotation byte for byte), and its re-check under the
node lock kept those devices (no refusal, no re-fit): a hami-core Ascend pod asking more cores
than the NPU registered (50 of 20) must be refused by /filter, not placed there and refused by /bind.

One scheduler and API server serve every example (a loop in a thread); each example uses a fresh
node and deletes it, so the cluster stays idle. Few examples per row keep the CI time small.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hami.config import default_vendor_table
from hami.device import codec
from hami.device.vendors import Vendor
from hami.sim.apiserver.server import ApiServer
from hami.sim.apiserver.store import Store
from hami.sim.kubelet.vendornodes import vendor_registration
from tests.kube.helpers import node_obj, pod_obj
from tests.kube.scheduler_env import requesting_now, start_env, stop_env

TABLE = default_vendor_table()
ROWS = [v.name for v in TABLE.vendors]
TIMED_OUT = 20.0
_names = itertools.count()


class _Shared:
    """The embedded API server and a started scheduler, on an event loop of their own thread."""

    def __init__(self, tmp: str):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = ApiServer(Store(), "127.0.0.1", 0)
        self.run(self.server.start())
        self.server.write_kubeconfig(f"{tmp}/kubeconfig")
        self.env = self.run(start_env(self.server))

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(TIMED_OUT)

    def close(self) -> None:
        self.run(stop_env(self.env))
        self.run(self.server.stop())
        self.run(_cancel_the_rest())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


async def _cancel_the_rest() -> None:
    rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for t in rest:
        t.cancel()
    await asyncio.gather(*rest, return_exceptions=True)


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    s = _Shared(str(tmp_path_factory.mktemp("filterbind")))
    try:
        yield s
    finally:
        s.close()


def _node(v: Vendor, name: str, cards: int, memory: int, hami_core: bool, devcore: int = 100) -> dict:
    if v.hook == "nvidia":
        return node_obj(name, cards, memory, handshake=requesting_now())
    annos, capacity = vendor_registration(name, next(_names), [(v, cards, memory)])
    if v.register_format == "json" and v.register_key in annos:  # e.g. Ascend's aiCore: 20 on a 910B3
        annos[v.register_key] = annos[v.register_key].replace('"devcore":100', f'"devcore":{devcore}')
    if v.hook == "amd":  # the AMD plugin registers the card's product name as its type
        annos[v.register_key] = annos[v.register_key].replace('"type":"AMD"', '"type":"AMD_Instinct_MI300X_VF"')
    if v.die_groups and hami_core:  # Vastai's die strategy: two dies a card, custominfo names the card
        dies = [replace(d, custom_info=f'{{"AIC":"{d.index // 2}","DeviceStrategy":"die"}}')
                for d in codec.decode_node_devices_json(annos[v.register_key])]
        annos[v.register_key] = codec.encode_node_devices(dies)
    if v.hook == "ascend" and hami_core:
        annos["hami-vnpu-core"] = "true"
    obj = node_obj(name, 0, registered=False, annotations=annos)
    obj["status"]["capacity"].update(capacity)
    obj["status"]["allocatable"].update(capacity)
    return obj


@st.composite
def cases(draw, v: Vendor):
    """(node, pod limits, pod annotations) for one row: the shapes its plugin registers."""
    cards = draw(st.sampled_from((1, 2, 4, 8)) if v.hook == "kunlunxin" else st.integers(1, 4))
    unit = max(v.memory_unit, 1)
    memory = draw(st.sampled_from((16384, 32768, 65536)))
    if v.memory_allocatable and v.hook in ("ascend", "kunlunxin"):
        memory = v.memory_allocatable
    # Ascend: the node runs HAMi-core and the pod asks for it; Vastai: the node registers dies.
    hami_core = (v.hook == "ascend" or v.die_groups) and draw(st.booleans())
    devcore = draw(st.sampled_from((100, 20, 8)))  # what a JSON-registering plugin says a card has
    limits = {v.count_resource: str(draw(st.integers(1, cards)))}
    annotations: dict[str, str] = {}
    if v.hook == "enflame":  # DRS: a profile's slices (the sim's 1g/3g/6g), or memory and cores
        if draw(st.booleans()):
            return cards, memory, False, 100, {v.count_resource: str(draw(st.sampled_from((1, 3, 6))))}, {}
        return cards, memory, False, 100, {v.memory_resource: str(draw(st.integers(1, 40960))),
                                           v.core_resource: str(draw(st.integers(1, 100)))}, {}
    if v.memory_resource and draw(st.booleans()):
        limits[v.memory_resource] = str(draw(st.integers(1, max(1, memory // unit))))
    if v.core_resource and (v.hook != "ascend" or hami_core) and draw(st.booleans()):
        limits[v.core_resource] = str(draw(st.integers(0, 100)))
    if hami_core and v.hook == "ascend":
        annotations["huawei.com/vnpu-mode"] = "hami-core"
    return cards, memory, hami_core, devcore, limits, annotations


async def _filter_then_bind(env, node: dict, pod: dict) -> tuple[dict, dict, dict, tuple[int, int]] | None:
    name = node["metadata"]["name"]
    env.store.create("nodes", "", node)
    state = env.sched.state
    try:
        for _ in range(200):  # the node watch delivers it (no sleep on the common path)
            if name in state.registered or name in state.index.nodes:
                break
            await asyncio.sleep(0.01)
        created = env.create_pod(pod)
        out = await env.filter(created, [name])
        if out["NodeNames"] != [name]:
            return None
        chosen = env.placement("default", created["metadata"]["name"])
        before = (env.sched.binder.overcommit_refusals, env.sched.binder.refits)
        res = await env.bind(created, name)
        stored = env.pod("default", created["metadata"]["name"])
        binder = env.sched.binder
        return res, chosen, stored, (binder.overcommit_refusals - before[0], binder.refits - before[1])
    finally:
        for kind, ns, obj in (("pods", "default", pod), ("nodes", "", node)):
            try:
                env.store.delete(kind, ns, obj["metadata"]["name"])
            except Exception:  # noqa: BLE001 - the pod was never created: nothing to remove
                pass


@pytest.mark.parametrize("row", ROWS)
def test_a_pod_filter_places_on_an_idle_node_binds_to_the_devices_filter_chose(shared, row):
    v = TABLE.get(row)

    @settings(max_examples=4, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow,
                                     HealthCheck.function_scoped_fixture])
    @given(cases(v))
    def check(case):
        cards, memory, hami_core, devcore, limits, annotations = case
        n = next(_names)
        node = _node(v, f"fb-{n}", cards, memory, hami_core, devcore)
        pod = pod_obj(f"fb-pod-{n}", gpus=0, annotations=annotations)
        pod["spec"]["containers"][0]["resources"]["limits"] = limits
        got = shared.run(_filter_then_bind(shared.env, node, pod))
        assume(got is not None)  # a pod /filter places: the property is about those
        res, chosen, stored, (refused, refitted) = got
        assert res["Error"] == "", (row, limits, annotations, res["Error"])
        assert stored["spec"]["nodeName"] == node["metadata"]["name"]
        written = stored["metadata"]["annotations"]
        assert {k: written.get(k) for k in chosen} == chosen  # the devices /filter chose, as chosen
        if v.hook == "amd":  # HAMi's AMD string names the product (design doc 4.2)
            assert ",AMD_Instinct_MI300X_VF," in written[v.allocated_key]
        assert (refused, refitted) == (0, 0)  # the re-check kept them: the same fit, the same answer

    check()


def test_hami_core_ascend_pod_asking_more_cores_than_registered_binds(shared):
    """Issue 33's bug 5, as a plain case: /filter counts a hami-core NPU as 100 cores (HAMi's Fit),
    the re-check must too (before: "cores 50/20" refused every such pod)."""
    v = TABLE.get("Ascend910B3")
    node = _node(v, "fb-core", 1, 65536, True, devcore=20)
    assert '"devcore":20' in node["metadata"]["annotations"][v.register_key]
    pod = pod_obj("fb-core-pod", gpus=0, annotations={"huawei.com/vnpu-mode": "hami-core"})
    pod["spec"]["containers"][0]["resources"]["limits"] = {
        v.count_resource: "1", v.memory_resource: "8192", v.core_resource: "50"}
    got = shared.run(_filter_then_bind(shared.env, node, pod))
    assert got is not None, "filter refused the pod"
    res, chosen, stored, counts = got
    assert res["Error"] == "" and counts == (0, 0)
    assert stored["metadata"]["annotations"][v.allocated_key] == chosen[v.allocated_key]
    assert stored["metadata"]["annotations"][v.allocation_key] == chosen[v.allocation_key]
    assert '"memory":8192,"core":50' in chosen[v.allocation_key]
