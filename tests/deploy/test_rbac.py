"""Least-privilege RBAC: the chart grants each role exactly the API verbs its code uses.

Covers: deploy/rbac-calls.yaml (the machine-readable list of calls per role) against
- the chart's rules: ClusterRoles/Roles labelled hami.io/rbac-role=<role> grant exactly the listed
  (group, resource, verb) triples, with leader-election Leases only in a namespaced Role limited to
  the scheduler's own Lease for get/update;
- the code: every KubeClient call and Informer in a role's package (plus the hami.kube modules it
  imports) maps to a listed rule, and every listed rule is used by some call;
and that nothing in the chart grants wildcards, secrets (but the certgen hook Job's create and its
one TLS Secret), or binds the hami service accounts to any
role but its own and Kubernetes' kube-scheduler roles.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from tests.deploy.chart import ROOT, find, rendered

CALLS = yaml.safe_load((ROOT / "deploy" / "rbac-calls.yaml").read_text())
ROLES = tuple(CALLS["roles"])


def _triples(rules: list[dict]) -> set[tuple[str, str, str]]:
    out = set()
    for r in rules:
        for g in r.get("apiGroups", [""]):
            for res in r["resources"]:
                for v in r["verbs"]:
                    out.add((g, res, v))
    return out


def _listed(role: str) -> set[tuple[str, str, str]]:
    return {(CALLS["groups"][res], res, v) for res, verbs in CALLS["roles"][role]["rules"].items() for v in verbs}


def _chart_rules(docs, role: str) -> set[tuple[str, str, str]]:
    rules = []
    for kind in ("ClusterRole", "Role"):
        for d in find(docs, kind):
            if d["metadata"].get("labels", {}).get("hami.io/rbac-role") == role:
                rules += d["rules"]
    return _triples(rules)


@pytest.mark.parametrize("role", ROLES)
def test_chart_grants_exactly_the_listed_calls(role):
    docs = rendered("prod")  # leader election on: the Lease Role is rendered
    assert _chart_rules(docs, role) == _listed(role)


def test_without_leader_election_no_lease_access():
    docs = rendered("default")
    assert not any(res == "leases" for _, res, _ in _chart_rules(docs, "scheduler"))


def test_leases_are_namespaced_and_get_update_name_only_our_lease():
    docs = rendered("prod")
    for d in find(docs, "ClusterRole"):
        assert not any("leases" in r["resources"] for r in d["rules"]), d["metadata"]["name"]
    (role,) = [d for d in find(docs, "Role") if d["metadata"]["labels"].get("hami.io/rbac-role") == "scheduler"]
    for r in role["rules"]:
        if set(r["verbs"]) & {"get", "update"}:
            assert r["resourceNames"] == ["hami-scheduler"]


@pytest.mark.parametrize("which", ["default", "prod", "dev"])
def test_no_wildcards_secrets_or_foreign_bindings(which):
    docs = rendered(which)
    own = {d["metadata"]["name"] for k in ("ClusterRole", "Role") for d in find(docs, k)}
    allowed = own | set(CALLS["builtin_bindings"])
    for kind in ("ClusterRole", "Role"):
        for d in find(docs, kind):
            certgen = d["metadata"].get("labels", {}).get("hami.io/rbac-role") == "certgen"
            for r in d["rules"]:
                assert "*" not in r["verbs"] + r["resources"] + r.get("apiGroups", []), d["metadata"]["name"]
                if certgen and kind == "Role" and r["resources"] == ["secrets"]:
                    # the install-time certificate Job: create in its namespace, read only the TLS Secret
                    assert r["verbs"] == ["create"] or (r["verbs"] == ["get"]
                                                        and r["resourceNames"] == ["hami-scheduler-tls"])
                    continue
                if certgen:
                    assert r.get("resourceNames") == ["hami-scheduler-webhook"], r
                assert "secrets" not in r["resources"] and "configmaps" not in r["resources"]
                assert not set(r["verbs"]) & {"delete", "deletecollection", "escalate", "bind", "impersonate"}
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        for d in find(docs, kind):
            assert d["roleRef"]["name"] in allowed, f"{d['metadata']['name']} binds {d['roleRef']['name']}"
            assert d["roleRef"]["name"] != "cluster-admin"


# --------------------------------------------------------------------------- code


def _kube_imports(tree: ast.AST) -> set[str]:
    mods = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hami.kube."):
            mods.add(node.module)
        elif isinstance(node, ast.Import):
            mods |= {a.name for a in node.names if a.name.startswith("hami.kube.")}
    return mods


def _is_client(receiver: ast.AST) -> bool:
    """`client.get("nodes", n)` is an API call; `doc.get("nodes")` on a dict is not."""
    name = receiver.attr if isinstance(receiver, ast.Attribute) else getattr(receiver, "id", "")
    return name in ("self", "kube", "api") or name.endswith("client")


def _calls_in(tree: ast.AST, where: str) -> list[tuple[str, str, str]]:
    """(resource, verb, where) for each KubeClient call or Informer in a module."""
    found = []
    methods, generic = CALLS["client_methods"], CALLS["generic_verbs"]
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
        loc = f"{where}:{node.lineno}"
        if isinstance(fn, ast.Attribute) and name in methods:
            res, verb = methods[name]
            found.append((res, verb, loc))
        elif isinstance(fn, ast.Attribute) and name in generic and node.args and _is_client(fn.value):
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str) and first.value in CALLS["groups"]:
                found.append((first.value, generic[name], loc))
        elif name == "Informer":
            kinds = [a for a in node.args[1:2]] + [k.value for k in node.keywords if k.arg == "kind"]
            for k in kinds:
                assert isinstance(k, ast.Constant), f"{loc}: Informer kind must be a literal for the RBAC check"
                for verb in CALLS["informer_verbs"]:
                    found.append((k.value, verb, loc))
    return found


def _role_calls(role: str) -> dict[tuple[str, str], list[str]]:
    pkg = ROOT / CALLS["roles"][role]["package"]
    files = sorted(pkg.rglob("*.py"))
    assert files, f"{pkg} has no code"
    seen: set[Path] = set()
    queue = list(files)
    calls: dict[tuple[str, str], list[str]] = defaultdict(list)
    while queue:
        path = queue.pop()
        if path in seen or "_pb" in path.parts:
            continue
        seen.add(path)
        tree = ast.parse(path.read_text(), str(path))
        rel = str(path.relative_to(ROOT))
        if rel not in ("hami/kube/client.py", "hami/kube/informer.py"):  # definitions, not uses
            for res, verb, loc in _calls_in(tree, rel):
                calls[(res, verb)].append(loc)
        for mod in _kube_imports(tree):
            queue.append(ROOT / (mod.replace(".", "/") + ".py"))
    return calls


@pytest.mark.parametrize("role", ROLES)
def test_every_call_the_code_makes_is_granted(role):
    granted = {(res, v) for _, res, v in _listed(role)}
    calls = _role_calls(role)
    missing = {k: v for k, v in calls.items() if k not in granted}
    assert not missing, f"{role} calls APIs the chart does not grant: {missing}"


@pytest.mark.parametrize("role", ROLES)
def test_every_granted_verb_is_used_by_the_code(role):
    calls = _role_calls(role)
    unused = sorted((res, v) for _, res, v in _listed(role) if (res, v) not in calls)
    assert not unused, f"{role} is granted verbs its code never uses: {unused}"


def test_call_scanner_sees_helpers_generic_calls_and_informers():
    tree = ast.parse(
        "async def f(client):\n"
        "    await client.bind_pod('ns', 'p', 'u', 'n')\n"
        "    await client.replace('leases', 'x', {}, 'ns')\n"
        "    Informer(client, 'resourcequotas')\n"
        "    Informer(client, kind='nodes')\n"
    )
    got = {(r, v) for r, v, _ in _calls_in(tree, "t.py")}
    assert got == {("pods/binding", "create"), ("leases", "update"), ("resourcequotas", "list"),
                   ("resourcequotas", "watch"), ("nodes", "list"), ("nodes", "watch")}


def test_lease_names_in_rbac_match_what_each_scheduler_elects_on():
    docs = rendered("prod")
    roles = {d["metadata"]["labels"]["hami.io/rbac-role"]: d for d in find(docs, "Role")}
    named = {role: [n for r in d["rules"] for n in r.get("resourceNames", [])] for role, d in roles.items()}
    dep = find(docs, "Deployment")[0]["spec"]["template"]["spec"]
    hami = next(c for c in dep["containers"] if c["name"] == "hami-scheduler")["command"]
    assert f"--leader-elect-resource-name={named['scheduler'][0]}" in hami
    cm = next(d for d in find(docs, "ConfigMap") if d["metadata"]["name"] == "hami-scheduler-config")
    kube_cfg = yaml.safe_load(cm["data"]["config.yaml"])
    assert kube_cfg["leaderElection"]["resourceName"] == named["kube-scheduler"][0]
    assert named["scheduler"] != named["kube-scheduler"]
