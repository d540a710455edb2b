"""Fixtures of the kube layer tests: `client`, a KubeClient connected to the embedded API server."""

import pytest

from tests.kube.helpers import client_for


@pytest.fixture
async def client(apiserver):
    c = await client_for(apiserver.kubeconfig)
    try:
        yield c
    finally:
        await c.close()
