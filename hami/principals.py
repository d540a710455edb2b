"""Who hami's components are to the API server (pure constants).

Placement annotations are written only by hami's own service accounts (hami.scheduler.admission.placementguard);
the default list holds hami's and HAMi v2.10's chart accounts in the namespaces they install to
(both charts name them `<fullname>-scheduler` and `<fullname>-device-plugin`, fullname `hami`). The
chart replaces it with its release's exact accounts. Matched exactly: a tenant can create a service
account of any name in its own namespace, so no wildcard is offered.

The embedded cluster (hami.sim) authenticates bearer tokens as a real one does: people get the
ordinary user `DEMO_USER`; hami's scheduler and node roles in the process their own accounts.
"""

from __future__ import annotations

SCHEDULER_ACCOUNT = "hami-scheduler"
NODE_ACCOUNT = "hami-device-plugin"
INSTALL_NAMESPACES = ("kube-system", "hami-system")


def service_account_user(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


DEFAULT_TRUSTED_WRITERS: tuple[str, ...] = tuple(
    service_account_user(ns, sa) for ns in INSTALL_NAMESPACES for sa in (SCHEDULER_ACCOUNT, NODE_ACCOUNT))

# The embedded cluster's principals (kube-system, where its scheduler pod lives).
EMBEDDED_SCHEDULER_USER = service_account_user("kube-system", SCHEDULER_ACCOUNT)
EMBEDDED_NODE_USER = service_account_user("kube-system", NODE_ACCOUNT)
DEMO_USER = "hami-demo-user"


def service_account_groups(user: str) -> list[str]:
    """The groups kube-apiserver gives a service account's token."""
    ns = user.split(":")[2] if user.count(":") >= 3 else ""
    return ["system:serviceaccounts", f"system:serviceaccounts:{ns}", "system:authenticated"]
