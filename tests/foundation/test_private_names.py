"""No private name (`_x`) of a hami or test module is used by another module (STYLE: one owner per
name), tests included: a test reads what it tests through its public face.

Read from the source (ast), for every module under hami/ and tests/:

* `from hami.a.b import _x` (or `from tests.a import _x`) in any module but hami.a.b itself;
* `m._x` where `m` is a hami or test module imported by the reader (`import hami.a.b as m`,
  `from hami.a import b`);
* `obj._x` (or `getattr(obj, "_x")`, `monkeypatch.setattr(obj, "_x", ...)`) on anything but
  `self`/`cls`, when this module defines no `_x` of its own (a function, class, assignment,
  attribute it sets, argument or slot name) and another module does: that is reaching into another
  module's object (`locker._fresh`).

A name defined in both modules is taken as the reader's own (the check cannot know `obj`'s type); a
test module's own private helpers are its own. Private names of other libraries (aiohttp's,
asyncio's) are not hami's and are not judged here, nor are the generated protobuf modules (`_pb`).
Test helper modules named `_x.py` (tests/dra/_objects.py) and conftest.py are shared by design: their
public names are imported freely. `CHECKED` are the packages where no such crossing may remain, as
reader or as owner: all of hami and tests.
"""

from __future__ import annotations

import ast
from pathlib import Path

import hami

ROOT = Path(hami.__file__).parent
TESTS = ROOT.parent / "tests"
CHECKED = ("hami", "tests")
SETTERS = ("getattr", "hasattr", "setattr", "delattr")  # builtins, and monkeypatch's setattr/delattr
# Public API that starts with an underscore so as not to clash with field names (collections.namedtuple's)
NAMEDTUPLE_API = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})


def _private(name: str) -> bool:
    return (name.startswith("_") and not (name.startswith("__") and name.endswith("__"))
            and name not in NAMEDTUPLE_API)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _defined(tree: ast.AST) -> set[str]:
    """Every name a module binds or sets anywhere, its slots included (its own private names among them)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__"
                                                  for t in node.targets):
            names.update(c.value for c in ast.walk(node.value)
                         if isinstance(c, ast.Constant) and isinstance(c.value, str))
    return names


def _modules() -> dict[str, ast.Module]:
    return {_module_name(p): ast.parse(p.read_text(encoding="utf-8"), str(p))
            for base in (ROOT, TESTS) for p in base.rglob("*.py") if "_pb" not in p.parts}


def _named_attr(node: ast.AST) -> tuple[str, ast.AST] | None:
    """(the private name, the object) of `getattr(obj, "_x")` or `monkeypatch.setattr(obj, "_x", ...)`."""
    if not (isinstance(node, ast.Call) and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str) and _private(node.args[1].value)):
        return None
    func = node.func
    if (isinstance(func, ast.Name) and func.id in SETTERS) or (isinstance(func, ast.Attribute)
                                                                and func.attr in SETTERS[2:]):
        return node.args[1].value, node.args[0]
    return None


def _in(module: str) -> bool:
    return any(module == c or module.startswith(c + ".") for c in CHECKED)


def crossings(modules: dict[str, ast.Module]) -> list[str]:
    defined = {m: _defined(t) for m, t in modules.items()}
    owners: dict[str, set[str]] = {}
    for m, names in defined.items():
        for n in names:
            if _private(n):
                owners.setdefault(n, set()).add(m)
    out = []
    for reader, tree in modules.items():
        own = defined[reader]
        aliases: dict[str, str] = {}  # local name -> hami module it names
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith(("hami.", "tests.")) and a.asname:
                        aliases[a.asname] = a.name
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith(CHECKED):
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    if full in modules:
                        aliases[a.asname or a.name] = full
                    elif _private(a.name) and node.module != reader and (_in(reader) or _in(node.module)):
                        out.append(f"{reader}:{node.lineno}: from {node.module} import {a.name}")
        for node in ast.walk(tree):
            attr = value = None
            if isinstance(node, ast.Attribute) and _private(node.attr):
                attr, value = node.attr, node.value
            elif (named := _named_attr(node)) is not None:
                attr, value = named
            if attr is None or (isinstance(value, ast.Name) and value.id in ("self", "cls")):
                continue
            if isinstance(value, ast.Name) and value.id in aliases:
                owner = aliases[value.id]
                if owner != reader and (_in(reader) or _in(owner)):
                    out.append(f"{reader}:{node.lineno}: {value.id}.{attr} (private to {owner})")
                continue
            if attr in own:
                continue
            others = {o for o in owners.get(attr, ()) if o != reader}
            if others and (_in(reader) or any(_in(o) for o in others)):
                owner = ", ".join(sorted(others))
                out.append(f"{reader}:{node.lineno}: {ast.unparse(value)}.{attr} (private to {owner})")
    return out


def test_no_private_name_crosses_a_module_boundary():
    found = crossings(_modules())
    assert not found, "private names used across modules (make them public API or move the logic):\n" + \
        "\n".join(found)


def test_the_check_finds_each_kind_of_crossing():
    """The three shapes, on made-up modules: each is found, and a module's own private use is not."""
    modules = {
        "hami.scheduler.a": ast.parse("_LIMIT = 3\nclass Locker:\n    def __init__(self):\n        self._fresh = {}\n"),
        "hami.scheduler.b": ast.parse(
            "from hami.scheduler.a import _LIMIT\n"
            "from hami.scheduler import a\n"
            "def f(locker):\n    return a._LIMIT, locker._fresh, getattr(locker, '_fresh')\n"),
        "hami.scheduler.c": ast.parse("class C:\n    def __init__(self):\n        self._fresh = 1\n"
                                      "def g(other):\n    return other._fresh\n"),
    }
    found = crossings(modules)
    assert any("from hami.scheduler.a import _LIMIT" in f for f in found), found
    assert any("a._LIMIT (private to hami.scheduler.a)" in f for f in found), found
    assert sum("locker._fresh" in f for f in found) == 2, found
    assert not any(f.startswith("hami.scheduler.c:") or f.startswith("hami.scheduler.a:") for f in found), found


def test_the_check_reads_tests_as_readers_and_owners():
    """A test importing another test module's private helper, or patching a hami module's private name, is a
    crossing; a test's own private helpers and a namedtuple's `_replace` are not."""
    modules = {
        "hami.scheduler.a": ast.parse("def _decode(args):\n    return args\n"),
        "tests.e2e.base": ast.parse("def _wait(cond):\n    return cond\n"),
        "tests.e2e.user": ast.parse(
            "from tests.e2e.base import _wait\n"
            "from hami.scheduler import a\n"
            "def _own():\n    return 1\n"
            "def test_x(monkeypatch, shape):\n"
            "    monkeypatch.setattr(a, '_decode', lambda args: args)\n"
            "    return _own(), _wait(True), shape._replace(x=1)\n"),
    }
    found = crossings(modules)
    assert any("from tests.e2e.base import _wait" in f for f in found), found
    assert any("a._decode (private to hami.scheduler.a)" in f for f in found), found
    assert not any("_own" in f or "_replace" in f for f in found), found
