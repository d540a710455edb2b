"""Dependency floors are true: pyproject's grpcio and protobuf floors are the versions the generated
device-plugin code (hami/agent/_pb) requires; constraints/floor.txt pins every runtime dependency at
exactly its pyproject floor (scripts/test-floors installs those and runs the tests, .ci/run runs it), so no
floor is declared that CI does not install."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _floors() -> dict[str, str]:
    text = (ROOT / "pyproject.toml").read_text()
    return {m.group(1).lower(): m.group(2) for m in re.finditer(r'"([A-Za-z0-9_.-]+)>=([0-9.]+)', text)}


def _generated() -> dict[str, str]:
    pb = (ROOT / "hami" / "agent" / "_pb" / "api_pb2.py").read_text()
    m = re.search(r"ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.PUBLIC,\s*(\d+),\s*(\d+),\s*(\d+),",
                  pb)
    grpc_text = (ROOT / "hami" / "agent" / "_pb" / "api_pb2_grpc.py").read_text()
    g = re.search(r"GRPC_GENERATED_VERSION = '([0-9.]+)'", grpc_text)
    assert m and g, "generated code no longer states the versions it needs"
    return {"protobuf": ".".join(m.groups()), "grpcio": g.group(1)}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


def test_pyproject_floors_are_what_the_generated_code_needs():
    floors, need = _floors(), _generated()
    for pkg, version in need.items():
        assert _version(floors[pkg]) == _version(version), \
            f"{pkg}: pyproject floor {floors[pkg]}, generated code needs {version}"
    assert _version(floors["grpcio-tools"]) >= _version(need["grpcio"])  # regenerating never lowers them silently


def test_protobuf_range_stays_within_the_gencode_major():
    text = (ROOT / "pyproject.toml").read_text()
    major = _generated()["protobuf"].split(".")[0]
    assert f'"protobuf>={_generated()["protobuf"]},<{int(major) + 1}"' in text


def _padded(text: str) -> tuple[int, ...]:
    return (_version(text) + (0, 0, 0))[:3]


def _pins() -> dict[str, str]:
    lines = [ln.strip() for ln in (ROOT / "constraints" / "floor.txt").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    return dict(ln.split("==") for ln in lines)


def _runtime_floors() -> dict[str, str]:
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    found = {}
    for dep in deps:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9.]+),<[0-9.]+", dep)
        assert m, f"runtime dependency {dep!r} is not declared as >=floor,<ceiling"
        found[m.group(1).lower()] = m.group(2)
    return found


def test_floor_constraints_pin_every_runtime_dependency_at_its_floor():
    pins, floors = _pins(), _runtime_floors()
    assert set(pins) == set(floors), "constraints/floor.txt and pyproject's dependencies name different packages"
    for pkg, floor in floors.items():
        # the floor is written as the released version CI installs (no `>=31` standing for 31.1.0)
        assert _padded(pins[pkg]) == _padded(floor), \
            f"{pkg}: floor.txt pins {pins[pkg]}, pyproject declares >={floor}"


def test_generated_code_floors_are_pinned():
    pins = _pins()
    assert {pkg: pins[pkg] for pkg in _generated()} == _generated()


def test_ci_runs_the_floor_tests_before_the_gate():
    run = (ROOT / ".ci" / "run").read_text().splitlines()
    assert "scripts/test-floors" in run and run.index("scripts/test-floors") < run.index("exec scripts/test")
    script = (ROOT / "scripts" / "test-floors").read_text()
    assert "-c constraints/floor.txt" in script
