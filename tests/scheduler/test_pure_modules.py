"""The pure modules of the scheduler and of Kubernetes' rules stay pure, by the one list there is:
.importlinter's `pure-placement` and `pure-kubesched` contracts (whole packages:
hami.scheduler.placement, hami.kubesched) and its `pure-logic` contract (pure modules in packages
that also do I/O). Nothing here names a module; add a pure module to the contract and it is held
to these rules too.

On top of what import-linter checks (no I/O library, no I/O layer of hami), read from their source:
a pure module imports only the standard library (never asyncio, logging, sockets, subprocesses,
threads, os or time), `orjson` and `jsonpatch` (and `celpy`, CEL, in hami.kubesched), and of hami
only hami.device and the other modules the contracts call pure; and a pure module of the scheduler
holds no module-level mutable state (no module-level dict/list/set assignments; Kubernetes' rules
keep lookup tables at module level).
"""

from __future__ import annotations

import ast
import configparser
import importlib.util
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
CONTRACTS = ("pure-placement", "pure-kubesched", "pure-logic")
ALLOWED_THIRD_PARTY = {"jsonpatch", "orjson"}
ALLOWED_IN = {"hami.kubesched": {"celpy"}}  # CEL, for the DRA allocator's selectors
FORBIDDEN_STDLIB = {"asyncio", "logging", "socket", "subprocess", "threading", "os", "time"}
CHECKED = ("hami.scheduler", "hami.kubesched")  # held to the rules below; the contracts cover more


def _path(module: str) -> pathlib.Path:
    base = REPO / module.replace(".", "/")
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def contract_modules() -> list[str]:
    """Every module the pure contracts name, packages expanded to their modules."""
    cfg = configparser.ConfigParser()
    cfg.read(REPO / ".importlinter", encoding="utf-8")
    out: set[str] = set()
    for contract in CONTRACTS:
        for name in cfg[f"importlinter:contract:{contract}"]["source_modules"].split():
            base = REPO / name.replace(".", "/")
            if base.is_dir():
                for p in base.rglob("*.py"):
                    rel = p.relative_to(REPO).with_suffix("").parts
                    out.add(".".join(rel[:-1] if rel[-1] == "__init__" else rel))
            else:
                out.add(name)
    return sorted(out)


PURE = contract_modules()
HELD = [m for m in PURE if m.startswith(CHECKED)]


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # the parent is a module, not a package: `name` is an attribute
        return False


def _imports(tree: ast.Module, module: str) -> set[str]:
    package = module.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level and not node.module:  # from . import a, b
                out.update(f"{package}.{a.name}" for a in node.names)
            elif node.level:
                out.add(f"{package}.{node.module}")
            elif (node.module or "").startswith("hami.") and all(
                    _is_module(f"{node.module}.{a.name}") for a in node.names):
                out.update(f"{node.module}.{a.name}" for a in node.names)  # from hami.dra import claims
            else:
                out.add(node.module or "")
    return out


def test_the_contracts_name_the_pure_packages_and_modules_that_exist():
    assert {"hami.scheduler.placement.fit", "hami.kubesched.taints", "hami.scheduler.admission.webhook"} <= set(PURE)
    missing = [m for m in PURE if not _path(m).exists()]
    assert not missing, f".importlinter names modules that do not exist: {missing}"


@pytest.mark.parametrize("name", HELD)
def test_pure_module_imports(name):
    pure = set(PURE)
    third_party = ALLOWED_THIRD_PARTY | next((v for k, v in ALLOWED_IN.items() if name.startswith(k)), set())
    for mod in _imports(ast.parse(_path(name).read_text(encoding="utf-8")), name):
        top = mod.split(".")[0]
        if mod.startswith("hami."):
            assert mod.startswith("hami.device") or mod in pure, mod
        elif top in sys.stdlib_module_names:
            assert top not in FORBIDDEN_STDLIB, mod
        else:
            assert top in third_party, mod


@pytest.mark.parametrize("name", [m for m in HELD if m.startswith("hami.scheduler")])
def test_pure_module_has_no_module_level_mutable_state(name):
    tree = ast.parse(_path(name).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            assert not isinstance(node.value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp)), \
                f"{name}:{node.lineno}"
