"""The pure scheduler modules (policy, usage, fit, score, webhook, podfilter, gosort, migplace,
messages, vendorrules, vendorscore, nodeorder, extargs, changelog, nodescan, gpupreempt, preempt, pdb, busy,
lockhistory) stay pure.

Covers: by reading their source, that they import nothing but the standard library, `jsonpatch`,
`orjson` (a decoder, no I/O),
`hami.device` and each other, never asyncio, logging, a kube client or another role, and that
they hold no module-level mutable state (no module-level dict/list/set assignments).
"""

from __future__ import annotations

import ast
import pathlib
import sys

import pytest

PURE = ("policy", "usage", "fit", "score", "webhook", "podfilter", "gosort", "migplace", "messages", "vendorrules",
        "vendorscore", "nodeorder", "extargs", "changelog", "nodescan", "recheck", "gpupreempt", "preempt", "pdb",
        "busy", "lockhistory")
ROOT = pathlib.Path(__file__).resolve().parents[2] / "hami" / "scheduler"
ALLOWED_THIRD_PARTY = {"jsonpatch", "orjson"}
FORBIDDEN_STDLIB = {"asyncio", "logging", "socket", "subprocess", "threading", "os", "time"}


def _imports(tree: ast.Module) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                out.add("hami.scheduler." + (node.module or ""))
            else:
                out.add(node.module or "")
    return out


@pytest.mark.parametrize("name", PURE)
def test_pure_module_imports(name):
    tree = ast.parse((ROOT / f"{name}.py").read_text())
    for mod in _imports(tree):
        top = mod.split(".")[0]
        if mod.startswith("hami."):
            assert mod.startswith("hami.device") or mod in {f"hami.scheduler.{p}" for p in PURE}, mod
        elif top in sys.stdlib_module_names:
            assert top not in FORBIDDEN_STDLIB, mod
        else:
            assert top in ALLOWED_THIRD_PARTY, mod


@pytest.mark.parametrize("name", PURE)
def test_pure_module_has_no_module_level_mutable_state(name):
    tree = ast.parse((ROOT / f"{name}.py").read_text())
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            assert not isinstance(node.value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp)), \
                f"{name}.py:{node.lineno}"
