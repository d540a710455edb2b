"""HAMi-core onto the host (hami/agent/hamicore.py) and what Allocate does with it.

Covers: the ELF check accepts real shared objects (grpc's extension module) and the stand-in, and
refuses (naming the file) text, executables, 32-bit objects and every truncation (property test over
cut points; random bytes raise only LibraryError); install writes libvgpu.so, ld.so.preload (naming
the library where Allocate mounts it) and the version record, and a second install writes nothing
(same inodes); an upgrade gives the name a new inode while a mapping of the old file keeps the old
bytes; a reader racing upgrades only ever sees a whole old or whole new library, and two installers
racing leave one whole library and no temp files; an unwritable hook path is a startup error naming
--hook-path (through the real `hami --role node-agent` process); a corrupt library stops the agent
naming the file. Over real gRPC: the agent publishes `hami.io/hami-core` (version, or `missing`);
with the library absent Allocate fails FAILED_PRECONDITION naming the missing file and marks the pod
failed; with it present Allocate mounts it.
"""

from __future__ import annotations

import asyncio
import glob
import mmap
import os
import subprocess
import sys
import threading

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.agent import hamicore
from hami.agent.hamicore import HookPathError, LibraryError, check_elf, install, installed_state
from hami.sim.kubelet.libstub import stub_library, write_stub_library
from tests.agent.harness import NODE, U1, NodeHarness

pytestmark = pytest.mark.timeout(90)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _real_shared_object() -> bytes:
    import grpc._cython as cy

    (path,) = glob.glob(os.path.join(os.path.dirname(cy.__file__), "cygrpc*.so"))
    with open(path, "rb") as fh:
        return fh.read()


REAL = _real_shared_object()


def test_elf_check_accepts_real_and_stand_in_libraries():
    check_elf(REAL, "cygrpc.so")
    check_elf(stub_library(), "stub.so")


@pytest.mark.parametrize(("data", "why"), [
    (b"#!/bin/sh\necho hi\n" * 10, "not an ELF"),
    (b"", "not an ELF"),
    (REAL[:4] + bytes([1]) + REAL[5:], "64-bit"),                       # ELFCLASS32
    (REAL[:16] + (2).to_bytes(2, "little") + REAL[18:], "shared object"),  # ET_EXEC
    (REAL[: len(REAL) // 2], "truncated"),
])
def test_elf_check_refuses_naming_the_file(data, why):
    with pytest.raises(LibraryError, match=why) as err:
        check_elf(data, "/image/libvgpu.so")
    assert str(err.value).startswith("/image/libvgpu.so: ")


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=0, max_value=len(REAL) - 1))
def test_every_truncation_of_a_real_library_is_refused(cut):
    with pytest.raises(LibraryError):
        check_elf(REAL[:cut], "libvgpu.so")


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400))
def test_garbage_raises_only_library_error(data):
    try:
        check_elf(b"\x7fELF" + data, "x")
    except LibraryError:
        pass


def _inode(path):
    return os.stat(path).st_ino


def test_install_writes_the_layout_once_and_is_idempotent(tmp_path):
    src = write_stub_library(str(tmp_path / "image" / "libvgpu.so"), "v2.6.0")
    hook = str(tmp_path / "hook")
    state = install(src, hook, "v2.6.0")
    vgpu = os.path.join(hook, "vgpu")
    assert state.installed and state.version == "v2.6.0"
    assert set(state.changed) == {"libvgpu.so", "ld.so.preload", "hami-core.version"}
    with open(src, "rb") as a, open(os.path.join(vgpu, "libvgpu.so"), "rb") as b:
        assert a.read() == b.read()
    with open(os.path.join(vgpu, "ld.so.preload")) as fh:
        assert fh.read() == f"{vgpu}/libvgpu.so\n"
    assert os.stat(os.path.join(vgpu, "libvgpu.so")).st_mode & 0o777 == 0o755
    inodes = {n: _inode(os.path.join(vgpu, n)) for n in os.listdir(vgpu)}
    again = install(src, hook, "v2.6.0")
    assert again.changed == () and {n: _inode(os.path.join(vgpu, n)) for n in os.listdir(vgpu)} == inodes
    assert installed_state(hook) == hamicore.HamiCoreState(True, "v2.6.0", state.sha256, state.lib_path)
    assert installed_state(hook).annotation == "v2.6.0"
    assert installed_state(str(tmp_path / "other")).annotation == "missing"


