"""`hami --role X ... --check-config`: everything a start reads, checked, and nothing a start does.

`build_config` has already parsed flags, environment and the device/node config files. This adds
the files and settings each role reads when it starts (kubeconfig, TLS pair, fake GPU file, the
HAMi-core library the node agent installs), read-only: no socket is opened, no API call is made,
nothing is written. Errors are `ConfigError`s naming the flag or file; the CLI exits 2 on them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from hami.config import Config, ConfigError

GPU_BACKENDS = ("nvml", "fake")


def _readable(path: str, key: str) -> None:
    try:
        with open(path, "rb") as fh:
            fh.read(1)
    except OSError as exc:
        raise ConfigError(key, path, path, f"a readable file ({exc.strerror})") from None


def _check_kubeconfig(config: Config) -> None:
    path = config.kube.kubeconfig
    if not path or config.sim.embedded:
        return  # in-cluster (service account), or written by the embedded API server at start
    import yaml

    _readable(path, "--kubeconfig (or $KUBECONFIG)")
    try:
        with open(path, "rb") as fh:
            doc = yaml.safe_load(fh)
    except yaml.YAMLError as exc:
        raise ConfigError("(syntax)", path, str(exc).splitlines()[0][:200], "a kubeconfig (YAML)") from None
    if not isinstance(doc, dict) or not doc.get("clusters"):
        raise ConfigError("clusters", path, type(doc).__name__, "a kubeconfig with a clusters list")


def _check_tls(config: Config) -> None:
    s = config.scheduler
    if not (s.cert_file or s.key_file):
        return
    if not (s.cert_file and s.key_file):
        missing = "--key_file" if s.cert_file else "--cert_file"
        raise ConfigError(missing, "command line", "", "both --cert_file and --key_file, or neither")
    import ssl

    _readable(s.cert_file, "--cert_file")
    _readable(s.key_file, "--key_file")
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(s.cert_file, s.key_file)
    except (ssl.SSLError, ValueError) as exc:
        raise ConfigError("--cert_file/--key_file", f"{s.cert_file} + {s.key_file}", str(exc)[:200],
                          "a PEM certificate and its private key") from None


def _check_backend(backend: str, fake_file: str, node_name: str, role: str) -> None:
    if backend not in GPU_BACKENDS:
        raise ConfigError("--gpu-backend", "command line", backend, " or ".join(GPU_BACKENDS))
    if backend != "fake":
        return  # nvml loads the driver library at start; nothing to read beforehand
    if not fake_file:
        raise ConfigError("--fake-gpus", "command line", "", f"a fake GPU file with --gpu-backend fake ({role})")
    from hami.gpu.backend import GpuBackendError
    from hami.gpu.select import make_backend

    try:
        make_backend("fake", fake_file, node_name).close()
    except GpuBackendError as exc:
        raise ConfigError("--fake-gpus", fake_file, fake_file, f"a valid fake GPU file: {exc}") from None


def _check_node_agent(config: Config) -> None:
    a = config.agent
    if not config.sim.embedded:
        if not a.node_name:
            raise ConfigError("--node-name", "command line and environment", "",
                              "this node's name (--node-name or $NODE_NAME)")
        _check_backend(a.gpu_backend, a.fake_gpus, a.node_name, "node-agent")
    if a.vgpu_lib:
        from hami.agent.hamicore import LibraryError, check_library

        try:
            check_library(a.vgpu_lib)
        except LibraryError as exc:
            reason = str(exc).removeprefix(f"{a.vgpu_lib}: ")
            raise ConfigError("--vgpu-lib (or $HAMI_VGPU_LIB)", a.vgpu_lib, reason,
                              "a complete 64-bit ELF shared object (HAMi-core libvgpu.so)") from None


def _check_monitor(config: Config) -> None:
    m = config.monitor
    if not config.sim.embedded:
        _check_backend(m.gpu_backend, m.fake_gpus, m.node_name, "monitor")


def _check_dra(config: Config) -> None:
    a = config.agent
    if not a.node_name:
        raise ConfigError("--node-name", "command line and environment", "",
                          "this node's name (--node-name or $NODE_NAME)")
    _check_backend(a.gpu_backend, a.fake_gpus, a.node_name, "dra")


CHECKS: dict[str, Callable[[Config], None]] = {
    "scheduler": _check_tls,
    "node-agent": _check_node_agent,
    "monitor": _check_monitor,
    "dra": _check_dra,
}


def check(config: Config) -> None:
    """Raise ConfigError for the first thing a start of `config.roles` would trip over."""
    _check_kubeconfig(config)
    for role in config.roles:
        fn = CHECKS.get(role)
        if fn is not None:
            fn(config)


def describe(config: Config) -> dict[str, Any]:
    """The resolved configuration as plain data (what --check-config prints)."""
    out = dataclasses.asdict(config)
    out["kube"]["source"] = (
        "embedded API server" if config.sim.embedded
        else config.kube.kubeconfig or "in-cluster service account"
    )
    out["roles"] = list(config.roles)
    return out


def render(config: Config) -> str:
    import orjson

    def other(value: Any) -> Any:  # sets (sorted for a stable print), anything else as text
        return sorted(value, key=str) if isinstance(value, set | frozenset) else str(value)

    return orjson.dumps(describe(config), default=other,
                        option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode() + "\n"
