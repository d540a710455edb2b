"""The embedded cluster: simulated GPU nodes around the embedded API server.

Started by the sim role when `--embedded` is given. For each of `--sim-nodes` nodes it creates the
Node object (as a kubelet would), runs a real node agent (`hami.agent.role.Agent`) on the fake GPU
backend with its own socket dir, and a simulated kubelet (`hami.sim.kubelet.devicemanager.Kubelet`) that registers
the agent's device plugin over gRPC. When a pod binds to a node, that node's `PodRunner` calls the
agent's real Allocate, marks the pod Running with the returned env recorded, and writes a
HAMi-core-format shared region into the container's cache dir with simulated usage within the pod's
limits, so the monitor reads real files. With `--sim-hostpid-bug` the regions record the container
PID as the host PID (HAMi-core's behaviour on newer drivers) and a fake /proc tree lets the monitor
repair it. A `KubeSchedulerLoop` plays kube-scheduler against the scheduler role's extender.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass

import orjson
import yaml

from hami.config import DEFAULT_DEBUG_BIND, Config, embedded_paths
from hami.device import codec
from hami.device.codec.keys import EMBEDDED_ANNOTATION
from hami.kube.client import ApiError, KubeClient, resource_path
from hami.kube.informer import Informer
from hami.kubesched.schedconfig import FIT_PLUGIN
from hami.kubesched.schedconfig import profile as scheduler_profile
from hami.netaddr import dial_url
from hami.obs.log import get_logger
from hami.sim.kubelet.queuewait import STOPPED, next_or_stop

log = get_logger(__name__)

ENV_ANNOTATION = "sim.hami.io/allocated-env"
# Per container: what the runtime received (NVIDIA_VISIBLE_DEVICES, CDI devices, CDI annotations)
# and the GPUs that resolved to, whatever --device-list-strategy the agents answer with.
DEVICES_ANNOTATION = "sim.hami.io/allocated-devices"
NODE_PREFIX = "gpu-node-"
DEFAULT_SCHEDULER = "default-scheduler"  # the cluster's own kube-scheduler (DRA mode: pods the webhook left alone)
_GPU_SPEC = re.compile(r"^\s*(?:(\d+)\s*x\s*)?(.+?)\s*:\s*(\d+)\s*$")


class SimSpecError(ValueError):
    pass


@dataclass(frozen=True)
class GpuShape:
    count: int
    model: str
    memory_mib: int


def parse_sim_gpus(text: str) -> list[GpuShape]:
    """`2xNVIDIA A100-SXM4-40GB:40960[,1xNVIDIA T4:15360]` -> shapes (pure)."""
    shapes = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        m = _GPU_SPEC.match(part)
        if not m:
            raise SimSpecError(f"--sim-gpus {text!r}: {part!r} is not COUNTxMODEL:MEMORY_MIB")
        count = int(m.group(1) or 1)
        if count < 1 or count > 64:
            raise SimSpecError(f"--sim-gpus {text!r}: count {count} is outside 1..64")
        shapes.append(GpuShape(count, m.group(2), int(m.group(3))))
    if not shapes:
        raise SimSpecError(f"--sim-gpus {text!r}: no GPU given")
    return shapes


def parse_sim_gpu_groups(text: str) -> list[list[GpuShape]]:
    """`;`-separated per-node groups of `parse_sim_gpus` (node i gets group i mod len) (pure)."""
    groups = [g for g in (p.strip() for p in text.split(";")) if g]
    if not groups:
        raise SimSpecError(f"--sim-gpus {text!r}: no GPU given")
    return [parse_sim_gpus(g) for g in groups]


def node_names(n: int) -> list[str]:
    return [f"{NODE_PREFIX}{i}" for i in range(1, n + 1)]


def gpu_uuid(node_index: int, gpu_index: int) -> str:
    return f"GPU-{node_index:08x}-0000-4000-8000-{gpu_index:012x}"


def fake_gpu_document(names: list[str], shapes: list[GpuShape] | list[list[GpuShape]]) -> dict:
    """The fake-GPU file of the whole cluster: `nodes: {name: {gpus: [...]}}` (pure). `shapes` is
    one list for every node, or per-node groups (node i gets group i mod len)."""
    groups = shapes if shapes and isinstance(shapes[0], list) else [shapes]
    return {"nodes": {name: node_gpus(ni, groups[(ni - 1) % len(groups)])
                      for ni, name in enumerate(names, start=1)}}


def node_gpus(ni: int, shapes: list[GpuShape]) -> dict:
    """One node's entry of the fake-GPU file; `ni` makes its GPU UUIDs unique in the cluster (pure)."""
    gpus, numa_split = [], sum(s.count for s in shapes)
    for shape in shapes:
        for _ in range(shape.count):
            gi = len(gpus)
            gpus.append({"uuid": gpu_uuid(ni, gi), "model": shape.model, "memory_mib": shape.memory_mib,
                         "numa": 0 if gi < max(1, numa_split // 2) else 1, "healthy": True})
    return {"gpus": gpus}


def node_object(name: str, gpu_count: int) -> dict:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"gpu": "on", "kubernetes.io/hostname": name,
                                              "kubernetes.io/os": "linux", "node.hami.io/simulated": "true"}},
        "spec": {},
        "status": {
            "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110"},
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "simulated kubelet is posting ready status",
                            "lastHeartbeatTime": now, "lastTransitionTime": now}],
            "nodeInfo": {"kubeletVersion": "v1.31.0-hami-sim", "operatingSystem": "linux",
                         "architecture": "amd64", "containerRuntimeVersion": "sim://1"},
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
        },
    }


SCHEDULER_POD = "hami-scheduler-embedded"