def test_version_comes_from_a_version_file_else_the_digest(tmp_path):
    src = write_stub_library(str(tmp_path / "image" / "libvgpu.so"))
    assert install(src, str(tmp_path / "h1")).version.startswith("sha256:")
    (tmp_path / "image" / "VERSION").write_text("v2.7.1\n")
    assert install(src, str(tmp_path / "h2")).version == "v2.7.1"


def test_upgrade_keeps_the_mapped_old_library_whole(tmp_path):
    hook = str(tmp_path / "hook")
    old = write_stub_library(str(tmp_path / "old" / "libvgpu.so"), "old")
    new = write_stub_library(str(tmp_path / "new" / "libvgpu.so"), "new-and-longer")
    install(old, hook, "1")
    lib = os.path.join(hook, "vgpu", "libvgpu.so")
    before = open(old, "rb").read()
    fh = open(lib, "rb")  # a running container: an open, mapped library
    mapped = mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)
    old_inode = os.fstat(fh.fileno()).st_ino
    try:
        state = install(new, hook, "2")
        assert "libvgpu.so" in state.changed and state.version == "2"
        assert mapped[:] == before  # the old pages never changed underneath the process
        assert _inode(lib) != old_inode and open(lib, "rb").read() == open(new, "rb").read()
    finally:
        mapped.close()
        fh.close()


def test_reader_racing_upgrades_sees_only_whole_libraries(tmp_path):
    hook = str(tmp_path / "hook")
    versions = [write_stub_library(str(tmp_path / f"v{i}" / "libvgpu.so"), f"v{i}" * (i + 1) * 50) for i in range(3)]
    whole = {open(v, "rb").read() for v in versions}
    install(versions[0], hook, "v0")
    lib = os.path.join(hook, "vgpu", "libvgpu.so")
    stop = threading.Event()
    seen: list[bytes] = []

    def reader():
        while not stop.is_set():
            with open(lib, "rb") as fh:
                seen.append(fh.read())

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(60):
            install(versions[i % 3], hook, f"v{i % 3}")
    finally:
        stop.set()
        t.join()
    assert seen and set(seen) <= whole


def test_two_installers_racing_leave_one_whole_library_and_no_temp_files(tmp_path):
    hook = str(tmp_path / "hook")
    src = write_stub_library(str(tmp_path / "image" / "libvgpu.so"), "race")
    errors: list[BaseException] = []

    def run():
        try:
            for _ in range(20):
                install(src, hook, "v")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    vgpu = os.path.join(hook, "vgpu")
    assert sorted(os.listdir(vgpu)) == ["hami-core.version", "ld.so.preload", "libvgpu.so"]
    check_elf(open(os.path.join(vgpu, "libvgpu.so"), "rb").read(), "installed")


def _kubeconfig(tmp_path) -> str:
    """A kubeconfig nothing is ever sent to: these agents stop before their first API call."""
    kc = tmp_path / "kubeconfig"
    kc.write_text("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
                  "contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
                  "users: [{name: u, user: {}}]\n")
    return str(kc)


def _unwritable_hook(tmp_path) -> str:
    """A hook path the agent cannot write: a 0555 directory, or (as root, who ignores modes) sysfs."""
    if os.geteuid() != 0:
        d = tmp_path / "ro"
        d.mkdir()
        d.chmod(0o555)
        return str(d)
    return "/sys/fs/hami-hook-test"


def test_unwritable_hook_path_is_a_clear_error(tmp_path):
    src = write_stub_library(str(tmp_path / "image" / "libvgpu.so"))
    hook = _unwritable_hook(tmp_path)
    with pytest.raises(HookPathError) as err:
        install(src, hook)
    assert f"--hook-path {hook}: cannot install HAMi-core" in str(err.value)


