"""Every command README.md shows runs as written against the embedded default, from a fresh shell.

README's code blocks are read and split into commands (a here-document and `\\` continuations are one
command, a trailing `  # ...` is a comment). Each is classified below: run (in the README's second
terminal: the venv activated, as it says), started and stopped (a long-running one: checked for the
output or listener it promises, then stopped), or not run, with the reason (a real cluster, a
registry, Docker, the Go toolchain). A command README gains that is classified nowhere fails the test,
and so does a classification README no longer has. `scripts/demo` is started from a shell with no venv
activated, as a newcomer would, on the default ports and ~/.hami pointers; the default_ports fixture (a
file lock, tests/conftest.py) keeps two tests from running hami there at once.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from hami.sim.instance import port_is_free
from tests.tools import find_kubectl

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

# Long-running commands: started, checked, stopped.
STARTED = {
    "scripts/demo": "the embedded system with the demo workload; the second terminal's commands run against it",
    "hami --role all --embedded --profiling &": "the debug listener answers /debug/pprof/ on 127.0.0.1:6060",
}
# Not run here, and why.
NOT_RUN = {
    "scripts/test": "the whole suite, which runs this test",
    "go tool pprof -top http://127.0.0.1:6060/debug/pprof/profile?seconds=30":
        "needs the Go toolchain; the same profile is fetched with urllib below",
    "go tool pprof -top http://127.0.0.1:6060/debug/pprof/heap": "needs the Go toolchain; fetched with urllib below",
    "HAMI_IMAGE=registry.example.com/ml/hami:0.1.0 scripts/build-image":
        "builds the image with Docker or podman and pushes nowhere; tests/deploy/test_image.py builds it",
    "docker push registry.example.com/ml/hami:0.1.0": "a registry (registry.example.com is an example)",
    "scripts/build-image --local": "buildah as root, minutes; tests/deploy/test_image.py runs it",
    "scripts/image-smoke localhost/hami:0.1.0": "needs the image built above; tests/deploy/test_image.py runs it",
    "buildah push localhost/hami:0.1.0 docker://registry.example.com/ml/hami:0.1.0": "a registry",
    "helm install hami deploy/helm/hami -n hami-system --create-namespace "
    "--set image.registry=registry.example.com --set image.repository=ml/hami --set image.tag=0.1.0":
        "a real cluster; the chart is rendered and checked by tests/deploy",
}
# The README's second terminal, run in order against scripts/demo: command -> (exit code, text its
# output must contain, or "" for any). Retried until it holds: the demo's pods come and go.
RUN = {
    "export KUBECONFIG=~/.hami/embedded.kubeconfig": (0, ""),
    "kubectl get nodes": (0, "gpu-node-1"),
    "kubectl get node gpu-node-1 -o jsonpath='{.metadata.annotations}'": (0, "hami.io/node-nvidia-register"),
    "kubectl get pods -A -o wide": (0, "demo-"),
    "kubectl apply -f - <<'YAML'": (0, "my-gpu-pod"),
    "kubectl get pod my-gpu-pod -o jsonpath='{.metadata.annotations.sim\\.hami\\.io/allocated-env}'":
        (0, '"CUDA_DEVICE_MEMORY_LIMIT_0":"3000m"'),
    "kubectl describe pod demo-huge-mem-6": (0, "FilteringFailed"),
    "hami doctor pod default/demo-huge-mem-6": (1, "demo-huge-mem-6"),  # 1: the pod has a problem, named
    "hami doctor nodes": (0, "gpu-node-1"),
    "hami whatif --suggest --html /tmp/whatif.html": (0, ""),
    "hami whatif --timing --timing-creators 32": (0, ""),
    "curl -s localhost:9394/metrics | grep hami_vgpu_memory_used_bytes": (0, "hami_vgpu_memory_used_bytes{"),
    "curl -s localhost:9395/metrics | grep hami_gpu_memory_allocated_bytes": (0, "hami_gpu_memory_allocated_bytes"),
    "hami cache dump $(ls ~/.hami/embedded-state/usr-local/vgpu/containers/*/*.cache | head -1)": (0, ""),
    "curl -s 'http://127.0.0.1:6060/debug/pprof/goroutine?debug=2'": (0, "goroutine"),
}
PROFILING = "curl -s 'http://127.0.0.1:6060/debug/pprof/goroutine?debug=2'"  # runs against the --profiling one


def readme_commands(text: str) -> list[str]:
    """The commands of README's shell code blocks, as a user would paste them: comments cut, here-documents
    and continuations kept with their command (the key is the command's first line, joined continuations)."""
    out: list[str] = []
    for block in re.findall(r"^```(?:sh|bash|shell|console)?\n(.*?)^```", text, flags=re.S | re.M):
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            line = re.sub(r"\s{2,}#.*$", "", lines[i]).rstrip()
            i += 1
            if not line or line.startswith("#"):
                continue
            while line.endswith("\\") and i < len(lines):  # a continuation
                line = line[:-1].rstrip() + " " + re.sub(r"\s{2,}#.*$", "", lines[i]).strip()
                i += 1
            here = re.search(r"<<'?(\w+)'?", line)
            if here:  # the here-document's lines belong to this command
                while i < len(lines) and lines[i].strip() != here.group(1):
                    i += 1
                i += 1
            out.append(line)
    return out


def here_document(text: str, first_line: str) -> str:
    """The command starting with `first_line` with its here-document, as a shell reads it."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first_line))
    end_word = re.search(r"<<'?(\w+)'?", first_line).group(1)
    end = next(i for i in range(start + 1, len(lines)) if lines[i].strip() == end_word)
    return "\n".join([first_line, *lines[start + 1:end + 1]])


def test_every_readme_command_is_classified():
    commands = readme_commands((ROOT / "README.md").read_text())
    classified = set(STARTED) | set(NOT_RUN) | set(RUN)
    assert [c for c in commands if c not in classified] == [], "README commands this test does not classify"
    assert sorted(classified - set(commands)) == [], "classified commands README no longer shows"


def fresh_env(home: Path) -> dict[str, str]:
    """A newcomer's shell: no venv activated, kubectl on PATH, and a home of its own (a fresh machine's: the
    demo's ~/.hami pointers and kubectl's ~/.kube cache are this test's alone, whatever else runs beside)."""
    venv_bin = str(ROOT / ".venv" / "bin")
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != venv_bin]
    path.insert(0, str(Path(find_kubectl()).parent))
    keep = ("LANG", "LC_ALL", "TMPDIR", "USER", "CI", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")
    home.mkdir(parents=True, exist_ok=True)
    return {**{k: os.environ[k] for k in keep if k in os.environ}, "HOME": str(home), "PATH": os.pathsep.join(path)}


@contextlib.contextmanager
def started(command: str, env: dict[str, str], log: Path):
    """`command` run by a shell in the repository, in its own process group, stopped at the end; the shell
    execs the command's last part, so the stop waits for hami itself to let go of the default ports."""
    with open(log, "w") as out:
        proc = subprocess.Popen(["bash", "-c", command], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            yield proc
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()


def until(check, timeout: float, what: str, proc: subprocess.Popen, log: Path):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"{what}: the process ended\n{log.read_text()[-3000:]}"
        last = check()
        if last is True:
            return
        time.sleep(1)
    raise AssertionError(f"{what}: not within {timeout:g} s; last: {last}\n{log.read_text()[-3000:]}")


def second_terminal(command: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`command` in the README's second terminal: the venv activated, KUBECONFIG exported."""
    script = f". .venv/bin/activate && export KUBECONFIG=~/.hami/embedded.kubeconfig && {command}"
    return subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.xdist_group("default-ports")
def test_readme_commands_run_as_written_against_the_embedded_default(tmp_path, default_ports):
    text = (ROOT / "README.md").read_text()
    env = fresh_env(tmp_path / "home")
    log = tmp_path / "demo.log"
    with started("exec scripts/demo", env, log) as demo:
        until(lambda: "hami is running on an embedded Kubernetes API server" in log.read_text(), 300,
              "the demo's banner", demo, log)
        for command, (code, promised) in RUN.items():
            if command == PROFILING:
                continue
            full = here_document(text, command) if "<<" in command else command

            def holds(full=full, code=code, promised=promised) -> bool | str:
                res = second_terminal(full, env)
                return True if res.returncode == code and promised in res.stdout else (
                    f"rc {res.returncode}: {res.stdout[-500:]} {res.stderr[-500:]}")
            until(holds, 180, command, demo, log)
    # README's profiling step needs 127.0.0.1:6060 (a default hami moves when it is in use): wait until no
    # process holds it, naming the holder if one keeps it
    deadline = time.monotonic() + 120
    while not port_is_free("127.0.0.1:6060"):
        holder = subprocess.run(["ss", "-ltnpH", "sport = :6060"], capture_output=True, text=True).stdout
        assert time.monotonic() < deadline, f"127.0.0.1:6060 stays in use: {holder}"
        time.sleep(1)
    log = tmp_path / "profiling.log"
    with started(". .venv/bin/activate && exec hami --role all --embedded --profiling", env, log) as hami:
        def pprof() -> bool | str:
            try:
                body = urllib.request.urlopen("http://127.0.0.1:6060/debug/pprof/", timeout=5).read().decode()
            except OSError as exc:  # with what hami said of its ports (a default in use moves) and who holds 6060
                holder = subprocess.run(["ss", "-ltnpH", "sport = :6060"], capture_output=True, text=True).stdout
                return f"{exc}; 6060 held by: {holder.strip() or '-'}; " + "; ".join(
                    line for line in log.read_text().splitlines() if "in use" in line or "Listener bound" in line)
            return "goroutine" in body or body[:200]
        until(pprof, 180, "the debug listener of hami --role all --embedded --profiling", hami, log)
        heap = urllib.request.urlopen("http://127.0.0.1:6060/debug/pprof/heap", timeout=30).read()
        assert heap[:2] == b"\x1f\x8b"  # a gzipped pprof profile, what go tool pprof reads
        res = second_terminal(PROFILING, env)
        assert res.returncode == 0 and RUN[PROFILING][1] in res.stdout, res.stderr
