"""The device config file (`nvidia:` section) and the per-node config.json: reading, parsing, validation.

An unknown key is not an error (HAMi's chart writes keys hami does not use), but the warning names the
nearest known key, so a typo such as `deviceSplitCont` is caught at the first start.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from hami.config.settings import ConfigError
from hami.device.model import FilterDevices, MigProfileAllow, NodeDeviceConfig, NvidiaConfig


def nearest_key_hint(key: str, known: Iterable[str]) -> str:
    """` (did you mean X?)` for the closest known key, or "" when none is close."""
    match = difflib.get_close_matches(key, list(known), n=1, cutoff=0.75)
    return f" (did you mean {match[0]}?)" if match else ""


# yaml key of the `nvidia:` section -> (NvidiaConfig field, expected python type)
_NVIDIA_KEYS: dict[str, tuple[str, type | tuple[type, ...]]] = {
    "resourceCountName": ("resource_count_name", str),
    "resourceMemoryName": ("resource_memory_name", str),
    "resourceMemoryPercentageName": ("resource_memory_percentage_name", str),
    "resourceCoreName": ("resource_core_name", str),
    "resourcePriorityName": ("resource_priority_name", str),
    "overwriteEnv": ("overwrite_env", bool),
    "defaultMemory": ("default_memory", int),
    "defaultCores": ("default_cores", int),
    "defaultGPUNum": ("default_gpu_num", int),
    "preConfiguredDeviceMemory": ("pre_configured_device_memory", int),
    "memoryFactor": ("memory_factor", int),
    "deviceSplitCount": ("device_split_count", int),
    "deviceMemoryScaling": ("device_memory_scaling", (int, float)),
    "deviceCoreScaling": ("device_core_scaling", (int, float)),
    "enableNumaTopology": ("enable_numa_topology", bool),
    "gpuCorePolicy": ("gpu_core_policy", str),
    "libCudaLogLevel": ("lib_cuda_log_level", (str, int)),
    "runtimeClassName": ("runtime_class_name", str),
    "disableCoreLimit": ("disable_core_limit", bool),
    "migProfileAllowlist": ("mig_profile_allowlist", list),
}
# Keys HAMi's chart writes that hami accepts but does not use.
_NVIDIA_IGNORED = {"migStrategy", "migstrategy"}
_MIG_PROFILE = re.compile(r"[0-9]+g\.[0-9]+gb")
_TYPE_NAMES = {str: "a string", bool: "a boolean", int: "an integer", list: "a list"}


def _expected(t: type | tuple[type, ...]) -> str:
    if isinstance(t, tuple):
        return "a number" if float in t else " or ".join(_TYPE_NAMES.get(x, x.__name__) for x in t)
    return _TYPE_NAMES.get(t, t.__name__)


def _check_type(key: str, value: Any, want: type | tuple[type, ...], source: str) -> None:
    types = want if isinstance(want, tuple) else (want,)
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
    if not ok:
        raise ConfigError(key, source, value, _expected(want))


def parse_device_config(doc: Any, source: str, warn) -> NvidiaConfig:
    """Build NvidiaConfig from the parsed YAML of HAMi's device config; `warn(msg)` for unknown keys."""
    if doc is None:
        return NvidiaConfig()
    if not isinstance(doc, Mapping):
        raise ConfigError("(top level)", source, type(doc).__name__, "a mapping with an `nvidia:` section")
    section = doc.get("nvidia")
    if section is None:
        return NvidiaConfig()
    if not isinstance(section, Mapping):
        raise ConfigError("nvidia", source, section, "a mapping")
    values: dict[str, Any] = {}
    legacy_geometries: tuple[MigProfileAllow, ...] = ()
    for key, value in section.items():
        if key in _NVIDIA_IGNORED:
            continue
        if key == "knownMigGeometries":
            legacy_geometries = _parse_known_geometries(value, source)
            continue
        if key not in _NVIDIA_KEYS:
            hint = nearest_key_hint(key, [*_NVIDIA_KEYS, "knownMigGeometries"])
            warn(f"unknown key nvidia.{key} in {source}: ignored{hint}")
            continue
        attr, want = _NVIDIA_KEYS[key]
        if value is None:
            continue
        _check_type(f"nvidia.{key}", value, want, source)
        if attr == "mig_profile_allowlist":
            value = _parse_allowlist(value, source)
        elif attr == "lib_cuda_log_level":
            value = str(value)
        elif isinstance(want, tuple) and float in want:
            value = float(value)
        values[attr] = value
    if legacy_geometries and "mig_profile_allowlist" not in values:
        # HAMi <= v2.8 named the allowed MIG shapes per model; their profile names are the allowlist.
        values["mig_profile_allowlist"] = legacy_geometries
    cfg = NvidiaConfig(**values)
    _validate_nvidia(cfg, source)
    return cfg


