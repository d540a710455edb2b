"""DRA claims' cache dirs in the monitor (hami.monitor.claimdirs and its use by the collector and
the housekeeping tick).

Covers: claim uid -> pod/container through status.reservedFor and through the owning pod of a
template claim (pod.status.resourceClaimStatuses), a claim named directly by the pod
(resourceClaimName), one series for a claim shared by two containers, no series for a claim of
another namespace's pod, an unknown claim, or a pod of another node; the scrape showing a DRA
pod's hami_vgpu_memory_used_bytes with its pod/namespace/container labels; host-PID repair of a
claim region's slot (HAMi-core stored the container PID) through the claim's pod cgroup; the reaper never
removing an existing claim's dir (even with no pod), removing a gone claim's dir only once it has
been gone for the grace period, not reaping before the claim list is synced or without DRA; and
the resource.k8s.io/v1 probe (403/404 a clear no at once, a transient failure retried, never an
exception: a pre-1.34 cluster keeps the monitor running without DRA); (Hypothesis) that arbitrary claim/pod documents
never raise in the mapping.
"""

from __future__ import annotations

import asyncio
import os

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from hami.apierror import ApiError
from hami.gpu.fake import FakeBackend
from hami.monitor import role
from hami.monitor.claimdirs import ClaimDir, ClaimReaper, claim_container_dirs, claim_owner, claims_dir_for
from hami.monitor.hostpid import cgroup_line, write_fake_proc
from hami.monitor.metrics import MonitorCollector
from hami.monitor.shmwrite import Dev, Proc, write_region

from ._fixtures import U0, fake_gpus

POD_UID = "0a1b2c3d-1111-4000-8000-000000000001"
CLAIM_UID = "c1a1c1a1-1111-4000-8000-000000000001"
NOW = 1_700_000_000.0


def dra_pod(uid=POD_UID, name="p1", ns="ns", containers=(("cuda", ("gpu",)),), entry=None):
    entry = entry or {"name": "gpu", "resourceClaimTemplateName": "p1-gpu-tmpl"}
    return {"metadata": {"uid": uid, "name": name, "namespace": ns},
            "spec": {"containers": [{"name": c, "resources": {"claims": [{"name": n} for n in names]}}
                                    for c, names in containers],
                     "resourceClaims": [entry]},
            "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p1-gpu-x7"}]}}


def claim(uid=CLAIM_UID, name="p1-gpu-x7", ns="ns", reserved=(POD_UID,), owner=None):
    meta = {"uid": uid, "name": name, "namespace": ns}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "p1", "uid": owner,
                                    "controller": True}]
    return {"metadata": meta,
            "status": {"reservedFor": [{"resource": "pods", "name": "p1", "uid": u} for u in reserved]}}


def test_reserved_for_names_the_pod_and_the_container_using_the_claim():
    pods = {POD_UID: dra_pod(containers=(("sidecar", ()), ("cuda", ("gpu",))))}
    assert claim_owner(claim(), pods) == (POD_UID, "cuda")


def test_template_claim_before_reservation_maps_through_its_owning_pod():
    assert claim_owner(claim(reserved=(), owner=POD_UID), {POD_UID: dra_pod()}) == (POD_UID, "cuda")


def test_claim_named_directly_by_the_pod():
    pod = dra_pod(entry={"name": "gpu", "resourceClaimName": "shared"})
    assert claim_owner(claim(name="shared"), {POD_UID: pod}) == (POD_UID, "cuda")


def test_claim_shared_by_two_containers_is_one_series_under_the_first():
    pod = dra_pod(containers=(("a", ("gpu",)), ("b", ("gpu",))))
    dirs = claim_container_dirs([ClaimDir(CLAIM_UID, "/x", 0.0)], {CLAIM_UID: claim()}, {POD_UID: pod})
    assert [(d.name, d.pod_uid, d.container) for d in dirs] == [(f"claims/{CLAIM_UID}", POD_UID, "a")]


def test_no_owner_for_other_namespace_unknown_claim_or_pod_not_here():
    assert claim_owner(claim(ns="other"), {POD_UID: dra_pod()}) is None  # pod of another namespace
    assert claim_owner(claim(name="not-this-pods"), {POD_UID: dra_pod()}) is None
    assert claim_owner(claim(), {}) is None  # the pod runs on another node: not in this monitor's list
    d = ClaimDir("unknown-uid", "/x", 0.0)
    assert claim_container_dirs([d], {CLAIM_UID: claim()}, {POD_UID: dra_pod()}) == []