def scheduler_objects(cfg: Config) -> list[tuple[str, str, dict]]:
    """What the chart would run in kube-system, so the runbook's commands find it (pure).

    `kubectl get pods -n kube-system -l app=hami-scheduler`, `kubectl logs ...` (served from this
    process's log) and `kubectl get configmap -n kube-system hami-scheduler-config -o yaml`.
    """
    name = cfg.scheduler.scheduler_name
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    labels = {"app": name, "app.kubernetes.io/component": "hami-scheduler", "app.kubernetes.io/name": "hami"}
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": SCHEDULER_POD, "namespace": "kube-system", "labels": labels,
                     "annotations": {EMBEDDED_ANNOTATION: "the scheduler role of this hami process"}},
        "spec": {"schedulerName": "default-scheduler", "nodeName": "embedded",
                 "containers": [{"name": "vgpu-scheduler-extender", "image": "hami (embedded)",
                                 "args": ["--role", "scheduler", f"--http_bind={cfg.scheduler.http_bind}",
                                          f"--scheduler-name={name}", f"-v={cfg.log.verbosity}",
                                          *(["--gpu-preemption"] if cfg.scheduler.gpu_preemption else [])]}]},
    }
    status = {"phase": "Running", "startTime": now, "podIP": "127.0.0.1", "hostIP": "127.0.0.1",
              "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
              "containerStatuses": [{"name": "vgpu-scheduler-extender", "ready": True, "restartCount": 0,
                                     "image": "hami (embedded)", "imageID": "", "started": True,
                                     "state": {"running": {"startedAt": now}}}]}
    scheduler_config = yaml.safe_dump(kube_scheduler_configuration(cfg), sort_keys=False)
    configmap = {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": f"{name}-config", "namespace": "kube-system", "labels": labels},
                 "data": {"config.yaml": scheduler_config}}
    return [("pods", "kube-system", pod), ("pods/status", "kube-system", {"status": status}),
            ("configmaps", "kube-system", configmap)]


def kube_scheduler_configuration(cfg: Config) -> dict:
    """The chart's KubeSchedulerConfiguration for hami's scheduler profile (pure). Device-plugin mode:
    the extender manages HAMi's resources (kube-scheduler calls it only for pods asking one, and
    NodeResourcesFit ignores them). DRA mode (`dra.enabled`): claim pods ask no such resource, so the
    extender manages none (kube-scheduler calls it for every pod of the profile) and NodeResourcesFit's
    own args ignore HAMi's resources, so device-plugin pods of a mixed cluster still fit."""
    # NVIDIA's names and every other vendor row's, as the chart lists them (files/vendor-resources.yaml)
    ignored = list(dict.fromkeys([*cfg.nvidia.resource_names,
                                  *(n for v in cfg.vendors.others for n in v.resource_names)]))
    dra = bool(cfg.scheduler.dra)
    prof: dict = {"schedulerName": cfg.scheduler.scheduler_name}
    if dra:
        prof["pluginConfig"] = [{"name": FIT_PLUGIN, "args": {"ignoredResources": ignored}}]
    ext = {"urlPrefix": extender_url(cfg), "filterVerb": "filter", "bindVerb": "bind", "preemptVerb": "preempt",
           **({"prioritizeVerb": "prioritize"} if cfg.scheduler.extender_prioritize else {}), "enableHTTPS": False,
           "nodeCacheCapable": True, "weight": 1, "httpTimeout": "30s"}
    if not dra:
        ext["managedResources"] = [{"name": r, "ignoredByScheduler": True} for r in ignored]
    # the chart's scheduler.kubeScheduler.percentageOfNodesToScore (default 100: HAMi's node policy sees every node)
    return {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "leaderElection": {"leaderElect": False},
            "percentageOfNodesToScore": cfg.sim.percentage_of_nodes_to_score, "profiles": [prof], "extenders": [ext]}


def _limit_bytes(env: Mapping[str, str], i: int) -> int:
    value = env.get(f"CUDA_DEVICE_MEMORY_LIMIT_{i}", "")
    m = re.fullmatch(r"(\d+)([mMgG]?)", value)
    if not m:
        return 0
    mult = {"": 1 << 20, "m": 1 << 20, "M": 1 << 20, "g": 1 << 30, "G": 1 << 30}[m.group(2)]
    return int(m.group(1)) * mult


class FakeGpuFile:
    """The cluster's fake-GPU file, rewritten atomically when simulated processes come and go.

    With the host-PID bug on, HAMi-core cannot match NVML's per-process samples to its slots, so
    utilization must come from the GPU backend's samples keyed by host PID: they live here.
    """

    def __init__(self, path: str, doc: dict):
        self.path = path
        self.doc = doc

    def _gpu(self, uuid: str) -> dict | None:
        for entry in (self.doc.get("nodes") or {}).values():
            for gpu in entry.get("gpus") or []:
                if gpu.get("uuid") == uuid:
                    return gpu
        return None

    def set_process(self, uuid: str, pid: int, sm_util: int, memory_mib: int) -> None:
        gpu = self._gpu(uuid)
        if gpu is None:
            return
        procs = [p for p in gpu.setdefault("processes", []) if p.get("pid") != pid]
        procs.append({"pid": pid, "sm_util": sm_util, "memory_mib": memory_mib})
        gpu["processes"] = procs

    def drop_processes(self, pids: set[int]) -> None:
        for entry in (self.doc.get("nodes") or {}).values():
            for gpu in entry.get("gpus") or []:
                if gpu.get("processes"):
                    gpu["processes"] = [p for p in gpu["processes"] if p.get("pid") not in pids]

    def save(self) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "w") as fh:
            yaml.safe_dump(self.doc, fh, sort_keys=False)
        os.replace(tmp, self.path)


