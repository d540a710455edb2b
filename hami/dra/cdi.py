"""One CDI spec per prepared claim under `--cdi-root`: how the runtime puts HAMi-core in a container.

Vendor `k8s.hami-core-gpu.project-hami.io`, class `claim` (HAMi's k8s-dra-driver names). The file is
`k8s.hami-core-gpu.project-hami.io-claim_<claim uid>.json` (CDI's transient spec name). The claim's
HAMi-core contract (envs and mounts, `hami.agent.allocate.share_contract`) is the spec-level
`containerEdits`, which a CDI runtime applies once whichever of the claim's devices a container
gets; each device `<claim uid>-<device>` adds `HAMI_DRA_DEVICE_<i>=<uuid>` (CDI refuses a device
without edits). A container thus sees one NVIDIA_VISIBLE_DEVICES and one limit per GPU.

Writes are atomic: a temporary file (`.<name>.tmp`, which CDI never reads: only *.json and *.yaml
are specs) is written and renamed over the spec, so a reader sees the old spec, the new
spec or none, never a part. `resolve` applies specs to a container the way a CDI runtime does (the
simulated kubelet uses it).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence

from hami.device.sharecontract import Mount

CDI_VERSION = "0.5.0"  # 0.5.0: device names may start with a digit (claim UIDs do)
CLAIM_CLASS = "claim"
_UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,127}")
_TMP = ".tmp"


class CdiError(ValueError):
    """A CDI name or spec this module refuses (never written)."""


def vendor(driver: str) -> str:
    return f"k8s.{driver}"


def kind(driver: str) -> str:
    return f"{vendor(driver)}/{CLAIM_CLASS}"


def check_uid(uid: str) -> str:
    """A claim UID as a file and device name part: letters, digits and '-' only."""
    if not isinstance(uid, str) or _UID.fullmatch(uid) is None:
        raise CdiError(f"claim uid {uid!r} is not a valid UID (letters, digits, '-')")
    return uid


def spec_file(driver: str, uid: str) -> str:
    return f"{vendor(driver)}-{CLAIM_CLASS}_{check_uid(uid)}.json"


def device_id(driver: str, uid: str, device: str) -> str:
    """The fully qualified CDI device name kubelet hands the runtime."""
    return f"{kind(driver)}={check_uid(uid)}-{device}"


def _mount(m: Mount) -> dict:
    return {"hostPath": m.host_path, "containerPath": m.container_path,
            "options": ["ro" if m.read_only else "rw", "nosuid", "nodev", "bind"]}


def build_spec(driver: str, uid: str, devices: Sequence[tuple[str, str]], envs: Mapping[str, str],
               mounts: Sequence[Mount]) -> dict:
    """The CDI spec of one claim; `devices`: (slice device name, GPU uuid) in env index order."""
    check_uid(uid)
    return {
        "cdiVersion": CDI_VERSION,
        "kind": kind(driver),
        "devices": [{"name": f"{uid}-{name}", "containerEdits": {"env": [f"HAMI_DRA_DEVICE_{i}={gpu}"]}}
                    for i, (name, gpu) in enumerate(devices)],
        "containerEdits": {"env": [f"{k}={v}" for k, v in envs.items()], "mounts": [_mount(m) for m in mounts]},
    }


# --------------------------------------------------------------------------- files


def write_atomic(path: str, data: bytes) -> None:
    """`data` at `path`, all or nothing: a temporary renamed over it, so a reader (or a restart after
    a kill) sees the old file or the new one, never a part."""
    d = os.path.dirname(path) or "."
    os.makedirs(d, exist_ok=True)
    tmp = os.path.join(d, f".{os.path.basename(path)}{_TMP}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_spec(root: str, driver: str, uid: str, spec: Mapping) -> str:
    path = os.path.join(root, spec_file(driver, uid))
    write_atomic(path, json.dumps(spec, indent=1, sort_keys=False).encode())
    return path


def remove_spec(root: str, driver: str, uid: str) -> bool:
    """Remove the claim's spec (and a temporary left by a crash); True if a spec was there."""
    path = os.path.join(root, spec_file(driver, uid))
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(root, f".{os.path.basename(path)}{_TMP}"))
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def claim_files(root: str, driver: str) -> list[tuple[str, str]]:
    """(uid, file name) of every claim spec of this driver under `root`, and of every temporary
    one left by a kill mid-write ('.<file>.tmp'), so a sweep after a crash finds them."""
    prefix = f"{vendor(driver)}-{CLAIM_CLASS}_"
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        base = name[1:-len(_TMP)] if is_temporary(name) else name
        if base.startswith(prefix) and base.endswith(".json"):
            out.append((base[len(prefix):-len(".json")], name))
    return out


def is_temporary(name: str) -> bool:
    return name.startswith(".") and name.endswith(_TMP)


# --------------------------------------------------------------------------- the runtime's side


def resolve(root: str, ids: Iterable[str]) -> tuple[dict[str, str], list[dict]]:
    """Env and mounts a CDI runtime gives a container for the qualified device `ids` (spec-level
    edits once per spec, then each device's), from the specs under `root`. Raises CdiError for an
    id no spec defines, as the runtime refuses to start such a container."""
    specs: dict[str, dict] = {}
    for name in os.listdir(root) if os.path.isdir(root) else ():
        if name.endswith(".json") and not name.startswith("."):
            with contextlib.suppress(OSError, ValueError):
                with open(os.path.join(root, name), "rb") as f:
                    spec = json.loads(f.read())
                for d in spec.get("devices") or []:
                    specs[f"{spec['kind']}={d['name']}"] = spec
    env: dict[str, str] = {}
    mounts: list[dict] = []
    applied: list[int] = []
    for qualified in ids:
        spec = specs.get(qualified)
        if spec is None:
            raise CdiError(f"unresolvable CDI device {qualified}")
        name = qualified.split("=", 1)[1]
        edits = [d["containerEdits"] for d in spec["devices"] if d["name"] == name]
        if id(spec) not in applied:
            applied.append(id(spec))
            edits.insert(0, spec.get("containerEdits") or {})
        for e in edits:
            for kv in e.get("env") or []:
                k, _, v = kv.partition("=")
                env[k] = v
            mounts += [m for m in e.get("mounts") or [] if m not in mounts]
    return env, mounts