def test_claims_dir_sits_beside_the_containers_dir():
    assert claims_dir_for("/usr/local/vgpu/containers") == "/usr/local/vgpu/claims"
    assert claims_dir_for("/usr/local/vgpu/containers/") == "/usr/local/vgpu/claims"


def _region(claims_dir, uid=CLAIM_UID, used=3 << 30):
    path = os.path.join(claims_dir, uid, f"{uid}.cache")
    write_region(path, [Dev(U0, limit=4 << 30, sm_limit=50)], [Proc(pid=7, hostpid=4007, used={0: used})])
    return path


def test_scrape_reports_a_dra_pods_usage_with_its_labels(tmp_path):
    _region(str(tmp_path / "claims"))
    reg = CollectorRegistry(auto_describe=False)
    reg.register(MonitorCollector(cache_dir=str(tmp_path / "containers"), node_name="n1",
                                  pods=lambda: [dra_pod()], claims=lambda: [claim()], proc_root=str(tmp_path)))
    labels = {"namespace": "ns", "pod": "p1", "container": "cuda", "node": "n1", "vdevice_index": "0",
              "device_uuid": U0, "zone": "vGPU"}
    assert reg.get_sample_value("hami_vgpu_memory_used_bytes", labels) == 3 << 30
    assert reg.get_sample_value("hami_vgpu_memory_limit_bytes", labels) == 4 << 30
    assert reg.get_sample_value("hami_vgpu_core_limit_percent", labels) == 50


def test_hostpid_repair_reaches_a_claim_region(tmp_path):
    path = os.path.join(str(tmp_path / "claims"), CLAIM_UID, f"{CLAIM_UID}.cache")
    write_region(path, [Dev(U0)], [Proc(pid=12, hostpid=12, used={0: 100})])  # container PID as host PID
    proc = str(tmp_path / "proc")
    write_fake_proc(proc, 36103, [36103, 12], cgroup_line(POD_UID, "cid-cuda"))
    gpus = fake_gpus(str(tmp_path / "gpus.yaml"), [{"uuid": U0, "memory_mib": 40960,
                                                     "processes": [{"pid": 36103, "sm_util": 41}]}])
    pod = dra_pod()
    pod["status"]["containerStatuses"] = [{"name": "cuda", "containerID": "containerd://cid-cuda"}]
    reg = CollectorRegistry(auto_describe=False)
    reg.register(MonitorCollector(cache_dir=str(tmp_path / "containers"), node_name="n1", pods=lambda: [pod],
                                  claims=lambda: [claim()], proc_root=proc, backend=FakeBackend(gpus)))
    labels = {"namespace": "ns", "pod": "p1", "container": "cuda", "node": "n1", "vdevice_index": "0",
              "device_uuid": U0, "zone": "vGPU"}
    assert reg.get_sample_value("hami_container_device_utilization_ratio", labels) == 41
    assert reg.get_sample_value("hami_monitor_hostpid_repaired_slots_current") == 1


def test_without_dra_the_claims_dir_is_not_read(tmp_path):
    _region(str(tmp_path / "claims"))
    reg = CollectorRegistry(auto_describe=False)
    reg.register(MonitorCollector(cache_dir=str(tmp_path / "containers"), node_name="n1",
                                  pods=lambda: [dra_pod()], claims=None, proc_root=str(tmp_path)))
    assert reg.get_sample_value("hami_monitor_cache_files") == 0


def test_reaper_times_absence_from_the_first_tick_that_saw_it():
    reaper = ClaimReaper(grace=300)
    old = ClaimDir("gone", "/x", NOW - 10_000)
    kept = ClaimDir("live", "/y", NOW - 10_000)
    assert reaper.candidates([old, kept], {"live"}, NOW) == []  # first seen missing now
    assert reaper.candidates([old, kept], {"live"}, NOW + 299) == []
    assert reaper.candidates([old, kept], {"live"}, NOW + 300) == [old]
    assert reaper.candidates([old], {"gone"}, NOW + 400) == []  # back: forgotten
    assert reaper.candidates([old], set(), NOW + 500) == []  # absence timed again


def test_reaper_leaves_a_freshly_prepared_dir_alone():
    reaper = ClaimReaper(grace=300)
    fresh = ClaimDir("new", "/x", NOW)
    reaper.candidates([fresh], set(), NOW - 1000)
    assert reaper.candidates([fresh], set(), NOW + 10) == []  # gone long enough, but touched just now


