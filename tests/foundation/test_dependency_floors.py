"""Dependency floors are true: pyproject's grpcio and protobuf floors are the versions the generated
device-plugin code (hami/agent/_pb) requires, constraints/floor.txt pins exactly those floors (the wheel
test installs them), and the generated code itself refuses anything older."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _floors() -> dict[str, str]:
    text = (ROOT / "pyproject.toml").read_text()
    return {m.group(1).lower(): m.group(2) for m in re.finditer(r'"([A-Za-z0-9_.-]+)>=([0-9.]+)', text)}


def _generated() -> dict[str, str]:
    pb = (ROOT / "hami" / "agent" / "_pb" / "api_pb2.py").read_text()
    m = re.search(r"ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.PUBLIC,\s*(\d+),\s*(\d+),\s*(\d+),", pb)
    grpc_text = (ROOT / "hami" / "agent" / "_pb" / "api_pb2_grpc.py").read_text()
    g = re.search(r"GRPC_GENERATED_VERSION = '([0-9.]+)'", grpc_text)
    assert m and g, "generated code no longer states the versions it needs"
    return {"protobuf": ".".join(m.groups()), "grpcio": g.group(1)}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


def test_pyproject_floors_are_what_the_generated_code_needs():
    floors, need = _floors(), _generated()
    for pkg, version in need.items():
        assert _version(floors[pkg]) == _version(version), f"{pkg}: pyproject floor {floors[pkg]}, generated code needs {version}"
    assert _version(floors["grpcio-tools"]) >= _version(need["grpcio"])  # regenerating never lowers them silently


def test_protobuf_range_stays_within_the_gencode_major():
    text = (ROOT / "pyproject.toml").read_text()
    major = _generated()["protobuf"].split(".")[0]
    assert f'"protobuf>={_generated()["protobuf"]},<{int(major) + 1}"' in text


def test_floor_constraints_pin_exactly_the_floors():
    lines = [ln.strip() for ln in (ROOT / "constraints" / "floor.txt").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    pins = dict(ln.split("==") for ln in lines)
    assert pins == _generated()
