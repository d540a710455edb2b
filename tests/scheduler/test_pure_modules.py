"""The pure scheduler modules (policy, usage, fit, score, webhook, podfilter, gosort, migplace,
messages, vendorrules, vendorscore, nodeorder, extargs, changelog, nodescan, gpupreempt, preempt, pdb, busy,
spread, lockhistory, patchbuild, quantitylimits, placementguard) stay pure, and so do the two modules outside the package the
webhook may use (hami.dra.claims, hami.principals).

Covers: by reading their source, that they import nothing but the standard library, `jsonpatch`,
`orjson` (a decoder, no I/O),
`hami.device`, `hami.principals` (constants) and each other, never asyncio, logging, a kube client or another role, and that
they hold no module-level mutable state (no module-level dict/list/set assignments).
"""

from __future__ import annotations

import ast
import importlib.util
import pathlib
import sys

import pytest

PURE = ("placement.policy", "placement.usage", "placement.fit", "placement.score", "admission.webhook",
        "placement.podfilter", "placement.gosort", "placement.migplace", "placement.messages",
        "placement.vendorrules", "placement.vendorscore", "placement.nodeorder", "extender.extargs",
        "cache.changelog", "extender.nodescan", "placement.recheck", "preemption.plan", "preemption.victims",
        "placement.busy", "placement.spread", "cache.lockhistory", "admission.patchbuild",
        "admission.quantitylimits", "admission.placementguard")
# Kubernetes' own rules the pure modules may use (hami.kubesched, pure by the import-linter contract).
KUBESCHED = {"hami.kubesched.pdb", "hami.kubesched.taints", "hami.kubesched.nodeaffinity"}
# Modules the webhook may use that this file does not hold to the rule above: the DRA claim translation
# (hami.dra.claims, stdlib + hami.device, checked below), the table of hami's own writers
# (hami.principals, constants, checked below; placementguard names them too) and placementguard.
PURE_ELSEWHERE = {"hami.dra.claims", "hami.principals"}
WEBHOOK_MAY_USE = PURE_ELSEWHERE | {"hami.scheduler.admission.placementguard"}
ROOT = pathlib.Path(__file__).resolve().parents[2] / "hami" / "scheduler"
ALLOWED_THIRD_PARTY = {"jsonpatch", "orjson"}
FORBIDDEN_STDLIB = {"asyncio", "logging", "socket", "subprocess", "threading", "os", "time"}


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # the parent is a module, not a package: `name` is an attribute
        return False


def _imports(tree: ast.Module) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level and not node.module:  # from . import a, b
                out.update("hami.scheduler." + a.name for a in node.names)
            elif node.level:
                out.add("hami.scheduler." + node.module)
            elif (node.module or "").startswith("hami.") and all(
                    _is_module(f"{node.module}.{a.name}") for a in node.names):
                out.update(f"{node.module}.{a.name}" for a in node.names)  # from hami.dra import claims
            else:
                out.add(node.module or "")
    return out


@pytest.mark.parametrize("name", PURE)
def test_pure_module_imports(name):
    tree = ast.parse((ROOT / f"{name.replace('.', '/')}.py").read_text())
    for mod in _imports(tree):
        top = mod.split(".")[0]
        if mod.startswith("hami."):
            assert mod.startswith("hami.device") or mod in {f"hami.scheduler.{p}" for p in PURE} | KUBESCHED \
                or (name in ("admission.webhook", "admission.placementguard") and mod in WEBHOOK_MAY_USE), mod
        elif top in sys.stdlib_module_names:
            assert top not in FORBIDDEN_STDLIB, mod
        else:
            assert top in ALLOWED_THIRD_PARTY, mod


@pytest.mark.parametrize("name", PURE)
def test_pure_module_has_no_module_level_mutable_state(name):
    tree = ast.parse((ROOT / f"{name.replace('.', '/')}.py").read_text())
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            assert not isinstance(node.value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp)), \
                f"{name}:{node.lineno}"


@pytest.mark.parametrize("module", sorted(PURE_ELSEWHERE))
def test_pure_modules_elsewhere_import_only_the_standard_library_and_hami_device(module):
    path = ROOT.parents[0] / (module.split(".", 1)[1].replace(".", "/") + ".py")
    for mod in _imports(ast.parse(path.read_text())):
        top = mod.split(".")[0]
        if mod.startswith("hami."):
            assert mod.startswith("hami.device"), mod
        else:
            assert top in sys.stdlib_module_names and top not in FORBIDDEN_STDLIB, mod

