"""One embedded instance beside another: its own free ports, its own state folder, a kubeconfig to find.

`hami --role all --embedded` listens on fixed loopback defaults (API server 127.0.0.1:6443, extender
127.0.0.1:8080, metrics 9395/9394, pprof 6060). A second instance, such as the README's profiling step
while the demo runs, would die on "address already in use"; `move_busy_defaults` moves each default
the user did not set to a free loopback port when it is taken and says which. A flag the user gave is
never moved: a clash there is an error naming that flag.

The state folder a run creates for itself is removed when it stops (`--sim-keep-state` keeps it), and
`publish_kubeconfig` copies this run's kubeconfig to `~/.hami/embedded.kubeconfig`, a path in the user's
own home that another user cannot plant (unlike a guess such as the newest /tmp/hami-embedded-*), and
`publish_state` points `~/.hami/embedded-state` at the state folder (the cache files the README dumps).
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable, Mapping, MutableMapping

from hami.config import DEFAULT_DEBUG_BIND
from hami.netaddr import split_host_port

# (flag dest, default address, what listens there, whether this run opens it given the flags)
LISTENERS: tuple[tuple[str, str, str, Callable[[Mapping], bool]], ...] = (
    ("sim_listen", "127.0.0.1:6443", "embedded API server", lambda f: True),
    ("http_bind", "127.0.0.1:8080", "scheduler extender", lambda f: True),
    ("scheduler_metrics_bind_address", "127.0.0.1:9395", "scheduler metrics",
     lambda f: "metrics_bind_address" not in f),
    ("monitor_metrics_bind_address", "127.0.0.1:9394", "monitor metrics", lambda f: "metrics_bind_address" not in f),
    ("debug_bind_address", DEFAULT_DEBUG_BIND, "pprof debug listener", lambda f: bool(f.get("profiling"))),
    ("ui_bind_address", "127.0.0.1:8090", "web UI", lambda f: True),
)


def port_is_free(address: str) -> bool:
    host, port = split_host_port(address, flag="address", default_host="127.0.0.1")
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_loopback_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def move_busy_defaults(flags: MutableMapping, *, is_free: Callable[[str], bool] = port_is_free,
                       pick: Callable[[], str] = free_loopback_address) -> list[str]:
    """Give each default listener this run opens a free port when the default is taken; one line per move."""
    moved = []
    for dest, default, what, opened in LISTENERS:
        if dest in flags or not opened(flags) or is_free(default):
            continue
        flags[dest] = pick()
        moved.append(f"{default} is in use (another hami --embedded?): the {what} listens on {flags[dest]} "
                     f"instead (--{dest.replace('_', '-') if dest != 'http_bind' else 'http_bind'} sets it)")
    return moved


def pointer_path(home: str | None = None) -> str:
    return os.path.join(home or os.path.expanduser("~"), ".hami", "embedded.kubeconfig")


def state_pointer_path(home: str | None = None) -> str:
    return os.path.join(home or os.path.expanduser("~"), ".hami", "embedded-state")


def publish_state(state_dir: str, pointer: str | None = None) -> str | None:
    """Point `~/.hami/embedded-state` at this run's state folder (a symlink, swapped in atomically), so the
    README's commands find the cache files; None when it cannot be made."""
    pointer = pointer or state_pointer_path()
    try:
        os.makedirs(os.path.dirname(pointer), mode=0o700, exist_ok=True)
        tmp = f"{pointer}.{os.getpid()}.tmp"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        os.symlink(os.path.abspath(state_dir), tmp)
        os.replace(tmp, pointer)
        return pointer
    except OSError:
        return None


def withdraw_state(state_dir: str, pointer: str | None = None) -> None:
    """On exit: remove the pointer if it still names this run's state folder (a newer instance keeps its own)."""
    pointer = pointer or state_pointer_path()
    with contextlib.suppress(OSError):
        if os.readlink(pointer) == os.path.abspath(state_dir):
            os.unlink(pointer)


def publish_kubeconfig(kubeconfig: str, pointer: str | None = None) -> str | None:
    """Copy this run's kubeconfig to the per-user pointer (atomically); None when it cannot be written."""
    pointer = pointer or pointer_path()
    try:
        os.makedirs(os.path.dirname(pointer), mode=0o700, exist_ok=True)
        with open(kubeconfig, "rb") as src:
            data = src.read()
        tmp = f"{pointer}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, pointer)
        return pointer
    except OSError:
        return None


def withdraw_kubeconfig(kubeconfig: str, pointer: str | None = None) -> None:
    """On exit: remove the pointer if it still holds this run's kubeconfig (a newer instance keeps its own)."""
    pointer = pointer or pointer_path()
    with contextlib.suppress(OSError):
        with open(pointer, "rb") as p, open(kubeconfig, "rb") as k:
            if p.read() != k.read():
                return
        os.unlink(pointer)
