"""One ApiError shape for the client and the embedded server (hami.apierror).

Covers: `hami.kube.client.ApiError` and `hami.sim.apiserver.store.ApiError` are the same class with one
constructor; `code` is `status`; `status_object()` builds the Status from the fields, or returns
the one received; the error the store raises for a missing pod reaches a KubeClient over real
HTTP with the same status, reason, message and details.
"""

from __future__ import annotations

import pytest

from hami import apierror
from hami.kube import client as kube_client
from hami.sim.apiserver import store as sim_store


def test_client_and_server_share_one_class():
    assert kube_client.ApiError is sim_store.ApiError is apierror.ApiError


def test_fields_code_and_status_object():
    err = apierror.ApiError(404, "NotFound", 'pods "p" not found', {"name": "p", "kind": "pods"})
    assert (err.status, err.code, err.reason, err.message) == (404, 404, "NotFound", 'pods "p" not found')
    assert err.not_found and not err.conflict and not err.gone
    assert str(err) == '404 NotFound: pods "p" not found'
    assert err.body == {}
    assert err.status_object() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'pods "p" not found', "reason": "NotFound", "code": 404,
        "details": {"name": "p", "kind": "pods"},
    }
    received = {"kind": "Status", "code": 409, "reason": "Conflict", "message": "m", "extra": 1}
    assert apierror.ApiError(409, "Conflict", "m", body=received).status_object() is received
    assert str(apierror.ApiError(0, "TimeoutError")) == "0 TimeoutError"


async def test_store_error_reaches_the_client_unchanged(apiserver, client):
    with pytest.raises(sim_store.ApiError) as direct:
        apiserver.store.get("pods", "default", "missing")
    with pytest.raises(kube_client.ApiError) as remote:
        await client.get_pod("default", "missing")
    sent, got = direct.value, remote.value
    assert (got.status, got.reason, got.message) == (sent.status, sent.reason, sent.message)
    assert got.body == sent.status_object()