def _parse_known_geometries(items: Any, source: str) -> tuple[MigProfileAllow, ...]:
    """Legacy `knownMigGeometries: [{models, allowedGeometries: [[{name, core, memory, count}]]}]`
    -> one allowlist entry per item (the profile names of all its geometries)."""
    if items is None:
        return ()
    if not isinstance(items, list):
        raise ConfigError("nvidia.knownMigGeometries", source, items, "a list")
    out = []
    for i, item in enumerate(items):
        key = f"nvidia.knownMigGeometries[{i}]"
        if not isinstance(item, Mapping):
            raise ConfigError(key, source, item, "a mapping")
        models = item.get("models") or []
        if not isinstance(models, list) or not models or not all(isinstance(m, str) for m in models):
            raise ConfigError(f"{key}.models", source, models, "a non-empty list of strings")
        geometries = item.get("allowedGeometries") or []
        if not isinstance(geometries, list) or not geometries:
            raise ConfigError(f"{key}.allowedGeometries", source, geometries, "a non-empty list of geometries")
        names: list[str] = []
        for j, geometry in enumerate(geometries):
            if not isinstance(geometry, list):
                raise ConfigError(f"{key}.allowedGeometries[{j}]", source, geometry, "a list of {name, memory, count}")
            for k, shape in enumerate(geometry):
                name = shape.get("name") if isinstance(shape, Mapping) else None
                if not isinstance(name, str) or not name:
                    raise ConfigError(f"{key}.allowedGeometries[{j}][{k}].name", source, name, "a MIG profile name")
                if name not in names:
                    names.append(name)
        out.append(MigProfileAllow(tuple(models), tuple(names)))
    return tuple(out)


def _parse_allowlist(items: list, source: str) -> tuple[MigProfileAllow, ...]:
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise ConfigError(f"nvidia.migProfileAllowlist[{i}]", source, item, "a mapping")
        models = item.get("models") or []
        profiles = item.get("profiles") or []
        for k, v in (("models", models), ("profiles", profiles)):
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise ConfigError(f"nvidia.migProfileAllowlist[{i}].{k}", source, v, "a list of strings")
        if not models or not profiles:  # HAMi ValidateMigProfileAllowlist
            raise ConfigError(f"nvidia.migProfileAllowlist[{i}]", source, item, "both models and profiles")
        for p in profiles:
            if not _MIG_PROFILE.fullmatch(p):
                raise ConfigError(f"nvidia.migProfileAllowlist[{i}].profiles", source, p,
                                  "MIG profile names shaped <N>g.<M>gb, e.g. 1g.10gb")
        out.append(MigProfileAllow(tuple(models), tuple(profiles)))
    return tuple(out)


def _validate_nvidia(cfg: NvidiaConfig, source: str) -> None:
    checks = [
        ("nvidia.deviceSplitCount", cfg.device_split_count, cfg.device_split_count >= 1, "an integer >= 1"),
        ("nvidia.memoryFactor", cfg.memory_factor, cfg.memory_factor >= 1, "an integer >= 1"),
        ("nvidia.defaultGPUNum", cfg.default_gpu_num, cfg.default_gpu_num >= 0, "an integer >= 0"),
        ("nvidia.defaultMemory", cfg.default_memory, cfg.default_memory >= 0, "an integer >= 0"),
        ("nvidia.defaultCores", cfg.default_cores, 0 <= cfg.default_cores <= 100, "an integer 0..100"),
        ("nvidia.deviceMemoryScaling", cfg.device_memory_scaling, cfg.device_memory_scaling > 0, "a number > 0"),
        ("nvidia.deviceCoreScaling", cfg.device_core_scaling, cfg.device_core_scaling > 0, "a number > 0"),
        (
            "nvidia.gpuCorePolicy",
            cfg.gpu_core_policy,
            cfg.gpu_core_policy in ("", "default", "force", "disable"),
            "one of default, force, disable",
        ),
    ]
    for key, value, ok, expected in checks:
        if not ok:
            raise ConfigError(key, source, value, expected)


# --------------------------------------------------------------------------- per-node config.json