def test_node_agent_process_refuses_to_start_on_an_unwritable_hook_path(tmp_path):
    src = write_stub_library(str(tmp_path / "image" / "libvgpu.so"))
    gpus = tmp_path / "gpus.yaml"
    gpus.write_text("gpus:\n  - {uuid: GPU-1, memory_mib: 1024}\n")
    kc = _kubeconfig(tmp_path)
    hook = _unwritable_hook(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "hami", "--role", "node-agent", "--node-name", "n1", "--gpu-backend", "fake",
         "--fake-gpus", str(gpus), "--kubeconfig", kc, "--hook-path", hook, "--vgpu-lib", src,
         "--kubelet-socket-dir", str(tmp_path / "dp")],
        cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert f"--hook-path {hook}: cannot install HAMi-core" in out.stderr


async def test_corrupt_library_stops_the_agent_naming_the_file(tmp_path):
    from hami.agent import role
    from hami.app import RoleContext
    from hami.config import AgentSettings, Config, KubeSettings

    bad = tmp_path / "libvgpu.so"
    bad.write_bytes(stub_library()[:100])
    gpus = tmp_path / "gpus.yaml"
    gpus.write_text("gpus:\n  - {uuid: GPU-1, memory_mib: 1024}\n")
    cfg = Config(roles=("node-agent",), kube=KubeSettings(kubeconfig=_kubeconfig(tmp_path)),
                 agent=AgentSettings(node_name="n1", hook_path=str(tmp_path / "hook"), gpu_backend="fake",
                                     fake_gpus=str(gpus), vgpu_lib=str(bad),
                                     kubelet_socket_dir=str(tmp_path / "dp")))
    with pytest.raises(LibraryError, match=f"{bad}: truncated"):
        await role.run(RoleContext(name="node-agent", config=cfg, stop=asyncio.Event()))
    assert not (tmp_path / "hook" / "vgpu" / "libvgpu.so").exists()


def _anns(obj):
    return obj["metadata"].get("annotations") or {}


async def test_agent_publishes_the_installed_version_and_allocate_mounts_it():
    async with NodeHarness(vgpu_lib_version="v2.6.0") as h:
        assert await h.agent.nodes.wait_for(
            lambda: _anns(h.agent.nodes.store.get(NODE, {"metadata": {}})).get("hami.io/hami-core") == "v2.6.0", 10)
        await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        pod = await h.create_pod("p1", {"main": 1}, f"{U1},NVIDIA,3000,30:;")
        (c,) = (await h.kubelet.allocate_pod(pod)).values()
        assert not any("HAMi-core" in r for r in h.agent.readiness())
        libs = [m.host_path for m in c.mounts if m.container_path.endswith("libvgpu.so")]
        assert libs == [f"{h.hook}/vgpu/libvgpu.so"] and await asyncio.to_thread(os.path.isfile, libs[0])


async def test_without_hami_core_allocate_refuses_naming_the_missing_file():
    async with NodeHarness(vgpu_lib="") as h:
        assert await h.agent.nodes.wait_for(
            lambda: _anns(h.agent.nodes.store.get(NODE, {"metadata": {}})).get("hami.io/hami-core") == "missing", 10)
        await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        pod = await h.create_pod("p1", {"main": 1}, f"{U1},NVIDIA,3000,30:;")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await h.kubelet.allocate_pod(pod)
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert f"{h.hook}/vgpu/libvgpu.so" in err.value.details()
        assert "HAMi-core is not installed on node n1" in err.value.details()
        assert _anns(await h.pod("p1"))["hami.io/bind-phase"] == "failed"
        assert any("HAMi-core not installed" in r for r in h.agent.readiness())
        # installing it afterwards (a fixed image, the agent restarted) is seen and published
        install(write_stub_library(os.path.join(h.dir, "fixed", "libvgpu.so")), h.hook, "v2.6.1")
        assert await h.agent.nodes.wait_for(
            lambda: _anns(h.agent.nodes.store.get(NODE, {"metadata": {}})).get("hami.io/hami-core") == "v2.6.1", 10)