def _monitor(tmp_path, claims, synced=True, clock=lambda: NOW):
    return role.Monitor(cache_dir=str(tmp_path / "containers"), node_name="n1", pods=lambda: [],
                        synced=lambda: True, feedback_enabled=False, grace=300, clock=clock,
                        proc_root=str(tmp_path), claims=claims, claims_synced=lambda: synced)


def test_housekeeping_removes_only_dirs_of_claims_gone_past_the_grace(tmp_path):
    claims_dir = str(tmp_path / "claims")
    live = os.path.dirname(_region(claims_dir))
    gone = os.path.dirname(_region(claims_dir, uid="gone-claim"))
    for d in (live, gone):
        os.utime(d, (NOW - 1000, NOW - 1000))
    now = [NOW]
    mon = _monitor(tmp_path, lambda: [claim()], clock=lambda: now[0])  # the live claim has no pod here
    assert mon.housekeeping()["removed"] == 0
    now[0] = NOW + 300
    assert mon.housekeeping()["removed"] == 1
    assert os.path.isdir(live) and not os.path.exists(gone)
    assert mon.stats.removed_dirs == 1


def test_no_claim_dir_is_reaped_before_the_claim_list_synced_or_without_dra(tmp_path):
    gone = os.path.dirname(_region(str(tmp_path / "claims"), uid="gone-claim"))
    os.utime(gone, (NOW - 1000, NOW - 1000))
    for mon in (_monitor(tmp_path, lambda: [], synced=False), _monitor(tmp_path, None)):
        mon.housekeeping()
        mon.clock = lambda: NOW + 10_000
        assert mon.housekeeping()["removed"] == 0
    assert os.path.isdir(gone)


def test_claim_summary_keeps_what_the_mapping_reads():
    full = claim(owner=POD_UID)
    full["spec"] = {"devices": {"requests": [{"name": "r"}]}}
    full["status"]["allocation"] = {"devices": {"results": []}}
    kept = role.claim_summary(full)
    assert "spec" not in kept and "allocation" not in kept["status"]
    assert claim_owner(kept, {POD_UID: dra_pod()}) == (POD_UID, "cuda")


json_like = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                         lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                             st.sampled_from(["metadata", "status", "spec", "uid", "name", "namespace",
                                              "reservedFor", "ownerReferences", "resource", "containers",
                                              "resourceClaims", "resources", "claims", "kind", "apiVersion",
                                              "controller", "resourceClaimName", "resourceClaimStatuses"]),
                             inner, max_size=4), max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(claim_doc=st.dictionaries(st.sampled_from(["metadata", "status"]), json_like),
       pod_doc=st.dictionaries(st.sampled_from(["metadata", "spec", "status"]), json_like))
def test_hostile_documents_never_raise(claim_doc, pod_doc):
    owner = claim_owner(claim_doc, {POD_UID: pod_doc, CLAIM_UID: pod_doc})
    assert owner is None or owner[0] in (POD_UID, CLAIM_UID)


def test_unhashable_names_are_ignored_not_raised():
    pod = dra_pod(containers=(("cuda", ("gpu",)),))
    pod["spec"]["containers"][0]["resources"]["claims"].append({"name": ["gpu"]})
    pod["status"]["resourceClaimStatuses"].append({"name": {"x": 1}, "resourceClaimName": "p1-gpu-x7"})
    assert claim_owner(claim(), {POD_UID: pod}) == (POD_UID, "cuda")


class _Discovery:
    """A client whose discovery GET answers from a script: an exception to raise, or None (200)."""

    def __init__(self, *answers):
        self.answers, self.calls = list(answers), 0

    async def request(self, *_args, **_kw):
        self.calls += 1
        answer = self.answers.pop(0)
        if answer is not None:
            raise answer
        return {"kind": "APIResourceList"}


def test_probe_reads_404_and_403_as_no_dra_at_once():
    for status in (404, 403):
        client = _Discovery(ApiError(status, "NotFound"))
        assert asyncio.run(role.serves_dra(client, pause=0)) is False and client.calls == 1


def test_probe_retries_a_transient_failure_then_gives_up_without_raising():
    client = _Discovery(ApiError(0, "ClientConnectorError"), None)
    assert asyncio.run(role.serves_dra(client, pause=0)) is True and client.calls == 2
    client = _Discovery(*[ApiError(503, "ServiceUnavailable")] * 3)
    assert asyncio.run(role.serves_dra(client, pause=0)) is False and client.calls == 3
