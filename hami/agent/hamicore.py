"""HAMi-core (`libvgpu.so` + `ld.so.preload`) onto the host, under `<hook_path>/vgpu/` (HAMi's layout).

The node agent copies the library shipped in its image (`--vgpu-lib`, `$HAMI_VGPU_LIB`) to the host
at start, because every Allocate bind-mounts `<hook>/vgpu/libvgpu.so` and `<hook>/vgpu/ld.so.preload`
into GPU containers.

Replacing a library that running containers use: HAMi's chart does `cp -f`, which truncates and
rewrites the file in place, so a process that has it mapped sees its pages change underneath it
(SIGBUS at worst). Here each file is written to a temporary name in the same directory, fsynced and
renamed over the old name. The rename gives the name a new inode; the old inode stays whole for as
long as anything holds it: a process mapping it, and the bind mount of every running container
(a file bind mount pins the inode it was made from, not the name). New containers get the new file.
Files whose content is already right are not touched at all, so a restart of the agent is a no-op.

The installed version and digest are written next to the library (`hami-core.version`) and
published on the Node (`hami.io/hami-core`), where `hami doctor nodes` reads them.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import struct
import tempfile
from dataclasses import dataclass

import orjson

from hami.device.codec.keys import HAMI_CORE_ANNOTATION

LIB_NAME = "libvgpu.so"
PRELOAD_NAME = "ld.so.preload"
RECORD_NAME = "hami-core.version"
ANNOTATION = HAMI_CORE_ANNOTATION  # "<version>" when installed, "missing" when not
MISSING = "missing"

_ELF_MAGIC = b"\x7fELF"
_ELF64_HEADER = 64
_ET_DYN = 3


class LibraryError(ValueError):
    """The HAMi-core library to install is absent, unreadable, not an ELF shared object, or truncated."""


class HookPathError(RuntimeError):
    """The hook path cannot take HAMi-core (read-only, permission denied): a startup error."""


@dataclass(frozen=True, slots=True)
class HamiCoreState:
    installed: bool
    version: str = ""  # "" when not installed or the record is missing
    sha256: str = ""
    lib_path: str = ""
    changed: tuple[str, ...] = ()  # files (re)written by this install

    @property
    def annotation(self) -> str:
        if not self.installed:
            return MISSING
        return self.version or "unknown"


def vgpu_dir(hook_path: str) -> str:
    return os.path.join(hook_path.rstrip("/") or "/", "vgpu")


def preload_content(hook_path: str) -> bytes:
    """ld.so.preload names the library where Allocate mounts it in the container (the host path)."""
    return (os.path.join(vgpu_dir(hook_path), LIB_NAME) + "\n").encode()


# --------------------------------------------------------------------------- pure checks


def check_elf(data: bytes, name: str) -> None:
    """Refuse anything but a complete 64-bit little-endian ELF shared object; errors name `name`.

    Truncation shows as a program-header or section-header table, or a loadable segment, that
    ends past the end of the data.
    """
    size = len(data)
    if size < _ELF64_HEADER or data[:4] != _ELF_MAGIC:
        raise LibraryError(f"{name}: not an ELF file ({size} bytes, header {data[:4]!r})")
    if data[4] != 2 or data[5] != 1:
        raise LibraryError(f"{name}: not a 64-bit little-endian ELF (class {data[4]}, data {data[5]})")
    e_type, _machine = struct.unpack_from("<HH", data, 16)
    if e_type != _ET_DYN:
        raise LibraryError(f"{name}: ELF type {e_type}, expected a shared object ({_ET_DYN})")
    phoff, shoff = struct.unpack_from("<QQ", data, 32)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 54)
    needed = max(phoff + phnum * phentsize, shoff + shnum * shentsize if shnum else 0)
    if phnum and phentsize >= 56 and phoff + phnum * phentsize <= size:
        for i in range(phnum):
            p_type, _flags, p_offset, _va, _pa, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
            if p_type == 1:  # PT_LOAD
                needed = max(needed, p_offset + p_filesz)
    if phnum == 0:
        raise LibraryError(f"{name}: ELF has no program headers (not a loadable library)")
    if needed > size:
        raise LibraryError(f"{name}: truncated: {size} bytes, its ELF headers need {needed}")


def read_library(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise LibraryError(f"{path}: cannot read the HAMi-core library ({exc.strerror})") from None
    check_elf(data, path)
    return data


def check_library(path: str) -> str:
    """Read-only check of the library to install; returns its sha256 (used by --check-config)."""
    return hashlib.sha256(read_library(path)).hexdigest()


def library_version(path: str, given: str = "") -> str:
    """The version to record: given, else a VERSION file beside the library, else its digest."""
    if given:
        return given
    with contextlib.suppress(OSError):
        with open(os.path.join(os.path.dirname(path), "VERSION"), encoding="utf-8") as fh:
            text = fh.read().strip()
        if text:
            return text.splitlines()[0][:64]
    return ""


def missing_mounts(host_paths: list[str], exists=os.path.isfile) -> list[str]:
    """Which HAMi-core files an Allocate answer would mount but the host lacks."""
    wanted = [p for p in host_paths if os.path.basename(p).startswith(LIB_NAME) or p.endswith("/" + PRELOAD_NAME)]
    return [p for p in dict.fromkeys(wanted) if not exists(p)]


# --------------------------------------------------------------------------- install (I/O)


def _same(path: str, content: bytes) -> bool:
    try:
        if os.path.getsize(path) != len(content):
            return False
        with open(path, "rb") as fh:
            return fh.read() == content
    except OSError:
        return False


def replace_file(path: str, content: bytes, mode: int) -> bool:
    """Make `path` hold `content`: write a temp file beside it, fsync, rename over. False if already so."""
    if _same(path, content):
        return False
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(content)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename durable
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    return True


def installed_state(hook_path: str) -> HamiCoreState:
    """What is on the host now: the library present, and the version record if there is one."""
    d = vgpu_dir(hook_path)
    lib = os.path.join(d, LIB_NAME)
    if not (os.path.isfile(lib) and os.path.isfile(os.path.join(d, PRELOAD_NAME))):
        return HamiCoreState(False, lib_path=lib)
    version = sha = ""
    with contextlib.suppress(OSError, orjson.JSONDecodeError, AttributeError, TypeError):
        with open(os.path.join(d, RECORD_NAME), "rb") as fh:
            record = orjson.loads(fh.read())
        version, sha = str(record.get("version", "")), str(record.get("sha256", ""))
    return HamiCoreState(True, version, sha, lib)


def install(source: str, hook_path: str, version: str = "") -> HamiCoreState:
    """Install `source` as `<hook>/vgpu/libvgpu.so` plus `ld.so.preload` and the version record.

    Raises LibraryError (naming `source`) for a bad library, HookPathError for a hook path that
    cannot be written. Only files whose content differs are replaced.
    """
    data = read_library(source)
    sha = hashlib.sha256(data).hexdigest()
    version = library_version(source, version) or f"sha256:{sha[:12]}"
    d = vgpu_dir(hook_path)
    record = orjson.dumps({"version": version, "sha256": sha, "source": source}) + b"\n"
    files = [(LIB_NAME, data, 0o755), (PRELOAD_NAME, preload_content(hook_path), 0o644), (RECORD_NAME, record, 0o644)]
    changed = []
    try:
        os.makedirs(d, exist_ok=True)
        for name, content, mode in files:
            if replace_file(os.path.join(d, name), content, mode):
                changed.append(name)
    except OSError as exc:
        hint = "mount the host directory read-write" if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM) \
            else "check the host directory"
        raise HookPathError(
            f"--hook-path {hook_path}: cannot install HAMi-core into {d}: {exc.strerror} ({hint})") from None
    return HamiCoreState(True, version, sha, os.path.join(d, LIB_NAME), tuple(changed))
