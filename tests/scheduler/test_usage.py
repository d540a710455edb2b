"""The incremental usage index (hami.scheduler.placement.usage).

Covers: building node usage from decoded register devices, add_pod/remove_pod idempotence (a pod
counts once, replaced data replaces usage), terminal pods releasing, pods seen before their node
registers, re-registration re-applying usage, CollapseInitContainerUsage (§7.3, HAMi
`pkg/device/initContainer.go`) and the app-only usage once init containers exited, the cached
node score invalidated on change, cordon parsing (`TestCordonedDevices`), ResourceQuota usage
and FitQuota (`pkg/device/quota.go`, `TestFitQuota` of device_test.go), MIG placements, and (hypothesis) incremental
usage equal to HAMi's full recomputation, the node score's exact-integer shortcut equal to Go's float32 steps bit for
bit.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hami.device.model import ContainerDevice, MigPlacement, NvidiaConfig
from hami.scheduler.placement.usage import UsageIndex, collapse_usage, node_score

from ._helpers import info


def cd(uuid, mem, cores=0):
    return ContainerDevice(uuid, "NVIDIA", mem, cores)


def index():
    idx = UsageIndex()
    idx.set_node("n1", [info("GPU-0", index=0), info("GPU-1", index=1, numa=1)])
    return idx


def usage(idx, node="n1"):
    return {d.id: (d.used, d.usedmem, d.usedcores) for d in idx.nodes[node].devices}


def test_registered_devices_start_unused():
    idx = index()
    assert usage(idx) == {"GPU-0": (0, 0, 0), "GPU-1": (0, 0, 0)}
    d = idx.nodes["n1"].by_id["GPU-1"]
    assert (d.count, d.totalmem, d.totalcore, d.numa, d.type, d.is_nvidia) == (10, 8000, 100, 1,
                                                                               "NVIDIA A100-SXM4-40GB", True)


def test_add_pod_is_idempotent_and_remove_releases():
    idx = index()
    devs = ((cd("GPU-0", 1000, 30),),)
    assert idx.add_pod("ns/a", "n1", devs, namespace="ns")
    assert not idx.add_pod("ns/a", "n1", devs, namespace="ns")
    assert usage(idx)["GPU-0"] == (1, 1000, 30)
    assert idx.remove_pod("ns/a")
    assert not idx.remove_pod("ns/a")
    assert usage(idx)["GPU-0"] == (0, 0, 0)


def test_changed_pod_data_replaces_old_usage():
    idx = index()
    idx.add_pod("ns/a", "n1", ((cd("GPU-0", 1000),),))
    idx.add_pod("ns/a", "n1", ((cd("GPU-1", 500),),))
    assert usage(idx) == {"GPU-0": (0, 0, 0), "GPU-1": (1, 500, 0)}


def test_pods_before_node_registration_and_re_registration():
    idx = UsageIndex()
    idx.add_pod("ns/a", "n1", ((cd("GPU-0", 1000, 10),),))
    idx.set_node("n1", [info("GPU-0")])
    assert usage(idx)["GPU-0"] == (1, 1000, 10)
    idx.set_node("n1", [info("GPU-0", devmem=16000)])
    assert usage(idx)["GPU-0"] == (1, 1000, 10)
    assert idx.nodes["n1"].by_id["GPU-0"].totalmem == 16000
    assert idx.pods_on("n1") == ("ns/a",)


def test_unknown_uuids_are_ignored():
    idx = index()
    idx.add_pod("ns/a", "n1", ((cd("GPU-x", 1000),),))
    assert usage(idx)["GPU-0"] == (0, 0, 0)


def test_collapse_init_container_usage():
    # init: max; app: sum; slots: max(1 if init, app occurrences, 1)
    containers = ((cd("A", 3000, 10),), (cd("A", 5000, 20), cd("B", 100)), (cd("A", 1000, 5),), (cd("A", 1500, 5),))
    got = collapse_usage(containers, 2)
    assert got == {"A": (5000, 20, 2), "B": (100, 0, 1)}
    assert list(got) == ["A", "B"]
    assert collapse_usage(((cd("A", 1, 1),), (cd("A", 2, 2),)), 0) == {"A": (3, 3, 2)}


def test_pod_with_init_containers_counts_collapsed_and_shrinks_when_released():
    idx = index()
    devs = ((cd("GPU-0", 6000, 50),), (cd("GPU-0", 1000, 10),), (cd("GPU-0", 1000, 10),))
    idx.add_pod("ns/a", "n1", devs, num_init=1)
    assert usage(idx)["GPU-0"] == (2, 6000, 50)
    idx.add_pod("ns/a", "n1", devs, num_init=1, init_released=True)
    assert usage(idx)["GPU-0"] == (2, 2000, 20)


def test_node_score_cache_follows_usage():
    idx = index()
    n = idx.nodes["n1"]
    assert n.score() == 0.0
    idx.add_pod("ns/a", "n1", ((cd("GPU-0", 8000, 100),),))
    assert n.score() == 10 * (1 / 20 + 100 / 200 + 8000 / 16000)
    idx.remove_pod("ns/a")
    assert n.score() == 0.0


def test_quota_tracks_collapsed_usage_and_limits():
    idx = UsageIndex(NvidiaConfig())
    assert idx.quota_view("default") is None
    idx.set_quota("default", "q", {"limits.nvidia.com/gpumem": 2048, "requests.cpu": 4})
    view = idx.quota_view("default")
    assert view is not None and view.fits(2048, 0) and not view.fits(2049, 0)
    idx.add_pod("default/a", "n1", ((cd("GPU-0", 1024, 2),),), namespace="default")
    assert idx.quota_view("default").fits(1024, 0)
    assert not idx.quota_view("default").fits(1025, 0)
    assert idx.quota_used("default")["nvidia.com/gpumem"] == (1024, 2048)
    idx.remove_pod("default/a")
    assert idx.quota_view("default").fits(2048, 0)
    idx.remove_quota("default", "q")
    assert idx.quota_view("default") is None


def test_quota_memory_limit_scales_with_memory_factor():
    idx = UsageIndex(NvidiaConfig(memory_factor=4))
    idx.set_quota("ns", "q", {"limits.nvidia.com/gpumem": 100, "limits.nvidia.com/gpucores": 50})
    view = idx.quota_view("ns")
    assert view.fits(400, 50) and not view.fits(401, 0) and not view.fits(0, 51)


def test_mig_placements_are_tracked():
    idx = index()
    pl = MigPlacement(0, 1)
    idx.add_pod("ns/a", "n1", ((cd("GPU-0", 4864, 15),),), mig=(("GPU-0", pl),))
    assert idx.nodes["n1"].by_id["GPU-0"].mig_in_use == [pl]
    idx.remove_pod("ns/a")
    assert idx.nodes["n1"].by_id["GPU-0"].mig_in_use == []


def test_a_gpu_without_mig_placements_shares_one_empty_tuple_and_a_clone_gets_its_own_list():
    idx = index()
    a, b = idx.nodes["n1"].by_id["GPU-0"], idx.nodes["n1"].by_id["GPU-1"]
    assert a.mig_in_use == () and a.mig_in_use is b.mig_in_use
    pl = MigPlacement(0, 1)
    idx.add_pod("ns/a", "n1", ((cd("GPU-0", 4864, 15),),), mig=(("GPU-0", pl),))
    assert a.mig_in_use == [pl] and b.mig_in_use == ()
    copy = a.clone()
    copy.hold_mig(MigPlacement(1, 1))
    assert a.mig_in_use == [pl] and copy.mig_in_use == [pl, MigPlacement(1, 1)]
    other = b.clone()
    other.hold_mig(pl)
    assert b.mig_in_use == () and other.mig_in_use == [pl]


def test_a_pods_usage_is_worked_out_from_its_devices_as_counted():
    idx = index()
    devs = ((cd("GPU-1", 300, 5),), (cd("GPU-0", 1000, 30), cd("GPU-1", 200, 10)))
    idx.add_pod("ns/a", "n1", devs, num_init=1)
    rec = idx.pod("ns/a")
    assert rec.usage == (("GPU-0", 1000, 30, 1), ("GPU-1", 300, 10, 1))  # init's 300 > app's 200 on GPU-1
    idx.add_pod("ns/a", "n1", devs, num_init=1, init_released=True)
    assert idx.pod("ns/a").usage == (("GPU-0", 1000, 30, 1), ("GPU-1", 200, 10, 1))
    assert usage(idx) == {"GPU-0": (1, 1000, 30), "GPU-1": (1, 200, 10)}
    idx.remove_pod("ns/a")
    assert usage(idx) == {"GPU-0": (0, 0, 0), "GPU-1": (0, 0, 0)}


def test_usage_for_builds_unstored_node_with_known_pods():
    idx = index()
    idx.add_pod("ns/a", "n2", ((cd("X", 100),),))
    n = idx.usage_for("n2", [info("X")])
    assert n.by_id["X"].used == 1 and "n2" not in idx.nodes


# --------------------------------------------------------------------------- incremental == recomputed

_uuid = st.sampled_from(["GPU-0", "GPU-1", "GPU-2"])
_ctr = st.lists(st.builds(cd, _uuid, st.integers(0, 4000), st.integers(0, 50)), max_size=3).map(tuple)
_pod_op = st.tuples(st.sampled_from(["add", "remove"]), st.integers(0, 5), st.sampled_from(["n1", "n2"]),
                    st.lists(_ctr, min_size=1, max_size=4).map(tuple), st.integers(0, 2), st.booleans())


@settings(max_examples=100, deadline=None)
@given(st.lists(_pod_op, max_size=30))
def test_incremental_usage_equals_a_full_recomputation(ops):
    idx = UsageIndex()
    for name in ("n1", "n2"):
        idx.set_node(name, [info("GPU-0"), info("GPU-1"), info("GPU-2")])
    live = {}
    for op, k, node, devs, n_init, released in ops:
        key = f"ns/p{k}"
        if op == "add":
            idx.add_pod(key, node, devs, namespace="ns", num_init=min(n_init, len(devs)), init_released=released)
            live[key] = (node, devs, min(n_init, len(devs)), released)
        else:
            idx.remove_pod(key)
            live.pop(key, None)
    # HAMi getNodesUsage: start from zero and add every live pod's collapsed usage.
    want = {(n, g): [0, 0, 0] for n in ("n1", "n2") for g in ("GPU-0", "GPU-1", "GPU-2")}
    for node, devs, n_init, released in live.values():
        coll = collapse_usage(devs[n_init:], 0) if released else collapse_usage(devs, n_init)
        for uuid, (mem, cores, slots) in coll.items():
            w = want[(node, uuid)]
            w[0] += max(slots, 1)
            w[1] += mem
            w[2] += cores
    for (node, uuid), (used, mem, cores) in want.items():
        d = idx.nodes[node].by_id[uuid]
        assert (d.used, d.usedmem, d.usedcores) == (used, mem, cores)
    for name in ("n1", "n2"):
        assert idx.nodes[name].score() == node_score(idx.nodes[name].devices)


def test_metax_app_classes_are_counted_per_card_and_follow_the_pods():
    """HAMi's DeviceUsage.PodInfos as MetaX reads them: each online/offline pod counts once per
    container device naming the card; other pods (no class, or an unknown one) are not counted;
    removal, replacement and re-registration keep the counts right."""
    idx = index()
    idx.add_pod("on", "n1", ((cd("GPU-0", 100),), (cd("GPU-0", 100), cd("GPU-1", 100))), app_class="online")
    idx.add_pod("off", "n1", ((cd("GPU-1", 100),),), app_class="offline")
    idx.add_pod("plain", "n1", ((cd("GPU-1", 100),),), app_class="")
    idx.add_pod("odd", "n1", ((cd("GPU-1", 100),),), app_class="batch")
    n = idx.node("n1")
    assert n.app_classes == {"GPU-0": [2, 0], "GPU-1": [1, 1]}
    assert idx.pod("odd").app_class == ""
    idx.set_node("n1", [info("GPU-0", index=0), info("GPU-1", index=1, numa=1)])  # re-registered
    assert idx.node("n1").app_classes == {"GPU-0": [2, 0], "GPU-1": [1, 1]}
    assert not idx.add_pod("off", "n1", ((cd("GPU-1", 100),),), app_class="offline")  # same data: no-op
    assert idx.add_pod("off", "n1", ((cd("GPU-1", 100),),), app_class="online")  # reclassified
    assert idx.node("n1").app_classes == {"GPU-0": [2, 0], "GPU-1": [2, 0]}
    idx.remove_pod("on")
    assert idx.node("n1").app_classes == {"GPU-1": [1, 0]}
    idx.remove_pod("off")
    assert idx.node("n1").app_classes == {}


@settings(max_examples=500, deadline=None)
@given(st.integers(0, 1 << 25), st.integers(0, 1 << 25), st.integers(0, 1 << 25),
       st.integers(0, 1 << 25), st.integers(0, 1 << 25), st.integers(0, 1 << 25))
def test_the_node_score_is_gos_float32_steps_whatever_the_sums(used, cores, mem, total, tcore, tmem):
    """score_from_sums takes a shortcut for sums float32 holds exactly; it must give Go's
    float32(used)/float32(total) ... steps bit for bit, inside and outside that range."""
    from hami.scheduler.placement.policy import f32
    from hami.scheduler.placement.usage import score_from_sums

    ten = f32(10.0)
    if total == 0 or tcore == 0 or tmem == 0:
        want = 0.0
    else:
        a, b, c = f32(f32(used) / f32(total)), f32(f32(cores) / f32(tcore)), f32(f32(mem) / f32(tmem))
        want = f32(ten * f32(f32(a + b) + c))
    assert score_from_sums(used, cores, mem, total, tcore, tmem) == want


@given(st.integers(-5, 5000), st.integers(-5, 100), st.booleans(), st.integers(0, 2))
def test_a_one_card_pods_usage_is_its_collapsed_devices(mem, cores, released, others):
    """A pod's usage read back from its record is collapse_usage's, for one card in one container
    (the record's own shortcut) and with more containers beside it."""
    devices = ((ContainerDevice("G-0", "NVIDIA", mem, cores),),) + tuple(
        (ContainerDevice(f"G-{i}", "NVIDIA", mem + i, cores),) for i in range(1, others + 1))
    idx = UsageIndex()
    idx.add_pod("ns/a", "n0", devices, namespace="ns", init_released=released)
    want = collapse_usage(devices, 0)
    assert idx.pod("ns/a").usage == tuple((u, *v) for u, v in want.items())
