"""Which cluster and namespace `kubectl hami` talks to, chosen as kubectl chooses them.

The kubeconfig is --kubeconfig, else the first file of $KUBECONFIG, else ~/.kube/config. The context is
--context, else the file's current-context; the namespace is -n, else that context's namespace, else
"default". A named context is materialised as a private copy of the kubeconfig whose current-context
is that one, so hami's own client (and the doctor and what-if tools it runs) read it unchanged.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

import yaml


class KubeconfigError(ValueError):
    """The kubeconfig or the context asked for cannot be used (names the file and what is wrong)."""


@dataclass(frozen=True, slots=True)
class Target:
    kubeconfig: str  # the file hami's client loads
    context: str
    namespace: str
    temporary: bool = False  # kubeconfig is our private copy (a --context): remove it when done


def kubeconfig_path(flag: str | None, environ: dict[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    if flag:
        return flag
    for part in (env.get("KUBECONFIG") or "").split(os.pathsep):
        if part and os.path.isfile(part):
            return part
    return os.path.join(os.path.expanduser("~"), ".kube", "config")


def load(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            doc = yaml.safe_load(fh)
    except OSError as exc:
        raise KubeconfigError(f"kubeconfig {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise KubeconfigError(f"kubeconfig {path}: not YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(doc, dict):
        raise KubeconfigError(f"kubeconfig {path}: not a kubeconfig (a mapping with clusters, users, contexts)")
    return doc


def choose(doc: dict, path: str, context: str | None, namespace: str | None) -> tuple[str, str]:
    """(context name, namespace) as kubectl picks them; a context the file lacks is an error naming it."""
    name = context or str(doc.get("current-context") or "")
    contexts = {str(c.get("name")): c.get("context") or {} for c in doc.get("contexts") or [] if isinstance(c, dict)}
    if context and context not in contexts:
        known = ", ".join(sorted(contexts)) or "none"
        raise KubeconfigError(f"kubeconfig {path}: no context {context!r} (contexts: {known})")
    ns = namespace or str((contexts.get(name) or {}).get("namespace") or "") or "default"
    return name, ns


def resolve(kubeconfig: str | None, context: str | None, namespace: str | None) -> Target:
    path = kubeconfig_path(kubeconfig)
    doc = load(path)
    name, ns = choose(doc, path, context, namespace)
    if context and context != doc.get("current-context"):
        doc["current-context"] = context
        fd, path = tempfile.mkstemp(prefix="kubectl-hami-", suffix=".kubeconfig")  # 0600: it holds credentials
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            yaml.safe_dump(doc, fh)
        return Target(path, name, ns, temporary=True)
    return Target(path, name, ns)