class PodRunner:
    """The pod half of a simulated kubelet: start bound pods through the device plugin."""

    def __init__(self, client: KubeClient, node: str, kubelet, cfg: Config, *, node_index: int,
                 hostpid_bug: bool, proc_root: str, gpu_file: FakeGpuFile | None = None, seed: int = 0,
                 vendor_runner=None, dra=None):
        self.client = client
        # DRA mode: (hami.sim.kubelet.drakubelet.DraKubelet, CDI root) of this node's DRA plugin.
        self.dra = dra
        self.dra_prepared: dict[str, list] = {}  # pod uid -> claims prepared for it
        self.dra_devices: dict[str, tuple[str, dict]] = {}  # running pod uid -> (ns/name, claim_devices)
        self.dra_health: dict[tuple[str, str], tuple[str, str]] = {}  # (pool, device) -> health, message
        self._unprepares: set[asyncio.Task] = set()
        # A node that also has other vendors' devices: their pods start as that vendor's plugin
        # would start them (bind phase success, the node lock released), not through our agent.
        self.vendor_runner = vendor_runner
        self.node = node
        self.kubelet = kubelet
        self.cfg = cfg
        self.node_index = node_index
        self.hostpid_bug = hostpid_bug
        self.proc_root = proc_root
        self.gpu_file = gpu_file
        self.hostpids: dict[str, list[tuple[int, list[str]]]] = {}  # pod uid -> (host pid, GPU uuids)
        self.rng = random.Random(seed or node_index)
        self.pods = Informer(client, "pods", field_selector=f"spec.nodeName={node}", handler=self._on_pod)
        # pod uid -> (cache file, per-device memory limits in bytes) written for it
        self.started: dict[str, list[tuple[str, list[int]]]] = {}
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._next_pid = 1000 * node_index

    def _on_pod(self, etype: str, old: dict | None, new: dict | None) -> None:
        if new is None:
            uid = (old or {}).get("metadata", {}).get("uid", "")
            refs = self.dra_prepared.pop(uid, None)
            self.dra_devices.pop(uid, None)
            if refs:
                task = asyncio.get_running_loop().create_task(self._unprepare(uid, refs), name=f"unprepare-{uid}")
                self._unprepares.add(task)
                task.add_done_callback(self._unprepares.discard)
            if self.kubelet is not None:
                self.kubelet.release_pod(uid)
            self.started.pop(uid, None)
            gone = self.hostpids.pop(uid, [])
            if gone and self.gpu_file is not None:
                self.gpu_file.drop_processes({pid for pid, _ in gone})
                self.gpu_file.save()
            return
        if (new.get("status") or {}).get("phase", "Pending") == "Pending":
            meta = new["metadata"]
            if meta.get("uid") not in self.started:
                self._queue.put_nowait(f"{meta.get('namespace')}/{meta['name']}")

    async def run(self, stop: asyncio.Event) -> None:
        watch = asyncio.create_task(self.pods.run(stop), name=f"kubelet-{self.node}-pods")
        usage = asyncio.create_task(self._usage_loop(stop), name=f"kubelet-{self.node}-usage")
        tasks = [watch, usage]
        if self.dra is not None:  # kubelet's DRAResourceHealth stream: allocatedResourcesStatus
            tasks.append(asyncio.create_task(self.dra[0].watch_health(self._on_dra_health, stop),
                                             name=f"kubelet-{self.node}-dra-health"))
        try:
            while not stop.is_set():
                item = await next_or_stop(self._queue, stop)
                if item is STOPPED:
                    break
                pod = self.pods.store.get(item)
                if pod is None or pod["metadata"].get("uid") in self.started:
                    continue
                if (pod.get("status") or {}).get("phase", "Pending") != "Pending":
                    continue
                await self.start_pod(pod)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, *self._unprepares, return_exceptions=True)

    async def start_pod(self, pod: dict) -> None:
        meta = pod["metadata"]
        key = f"{meta.get('namespace')}/{meta['name']}"
        uid = meta.get("uid", "")
        regions = self.started[uid] = []  # a DELETED event during the awaits below pops the entry
        resource = self.cfg.nvidia.resource_count_name
        if self.vendor_runner is not None and codec.ALLOCATED_ANNOTATION not in (meta.get("annotations") or {}):
            await self.vendor_runner.start_pod(pod)  # no NVIDIA device: another vendor's pod
            return
        if self.dra is not None:
            await self._start_dra_pod(pod, regions)
            return
        try:
            responses = await self.kubelet.allocate_pod(pod, resource)
        except Exception as exc:  # Allocate failed: kubelet rejects the pod (UnexpectedAdmissionError)
            details = getattr(exc, "details", None)
            detail = (details() if callable(details) else None) or str(exc)
            log.warning("Allocate failed; pod rejected", pod=key, node=self.node, error=detail)
            await self._set_status(pod, {"phase": "Failed", "reason": "UnexpectedAdmissionError",
                                         "message": f"Allocate failed due to {detail}"})
            return
        from hami.sim.kubelet.devicemanager import KubeletError, received, visible_gpus

        envs: dict[str, dict[str, str]] = {}
        devices: dict[str, dict] = {}
        uuid_of_index = await self._gpu_indexes() if any(r.cdi_devices or r.annotations
                                                         for r in responses.values()) else {}
        if self.started.get(uid) is not regions:  # deleted while its devices were allocated: never runs
            self.kubelet.release_pod(uid)
            log.info("Pod deleted before it started", pod=key, node=self.node)
            return
        for container, resp in responses.items():
            env = dict(resp.envs)
            envs[container] = env
            try:
                uuids = visible_gpus(resp, uuid_of_index)
            except KubeletError as exc:  # the runtime cannot resolve the CDI device: the container fails
                log.warning("CDI device unresolvable; pod failed", pod=key, node=self.node, error=str(exc))
                await self._set_status(pod, {"phase": "Failed", "reason": "CreateContainerError", "message": str(exc)})
                return
            devices[container] = {**received(resp), "gpus": uuids}
            written = self._write_region(uid, container, env,
                                         {m.container_path: m.host_path for m in resp.mounts}, uuids)
            if written:
                regions.append(written)
        await self._mark_running(pod, envs, devices)

    async def _start_dra_pod(self, pod: dict, regions: list) -> None:
        """DRA mode: prepare the pod's claims over the plugin's socket, apply the CDI edits."""
        from hami.sim.kubelet.drapods import prepare_pod

        meta = pod["metadata"]
        key, uid = f"{meta.get('namespace')}/{meta['name']}", meta.get("uid", "")
        kubelet, cdi_root = self.dra
        try:
            got = await prepare_pod(self.client, kubelet, cdi_root, pod)
        except Exception as exc:  # noqa: BLE001 - DraStartError or the plugin unreachable: the pod fails
            reason = getattr(exc, "reason", "PrepareResourcesFailed")
            log.warning("DRA prepare failed; pod failed", pod=key, node=self.node, error=str(exc))
            await self._set_status(pod, {"phase": "Failed", "reason": reason, "message": str(exc)[:1024]})
            return
        if self.started.get(uid) is not regions:  # deleted while preparing: unprepare, never run
            await self._unprepare(uid, got.refs)
            return
        self.dra_prepared[uid] = got.refs
        self.dra_devices[uid] = (key, got.claim_devices)
        devices = {}
        for container, env in got.envs.items():
            uuids = [u for u in env.get("NVIDIA_VISIBLE_DEVICES", "").split(",") if u]
            devices[container] = {"NVIDIA_VISIBLE_DEVICES": env.get("NVIDIA_VISIBLE_DEVICES", ""),
                                  "cdi_devices": got.cdi_ids[container], "cdi_annotations": {}, "gpus": uuids}
            written = self._write_region(uid, container, env, got.mounts[container], uuids)
            if written:
                regions.append(written)
        await self._mark_running(pod, got.envs, devices, self._dra_status(pod, got.claim_devices))

    async def _unprepare(self, uid: str, refs: list) -> None:
        try:
            errors = await self.dra[0].unprepare(refs)
        except Exception as exc:  # noqa: BLE001 - logged; the plugin's checkpoint keeps the claim
            errors = {"*": str(exc)}
        for claim_uid, err in errors.items():
            if err:
                log.warning("DRA unprepare failed", pod_uid=uid, claim_uid=claim_uid, node=self.node, error=err)

    def _dra_status(self, pod: Mapping, claim_devices: Mapping) -> dict[str, list[dict]]:
        from hami.sim.kubelet.drapods import resources_status

        return resources_status(pod, claim_devices, self.dra[0].driver, self.dra_health)

    async def _on_dra_health(self, update: Mapping[tuple[str, str], tuple[str, str]]) -> None:
        """A health message from the plugin: rewrite the statuses of the running pods it concerns."""
        changed = {k for k, v in update.items() if self.dra_health.get(k) != v}
        self.dra_health.update(update)
        for key, claim_devices in list(self.dra_devices.values()):
            if not any((p, d) in changed for devs in claim_devices.values() for p, d, _ in devs):
                continue
            pod = self.pods.store.get(key)
            if pod is None:
                continue
            per = self._dra_status(pod, claim_devices)
            statuses = [{**c, "allocatedResourcesStatus": per[c.get("name")]} if c.get("name") in per else c
                        for c in (pod.get("status") or {}).get("containerStatuses") or []]
            if statuses:  # not yet seen running: _mark_running writes the health it has by then
                await self._set_status(pod, {"containerStatuses": statuses})

    async def _mark_running(self, pod: dict, envs: dict, devices: dict,
                            resources: Mapping[str, list[dict]] | None = None) -> None:
        meta = pod["metadata"]
        key, uid = f"{meta.get('namespace')}/{meta['name']}", meta.get("uid", "")
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        spec = pod.get("spec") or {}
        statuses = [{"name": c["name"], "ready": True, "restartCount": 0, "image": c.get("image", ""),
                     "imageID": "", "containerID": f"sim://{uid}-{c['name']}", "started": True,
                     "state": {"running": {"startedAt": now}}} for c in spec.get("containers") or []]
        for st in statuses:
            if (resources or {}).get(st["name"]):
                st["allocatedResourcesStatus"] = resources[st["name"]]
        try:
            await self.client.patch_pod(meta.get("namespace", "default"), meta["name"], {
                "metadata": {"annotations": {ENV_ANNOTATION: orjson.dumps(envs).decode(),
                                             DEVICES_ANNOTATION: orjson.dumps(devices).decode()}}})
        except ApiError as exc:
            log.warning("Could not record the allocated env", pod=key, error=str(exc))
        await self._set_status(pod, {
            "phase": "Running", "hostIP": "127.0.0.1", "podIP": f"10.{self.node_index}.0.{len(self.started) % 250}",
            "startTime": now, "containerStatuses": statuses,
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now},
                           {"type": "PodScheduled", "status": "True", "lastTransitionTime": now}],
        })
        log.info("Pod running", pod=key, node=self.node, containers=len(envs))

    async def _set_status(self, pod: dict, status: dict) -> None:
        meta = pod["metadata"]
        try:
            await self.client.request(
                "patch", "pods/status", "PATCH", resource_path("pods", meta.get("namespace"), meta["name"], "status"),
                body={"status": status}, content_type="application/merge-patch+json")
        except ApiError as exc:
            log.warning("Could not update pod status", pod=f"{meta.get('namespace')}/{meta['name']}", error=str(exc))

    # ------------------------------------------------------------------ simulated HAMi-core

    async def _gpu_indexes(self) -> dict[int, str]:
        """index -> UUID from this node's registration (for CDI names by index)."""
        node = await self.client.get_node(self.node)
        text = ((node.get("metadata") or {}).get("annotations") or {}).get(codec.REGISTER_ANNOTATION, "")
        try:
            return {d.index: d.id for d in codec.decode_node_devices(text)} if text else {}
        except codec.CodecError:
            return {}

    def _write_region(self, uid: str, container: str, env: Mapping[str, str],
                      mounts: Mapping[str, str], uuids: list[str]) -> tuple[str, list[int]] | None:
        from hami.monitor.hostpid import write_fake_proc
        from hami.monitor.shmwrite import Dev, Proc, write_region

        cache = env.get("CUDA_DEVICE_MEMORY_SHARED_CACHE")
        if not cache:
            return None
        host_dir = mounts.get(os.path.dirname(cache))
        if not host_dir:
            return None
        os.makedirs(host_dir, exist_ok=True)
        path = os.path.join(host_dir, os.path.basename(cache))
        sm_limit = int(env.get("CUDA_DEVICE_SM_LIMIT", "0") or 0)
        devs = [Dev(u, limit=_limit_bytes(env, i), sm_limit=sm_limit) for i, u in enumerate(uuids)]
        self._next_pid += 1
        hostpid = 40000 + self._next_pid
        container_pid = 1 + (self._next_pid % 50)
        used = {i: self._usage(d.limit) for i, d in enumerate(devs)}
        util = {i: self.rng.randint(5, max(6, sm_limit or 100)) for i in range(len(devs))}
        recorded_hostpid = container_pid if self.hostpid_bug else hostpid
        # With the bug, HAMi-core never matches NVML's samples: its sm_util stays 0 and the truth is
        # only in the backend's per-process samples, under the real host PID.
        region_util = {i: 0 for i in util} if self.hostpid_bug else util
        write_region(path, devices=devs,
                     procs=[Proc(pid=container_pid, hostpid=recorded_hostpid, used=used, sm_util=region_util)])
        if self.hostpid_bug:
            write_fake_proc(self.proc_root, hostpid, (hostpid, container_pid),
                            f"0::/kubepods/pod{uid}/sim-{uid}-{container}\n")
            if self.gpu_file is not None:
                for i, u in enumerate(uuids):
                    self.gpu_file.set_process(u, hostpid, util[i], used[i] >> 20)
                self.gpu_file.save()
            self.hostpids.setdefault(uid, []).append((hostpid, uuids))
        return path, [d.limit for d in devs]

    def _usage(self, limit: int) -> int:
        if limit <= 0:
            return self.rng.randint(256, 2048) << 20
        return int(limit * self.rng.uniform(0.2, 0.9))

    async def _usage_loop(self, stop: asyncio.Event) -> None:
        """Move simulated usage a little every few seconds, within each container's limits."""
        from hami.monitor.shmwrite import RegionUpdater

        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=5.0)
            now = int(time.time())
            for regions in list(self.started.values()):
                for path, limits in regions:
                    try:
                        with RegionUpdater(path) as up:
                            for d, limit in enumerate(limits):
                                up.set_used(slot=0, device=d, total=self._usage(limit))
                                if not self.hostpid_bug:
                                    up.set_sm_util(slot=0, device=d, value=self.rng.randint(5, 95))
                            up.set_last_kernel_time(now)
                    except (OSError, ValueError, struct.error):
                        continue


