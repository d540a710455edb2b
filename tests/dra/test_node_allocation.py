"""The slices this node publishes (hami.dra.slices, hami.dra.pool) as kube-scheduler's allocator
reads them (hami.kubesched.allocator, checked against upstream's cases): the field names and
semantics meet, and each allocation is one `hami.dra.shares` then prepares.

Covers: a MIG partition is allocated from the GPU's counters, a second at the other placement, a
third refused, and the whole GPU no longer fits while a partition holds the card (and the other
way round); the `shares` capacity lets deviceSplitCount claims share a GPU and refuses the next; a
tainted GPU takes only claims that tolerate the taint; every allocation reads back through
`shares` as the plugin will prepare it.
"""

from __future__ import annotations

from hami.device.nodeconfig import DeviceSettings
from hami.dra.pool import pool_slices
from hami.dra.shares import published_gpus, shares
from hami.dra.slices import TAINT_XID, GpuState, health_taints, layout_for
from hami.gpu.backend import GpuInfo
from hami.gpu.mig import geometries
from hami.kubesched.allocator import Allocator, Usage, inventory
from tests.dra._objects import DEVICE_CLASS, DRIVER, claim

MIG_CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "mig"},
             "spec": {"selectors": [{"cel": {"expression":
                 f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "mig"'}}]}}
CLASSES = {DRIVER: DEVICE_CLASS, "mig": MIG_CLASS}
M0 = GpuInfo("GPU-m0", 0, "NVIDIA A100-SXM4-40GB", 40960, minor=0)
W1 = GpuInfo("GPU-w1", 1, "NVIDIA A100-SXM4-40GB", 40960, minor=1)


def _pool(gpus, states, settings=DeviceSettings(split_count=2)):
    layout = layout_for(gpus, settings, states)
    return inventory(pool_slices("n1", layout, 1)), published_gpus(layout.devices())


def _mig_claim(name: str, profile: str) -> dict:
    return claim(name, requests=[{"name": "gpu", "exactly": {"deviceClassName": "mig", "selectors": [{"cel": {
        "expression": f'device.attributes["{DRIVER}"].profile == "{profile}"'}}]}}])


class Node:
    def __init__(self, inv, published):
        self.inv, self.published, self.usage, self.allocator = inv, published, Usage(), Allocator()

    def allocate(self, c: dict):
        out = self.allocator.allocate([c], "n1", self.inv, self.usage, CLASSES)
        if not out.ok:
            return None, out.reason
        alloc = out.allocations[f"default/{c['metadata']['name']}"]
        self.usage.add_allocation(alloc)
        [share] = shares({**c, "status": {"allocation": alloc}}, driver=DRIVER, pool="n1", published=self.published)
        return share, ""


def test_partitions_come_from_the_counters_and_exclude_the_whole_gpu():
    node = Node(*_pool([M0, W1], {M0.uuid: GpuState(profiles=geometries()["A100-40GB"])}))
    a, _ = node.allocate(_mig_claim("a", "3g.20gb"))
    b, _ = node.allocate(_mig_claim("b", "3g.20gb"))
    assert (a.device, a.kind, a.start, a.size) == ("hami-gpu-0-mig-3g-20gb-0", "partition", 0, 4)
    assert (b.device, b.start) == ("hami-gpu-0-mig-3g-20gb-4", 4)
    none, why = node.allocate(_mig_claim("c", "1g.5gb"))
    assert none is None and why  # every memory slice is taken
    whole, _ = node.allocate(claim("w", memory_mib=1000))
    assert whole.device == "hami-gpu-1"  # GPU 0 is cut: the whole device's counters are gone
    only0 = claim("w0", memory_mib=1000, selectors=(f'device.attributes["{DRIVER}"].uuid == "GPU-m0"',))
    assert node.allocate(only0)[0] is None


def test_a_gpu_shared_whole_offers_no_partition():
    node = Node(*_pool([M0], {M0.uuid: GpuState(profiles=geometries()["A100-40GB"])}))
    s, _ = node.allocate(claim("w", memory_mib=1000, cores=10))
    assert (s.device, s.memory_mib, s.cores, s.shares) == ("hami-gpu-0", 1000, 10, 1)
    assert node.allocate(_mig_claim("m", "1g.5gb"))[0] is None
    second, _ = node.allocate(claim("w2", memory_mib=1000))  # a share of the same whole GPU still fits
    assert second.device == "hami-gpu-0"


def test_split_count_claims_share_a_gpu_and_the_next_is_refused():
    node = Node(*_pool([W1], {}))
    got = [node.allocate(claim(f"c{i}", memory_mib=100))[0] for i in range(2)]
    assert [(s.device, s.shares) for s in got] == [("hami-gpu-1", 1), ("hami-gpu-1", 1)]
    none, why = node.allocate(claim("c2", memory_mib=100))
    assert none is None and "shares" in why


def test_a_tainted_gpu_takes_only_claims_that_tolerate_it():
    sick = GpuInfo("GPU-s", 0, "NVIDIA A100-SXM4-40GB", 40960, minor=0, healthy=False)
    node = Node(*_pool([sick], {sick.uuid: GpuState(taints=tuple(health_taints(False, xids={48: 1})))}))
    assert node.allocate(claim("plain", memory_mib=100))[0] is None
    tolerant = claim("diag", memory_mib=100)
    tolerant["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [
        {"key": TAINT_XID, "operator": "Exists", "effect": "NoSchedule"}]
    s, why = node.allocate(tolerant)
    assert s is not None and s.device == "hami-gpu-0", why