_NODE_KEYS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "name": (str, "a string"),
    "operatingmode": (str, "one of hami-core, mig, mps"),
    "devicememoryscaling": ((int, float), "a number > 0"),
    "devicecorescaling": ((int, float), "a number > 0"),
    "devicesplitcount": (int, "an integer >= 1"),
    "preconfigureddevicememory": (int, "an integer >= 0"),
    "libcudaloglevel": ((str, int), "a string"),
    "enablenumatopology": (bool, "a boolean"),
    "migstrategy": (str, "one of none, single, mixed"),
    "filterdevices": (dict, "a mapping with uuid and index lists"),
    "enablegetpreferredallocation": (bool, "a boolean"),
    "allowdisablecontrol": (bool, "a boolean"),
}


def parse_node_configs(doc: Any, source: str, warn) -> tuple[NodeDeviceConfig, ...]:
    """Parse HAMi's per-node `config.json` (`{"nodeconfig": [...]}`)."""
    if doc is None:
        return ()
    if not isinstance(doc, Mapping):
        raise ConfigError("(top level)", source, type(doc).__name__, 'an object with a "nodeconfig" list')
    for key in doc:
        if key != "nodeconfig":
            warn(f"unknown key {key} in {source}: ignored{nearest_key_hint(key, ['nodeconfig'])}")
    entries = doc.get("nodeconfig") or []
    if not isinstance(entries, list):
        raise ConfigError("nodeconfig", source, entries, "a list")
    out = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise ConfigError(f"nodeconfig[{i}]", source, entry, "an object")
        values: dict[str, Any] = {}
        for key, value in entry.items():
            lkey = key.lower()
            if lkey not in _NODE_KEYS:
                hint = nearest_key_hint(lkey, _NODE_KEYS)
                warn(f"unknown key nodeconfig[{i}].{key} in {source}: ignored{hint}")
                continue
            if value is None:
                continue
            want, expected = _NODE_KEYS[lkey]
            types = want if isinstance(want, tuple) else (want,)
            if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
                raise ConfigError(f"nodeconfig[{i}].{key}", source, value, expected)
            if lkey == "filterdevices":
                value = _parse_filter(value, f"nodeconfig[{i}].{key}", source)
            elif lkey == "libcudaloglevel":
                value = str(value)
            elif lkey in ("devicememoryscaling", "devicecorescaling"):
                value = float(value)
                if value <= 0:
                    raise ConfigError(f"nodeconfig[{i}].{key}", source, value, expected)
            elif lkey == "devicesplitcount" and value < 1:
                raise ConfigError(f"nodeconfig[{i}].{key}", source, value, expected)
            elif lkey == "operatingmode" and value not in ("", "hami-core", "mig", "mps"):
                raise ConfigError(f"nodeconfig[{i}].{key}", source, value, expected)
            elif lkey == "migstrategy" and value not in ("", "none", "single", "mixed"):
                raise ConfigError(f"nodeconfig[{i}].{key}", source, value, expected)
            values[lkey] = value
        if not values.get("name"):
            raise ConfigError(f"nodeconfig[{i}].name", source, values.get("name"), "a non-empty node name or glob")
        out.append(NodeDeviceConfig(**values))
    return tuple(out)


def _parse_filter(value: Mapping, key: str, source: str) -> FilterDevices:
    uuids = value.get("uuid") or []
    idx = value.get("index") or []
    if not isinstance(uuids, list) or not all(isinstance(u, str) for u in uuids):
        raise ConfigError(f"{key}.uuid", source, uuids, "a list of strings")
    if not isinstance(idx, list) or not all(isinstance(u, int) and not isinstance(u, bool) for u in idx):
        raise ConfigError(f"{key}.index", source, idx, "a list of integers")
    return FilterDevices(tuple(uuids), tuple(idx))



def load_file(path: str) -> Any:
    import orjson
    import yaml

    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise ConfigError("(file)", path, path, f"a readable file ({exc.strerror})") from None
    try:
        if path.endswith(".json"):
            return orjson.loads(raw) if raw.strip() else None
        return yaml.safe_load(raw)
    except (yaml.YAMLError, orjson.JSONDecodeError) as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        raise ConfigError("(syntax)", path, str(exc).splitlines()[0][:200], f"valid YAML/JSON{where}") from None
    except RecursionError:  # PyYAML's parser recurses per nesting level
        raise ConfigError("(syntax)", path, "nested too deeply", "valid YAML/JSON") from None