class EmbeddedCluster:
    def __init__(self, cfg: Config, kubeconfig: str):
        self.cfg = cfg
        self.kubeconfig = kubeconfig
        self.paths = embedded_paths(cfg.sim.state_dir)
        self.names = node_names(cfg.sim.nodes)
        self.client: KubeClient | None = None
        self.gpu_file: FakeGpuFile | None = None
        # What every agent node shares, set by run(): the fake-GPU file, the image's HAMi-core, /proc.
        self._gpu_path = self._vgpu_lib = self._proc_root = ""
        self._kubelets: list = []
        self._backends: list = []
        # Nodes a node group added (hami.sim.autoscaler): name -> (their stop, their tasks, kubelet)
        self._added: dict[str, tuple[asyncio.Event, list[asyncio.Task], object]] = {}
        self._next_index = 1000  # node indexes (GPU UUIDs, socket dirs) of added nodes
        self.autoscaler = None
        from hami.sim.autoscaler import parse_node_groups  # it builds on this module

        self.node_groups = parse_node_groups(cfg.sim.node_groups)  # a bad --sim-node-group fails the start
        if self.node_groups and (cfg.scheduler.dra or cfg.sim.fake_gpus):
            raise SimSpecError("--sim-node-group: node groups run the device-plugin node agent on the embedded "
                               "cluster's own fake GPUs (not with --dra, not with --fake-gpus)")

    async def _create_scheduler_objects(self, client: KubeClient) -> None:
        for resource, ns, body in scheduler_objects(self.cfg):
            try:
                if resource == "pods/status":
                    await client.request("patch", "pods/status", "PATCH",
                                         resource_path("pods", ns, SCHEDULER_POD, "status"), body=body,
                                         content_type="application/merge-patch+json")
                else:
                    await client.create(resource, body, ns)
            except ApiError as exc:
                if not exc.conflict:
                    log.warning("Could not create the embedded scheduler's objects", resource=resource,
                                error=str(exc))

    def _dra_schedulers(self, client: KubeClient, extender: str, stop: asyncio.Event) -> list[asyncio.Task]:
        """DRA mode's kube-scheduler, as the chart configures it (kube_scheduler_configuration): hami's
        profile, whose pods the webhook sends there (claim pods and, mid-migration, device-plugin ones),
        with the extender called for every pod (it ranks claim pods by GPU fill and fits device-plugin
        pods), DynamicResources allocating the claims and KEP-5690's preemption; beside it the cluster's
        default-scheduler with DynamicResources and no extender (pods the webhook left as written, such
        as KEP-5004 extended-resource pods); and the resourceclaim controller."""
        from hami.sim.controllers.resourceclaims import ResourceClaimController
        from hami.sim.dynamicresources import DynamicResources
        from hami.sim.kubescheduler import ExtenderConfig, KubeSchedulerLoop

        cfg = self.cfg
        prof = scheduler_profile(kube_scheduler_configuration(cfg), cfg.scheduler.scheduler_name)
        hami = KubeSchedulerLoop(client, ExtenderConfig.from_entry(prof.extenders[0], extender),
                                 cfg.scheduler.scheduler_name, dra=DynamicResources(client), dra_preemption=True,
                                 fit_ignored=prof.fit_ignored, fit_ignored_groups=prof.fit_ignored_groups,
                                 percentage_of_nodes_to_score=prof.percentage_of_nodes_to_score)
        default = KubeSchedulerLoop(client, ExtenderConfig(""), DEFAULT_SCHEDULER, dra=DynamicResources(client),
                                    dra_preemption=True)
        return [asyncio.create_task(hami.run(stop), name="kube-scheduler"),
                asyncio.create_task(default.run(stop), name="kube-scheduler-default"),
                asyncio.create_task(ResourceClaimController(client).run(stop), name="resourceclaim-controller")]

    def dra_node(self, ni: int) -> bool:
        """Node `ni` (1-based) runs the DRA plugin: with --dra, all of them, or the last --sim-dra-nodes."""
        if not self.cfg.scheduler.dra:
            return False
        count = self.cfg.sim.dra_nodes
        return count < 0 or ni > len(self.names) - count

    def node_shapes(self) -> list[tuple[list[GpuShape], list[tuple]]]:
        """Per node: (NVIDIA shapes, [(vendor row, cards, memory)]) from `--sim-gpus`."""
        from hami.sim.kubelet.vendornodes import vendor_for_model

        groups = parse_sim_gpu_groups(self.cfg.sim.gpus)
        out = []
        for i in range(len(self.names)):
            nvidia, vendors = [], []
            for s in groups[i % len(groups)]:
                v = vendor_for_model(s.model, self.cfg.vendors)
                if v is None:
                    nvidia.append(s)
                else:
                    vendors.append((v, s.count, s.memory_mib))
            out.append((nvidia, vendors))
        return out

    def write_fake_gpus(self) -> str:
        if self.cfg.sim.fake_gpus:
            return self.cfg.sim.fake_gpus
        doc = fake_gpu_document(self.names, [nv for nv, _ in self.node_shapes()])
        os.makedirs(os.path.dirname(self.paths["all_gpus"]), exist_ok=True)
        self.gpu_file = FakeGpuFile(self.paths["all_gpus"], doc)
        self.gpu_file.save()
        return self.paths["all_gpus"]

    async def run(self, stop: asyncio.Event, ready: asyncio.Event | None = None) -> None:
        """The cluster until `stop`: its files, its objects, the nodes, kube-scheduler and the controllers.

        Every task started is in `tasks` as soon as it exists, so a start that fails half way stops
        what it started (`_shutdown`).
        """
        from hami.config import replace

        cfg = self.cfg
        self._gpu_path, self._vgpu_lib, self._proc_root = self._write_node_files()
        # One client plays every simulated kubelet and kube-scheduler: each of those has its own
        # budget in a real cluster, so this one is not limited ("sim" in hami.kube.lanes).
        self.client = client = await KubeClient.from_settings(replace(cfg.kube, kubeconfig=self.kubeconfig),
                                                              role="sim")
        tasks: list[asyncio.Task] = []
        dra_kubelets: list = []
        try:
            shapes = self.node_shapes() if not cfg.sim.fake_gpus else [(None, [])] * len(self.names)
            await self._create_objects(client, shapes)
            for ni, name in enumerate(self.names, start=1):
                await self._start_node(ni, name, shapes[ni - 1], stop, tasks, dra_kubelets)
            self._start_kube_schedulers(client, stop, tasks)
            await self._start_controllers(client, stop, tasks)
            if ready is not None:
                ready.set()
            done, _ = await asyncio.wait(tasks + [asyncio.create_task(stop.wait())],
                                         return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                if t in tasks and not t.cancelled() and t.exception() is not None:
                    raise RuntimeError(f"embedded cluster task {t.get_name()} failed: {t.exception()}") \
                        from t.exception()
        finally:
            await self._shutdown(stop, tasks, dra_kubelets)

    def _write_node_files(self) -> tuple[str, str, str]:
        """What every agent node shares: the fake-GPU file, the image's HAMi-core and the /proc root."""
        from hami.sim.kubelet.libstub import write_stub_library

        cfg = self.cfg
        gpu_file = self.write_fake_gpus()
        for d in (self.paths["cache_dir"], os.path.join(self.paths["hook_path"], "vgpu")):
            os.makedirs(d, exist_ok=True)
        # What the image ships as HAMi-core; each simulated node's agent installs it under the hook path.
        vgpu_lib = write_stub_library(os.path.join(cfg.sim.state_dir, "image", "libvgpu.so"))
        proc_root = cfg.monitor.proc_root if cfg.sim.hostpid_bug else os.path.join(cfg.sim.state_dir, "proc")
        os.makedirs(proc_root, exist_ok=True)
        return gpu_file, vgpu_lib, proc_root

    async def _create_objects(self, client: KubeClient, shapes: list) -> None:
        """The Node objects (vendor nodes registered as their own plugin would), the scheduler's, the DeviceClass."""
        from hami.sim.kubelet.vendornodes import vendor_registration

        for ni, name in enumerate(self.names, start=1):
            obj = node_object(name, 0)
            vendors = shapes[ni - 1][1]
            if vendors:  # registered as the vendor's own HAMi device plugin would
                annos, capacity = vendor_registration(name, ni, vendors)
                obj["metadata"]["annotations"] = annos
                obj["status"]["capacity"].update(capacity)
                obj["status"]["allocatable"].update(capacity)
            with contextlib.suppress(ApiError):
                await client.create("nodes", obj)
        await self._create_scheduler_objects(client)
        if self.cfg.scheduler.dra:  # what the chart's dra.enabled installs
            from hami.dra.claims import device_class

            with contextlib.suppress(ApiError):
                await client.create("deviceclasses", device_class())

    async def _start_node(self, ni: int, name: str, shape: tuple, stop: asyncio.Event, tasks: list,
                          dra_kubelets: list) -> None:
        """Node `ni`: a vendor's plugin stand-in, hami's DRA plugin, or the device-plugin node agent."""
        from hami.sim.kubelet.vendornodes import VendorPodRunner

        nvidia, vendors = shape
        if nvidia == []:  # no NVIDIA GPU: the vendor's plugin, not our agent
            own = tuple(sorted({v.node_lock_key for v, _, _ in vendors
                                if v.node_lock_key and v.node_lock_key != "hami.io/mutex.lock"}))
            vrunner = VendorPodRunner(self.client, name, own_locks=own)
            tasks.append(asyncio.create_task(vrunner.run(stop), name=f"vendor-kubelet-{name}"))
            return
        if self.dra_node(ni):  # DRA mode: hami's kubelet DRA plugin instead of the device-plugin agent
            await self._start_dra_node(ni, name, stop, tasks, dra_kubelets)
            return
        started, _ = await self._start_agent_node(ni, name, stop, vendors)
        tasks.extend(started)

    async def _start_dra_node(self, ni: int, name: str, stop: asyncio.Event, tasks: list,
                              dra_kubelets: list) -> None:
        """A DRA node: hami's kubelet plugin, registered with the simulated kubelet's plugin watcher."""
        from hami.device.nodeconfig import settings_for_node
        from hami.dra.role import DraNode
        from hami.gpu import make_backend
        from hami.sim.kubelet.drakubelet import DraKubelet

        cfg, client = self.cfg, self.client
        socket_dir = os.path.join(self.paths["nodes_dir"], str(ni))  # short: unix paths <= 107 bytes
        os.makedirs(socket_dir, exist_ok=True)
        backend = make_backend("fake", self._gpu_path, name)
        self._backends.append(backend)
        cdi_root = os.path.join(socket_dir, "cdi")
        dra_node = DraNode(client, name, backend, settings_for_node(cfg.nvidia, cfg.node_configs, name),
                           plugin_dir=os.path.join(socket_dir, "plugin"),
                           registration_dir=os.path.join(socket_dir, "reg"), cdi_root=cdi_root,
                           hook_path=self.paths["hook_path"], tick=2.0)
        serving = asyncio.Event()
        tasks.append(asyncio.create_task(dra_node.run(stop, serving), name=f"dra-plugin-{name}"))
        await asyncio.wait([tasks[-1], asyncio.create_task(serving.wait())], return_when=asyncio.FIRST_COMPLETED)
        dra_kubelet = DraKubelet(os.path.join(socket_dir, "reg"))  # kubelet's plugin watcher
        dra_kubelets.append(dra_kubelet)
        await dra_kubelet.register()
        runner = PodRunner(client, name, None, cfg, node_index=ni, hostpid_bug=cfg.sim.hostpid_bug,
                           proc_root=self._proc_root, gpu_file=self.gpu_file, dra=(dra_kubelet, cdi_root))
        tasks.append(asyncio.create_task(runner.run(stop), name=f"kubelet-{name}"))

    def _start_kube_schedulers(self, client: KubeClient, stop: asyncio.Event, tasks: list) -> None:
        """kube-scheduler with hami's extender; with --dra as the chart configures it (_dra_schedulers)."""
        from hami.sim.kubescheduler import ExtenderConfig, KubeSchedulerLoop

        cfg = self.cfg
        extender = extender_url(cfg)
        if cfg.scheduler.dra:
            tasks.extend(self._dra_schedulers(client, extender, stop))
            return
        # The extenders[] entry scheduler_objects() publishes, except managedResources: every pod reaches
        # the extender, so the embedded cluster's other vendors' pods do too.
        prof = scheduler_profile(kube_scheduler_configuration(cfg), cfg.scheduler.scheduler_name)
        loop = KubeSchedulerLoop(client, ExtenderConfig(
            extender, preempt_verb="preempt",
            prioritize_verb="prioritize" if cfg.scheduler.extender_prioritize else ""), cfg.scheduler.scheduler_name,
            percentage_of_nodes_to_score=prof.percentage_of_nodes_to_score)
        tasks.append(asyncio.create_task(loop.run(stop), name="kube-scheduler"))

    async def _start_controllers(self, client: KubeClient, stop: asyncio.Event, tasks: list) -> None:
        """Jobs, the kubelets' stop half, the node groups' autoscaler and the demo workload."""
        from hami.sim.controllers.jobs import JobController  # batch/v1 Jobs: the shipped examples hold some
        from hami.sim.kubelet.termination import PodTerminator

        cfg = self.cfg
        tasks.append(asyncio.create_task(JobController(client).run(stop), name="job-controller"))
        # Every simulated kubelet's stop half: graceful deletions (evictions) end after --sim-pod-stop-seconds.
        terminator = PodTerminator(client, stop_seconds=cfg.sim.pod_stop_seconds)
        tasks.append(asyncio.create_task(terminator.run(stop), name="kubelet-stop"))
        if self.node_groups:
            from hami.sim.autoscaler import ClusterAutoscaler, declared_template

            autoscaler = ClusterAutoscaler(client, self.node_groups, self,
                                           declared=lambda group: declared_template(group, cfg),
                                           unneeded_seconds=cfg.sim.scale_down_unneeded,
                                           # a node just added is not yet a scale-down candidate
                                           delay_after_add=max(10.0, cfg.sim.scale_down_unneeded))
            self.autoscaler = autoscaler
            await autoscaler.start_min_nodes()
            tasks.append(asyncio.create_task(autoscaler.run(stop), name="cluster-autoscaler"))
        if cfg.sim.demo_workload:
            from hami.sim.workload import run_workload

            tasks.append(asyncio.create_task(run_workload(client, cfg.scheduler.scheduler_name, stop),
                                             name="demo-workload"))

    async def _shutdown(self, stop: asyncio.Event, tasks: list, dra_kubelets: list) -> None:
        """Stop every task (5 s to end on `stop`, then cancelled), the added nodes, kubelets, backends, client."""
        stop.set()
        _, pending = await asyncio.wait(tasks, timeout=5.0) if tasks else (set(), set())
        for t in pending:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for node_stop, node_tasks, _ in list(self._added.values()):
            node_stop.set()
            await asyncio.gather(*node_tasks, return_exceptions=True)
        for dk in dra_kubelets:
            with contextlib.suppress(Exception):
                await dk.close()
        for k in self._kubelets:
            with contextlib.suppress(Exception):
                await k.stop()
        for b in self._backends:
            with contextlib.suppress(Exception):
                b.close()
        if self.client is not None:
            await self.client.close()

    async def _start_agent_node(self, ni: int, name: str, stop: asyncio.Event, mixed=()) -> tuple[list, object]:
        """A node's simulated kubelet, its real node agent and its pod runner, until `stop`."""
        from hami.agent.role import Agent
        from hami.device.nodeconfig import settings_for_node
        from hami.gpu import make_backend
        from hami.sim.kubelet.devicemanager import Kubelet
        from hami.sim.kubelet.vendornodes import VendorPodRunner

        cfg, client = self.cfg, self.client
        socket_dir = os.path.join(self.paths["nodes_dir"], str(ni))  # short: unix paths <= 107 bytes
        os.makedirs(socket_dir, exist_ok=True)
        kubelet = Kubelet(socket_dir, client=client, node_name=name)
        await kubelet.start()
        self._kubelets.append(kubelet)
        backend = make_backend("fake", self._gpu_path, name)
        self._backends.append(backend)
        agent = Agent(client, name, backend, settings_for_node(cfg.nvidia, cfg.node_configs, name),
                      socket_dir=socket_dir, hook_path=self.paths["hook_path"], register_interval=30.0,
                      vgpu_lib=self._vgpu_lib, vgpu_lib_version="simulated",
                      device_list_strategy=cfg.agent.device_list_strategy,
                      device_id_strategy=cfg.agent.device_id_strategy,
                      report_node_capacity=cfg.agent.report_node_capacity,
                      capacity_resources=(cfg.nvidia.resource_memory_name, cfg.nvidia.resource_core_name))
        own = tuple(sorted({v.node_lock_key for v, _, _ in mixed
                            if v.node_lock_key and v.node_lock_key != "hami.io/mutex.lock"}))
        runner = PodRunner(client, name, kubelet, cfg, node_index=ni, hostpid_bug=cfg.sim.hostpid_bug,
                           proc_root=self._proc_root, gpu_file=self.gpu_file,
                           vendor_runner=VendorPodRunner(client, name, own_locks=own) if mixed else None)
        return [asyncio.create_task(agent.run(stop), name=f"agent-{name}"),
                asyncio.create_task(runner.run(stop), name=f"kubelet-{name}")], kubelet

    # ------------------------------------------------------------------ node groups (hami.sim.autoscaler)

    async def add_node(self, name: str, shapes: list[GpuShape], labels: Mapping[str, str]) -> None:
        """A new NVIDIA node, as a cloud would boot one for a node group: its Node (as its kubelet
        registers it), its GPUs in the fake-GPU file, and its node agent like every other node's."""
        if self.client is None or self.gpu_file is None:
            raise SimSpecError("--sim-node-group needs the embedded cluster's own fake-GPU file (no --fake-gpus)")
        self._next_index += 1
        ni = self._next_index
        self.gpu_file.doc.setdefault("nodes", {})[name] = node_gpus(ni, shapes)
        self.gpu_file.save()
        obj = node_object(name, 0)
        obj["metadata"]["labels"].update(labels)
        await self.client.create("nodes", obj)
        stop = asyncio.Event()
        tasks, kubelet = await self._start_agent_node(ni, name, stop)
        self._added[name] = (stop, tasks, kubelet)

    async def remove_node(self, name: str) -> None:
        """The cloud deletes the instance: its agent and kubelet stop, then the Node goes."""
        stop, tasks, kubelet = self._added.pop(name, (None, [], None))
        if stop is not None:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            with contextlib.suppress(Exception):
                await kubelet.stop()
            if kubelet in self._kubelets:
                self._kubelets.remove(kubelet)
        if self.gpu_file is not None and name in (self.gpu_file.doc.get("nodes") or {}):
            del self.gpu_file.doc["nodes"][name]
            self.gpu_file.save()
        if self.client is not None:
            with contextlib.suppress(ApiError):
                await self.client.delete("nodes", name)


def extender_url(cfg: Config) -> str:
    scheme = "https" if cfg.scheduler.cert_file and cfg.scheduler.key_file else "http"
    return dial_url(cfg.scheduler.http_bind, scheme=scheme)


def banner(cfg: Config, kubeconfig: str, api_url: str, pointer: str | None = None) -> str:
    lines = [
        "",
        "hami is running on an embedded Kubernetes API server (no cluster, no GPU needed).",
        f"  API server     {api_url}",
        f"  kubeconfig     {kubeconfig}" + (f"  (also {pointer} while this run lasts)" if pointer else ""),
        f"  extender       {extender_url(cfg)}/filter  /bind  /webhook",
        f"  metrics        {dial_url(cfg.scheduler.metrics_bind_address, '/metrics')}  (scheduler)",
        f"                 {dial_url(cfg.monitor.metrics_bind_address, '/metrics')}  (monitor)",
        f"  nodes          {cfg.sim.nodes} x {cfg.sim.gpus}",
        *[f"  node group     {g}  (NAME:MIN:MAX:GPUS, Cluster Autoscaler stand-in)" for g in cfg.sim.node_groups],
        *([f"  web UI         {dial_url(cfg.ui.bind_address, '/')}"] if "ui" in cfg.roles else []),
        "Try:",
        f"  export KUBECONFIG={kubeconfig}",
        "  kubectl get nodes",
        "  kubectl get node gpu-node-1 -o jsonpath='{.metadata.annotations}'",
        "  kubectl get pods -A -o wide",
        "  hami doctor nodes",
        "  hami doctor pod default/<pod>",
    ]
    if cfg.debug.profiling:
        debug = cfg.debug.debug_bind_address or DEFAULT_DEBUG_BIND  # loopback only (hami.app)
        lines.append(f"  go tool pprof {dial_url(debug, '/debug/pprof/profile?seconds=30')}")
    lines.append("Ctrl-C stops everything.")
    return "\n".join(lines)
