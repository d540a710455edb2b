"""Vendor behaviour is data: no code compares a vendor row's `hook` with a name; it reads the hook's traits
(hami.device.vendorhooks.HOOKS) or a step table keyed by hook (OWN_REQUESTS, OWN_EXTRAS, OWN_FITS,
OWN_MUTATIONS, OWN_ADVICE), and every key of those tables is a hook the vendor table accepts."""

from __future__ import annotations

import ast
from pathlib import Path

from hami.device import allocation, vendorrequest
from hami.device.vendorhooks import HOOKS
from hami.doctor import tree
from hami.scheduler.admission import webhook
from hami.scheduler.placement import fit

HAMI = Path(__file__).resolve().parents[2] / "hami"


def _is_hook(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "hook"


def _names_a_hook(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return True
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(_names_a_hook(e) for e in node.elts)


def hook_comparisons(source: str) -> list[int]:
    """Lines comparing `<x>.hook` with a string (or a collection of strings)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_hook(s) for s in sides) and any(_names_a_hook(s) for s in sides):
                out.append(node.lineno)
    return out


def test_no_code_compares_a_hook_with_its_name():
    found = [f"{p.relative_to(HAMI)}:{line}" for p in sorted(HAMI.rglob("*.py")) if "_pb" not in p.parts
             for line in hook_comparisons(p.read_text(encoding="utf-8"))]
    assert not found, "read HOOKS[row.hook] or a step table keyed by hook instead: " + ", ".join(found)


def test_the_check_sees_a_comparison():
    assert hook_comparisons('if v.hook == "ascend" or row.hook in ("amd", "enflame"):\n    pass\n') == [1, 1]
    assert hook_comparisons("if HOOKS[v.hook].nvidia:\n    pass\n") == []


def test_every_step_table_is_keyed_by_known_hooks():
    for table in (vendorrequest.OWN_REQUESTS, allocation.OWN_EXTRAS, fit.OWN_FITS, webhook.OWN_MUTATIONS,
                  tree.OWN_ADVICE):
        assert set(table) <= set(HOOKS), set(table) - set(HOOKS)
