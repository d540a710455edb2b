"""Node Warning Events with HAMi's deduplication (pkg/util EmitNodeWarningEvent, its util_test cases):
no event yet -> one created with count 1; an event of the same node and reason seen within the window
-> that event's count and message updated, nothing created; one older than the window -> a new one;
an API error is reported as "failed", never raised. Over the embedded API server's real HTTP."""

from __future__ import annotations

from hami.config import KubeSettings
from hami.kube.client import KubeClient
from hami.kube.nodeevents import emit_node_warning, newest_matching

NODE = {"metadata": {"name": "test-node", "uid": "test-uid-1234"}}
REASON = "AsymmetricGPUP2PLink"
T0 = 1_800_000_000.0


async def _client(apiserver) -> KubeClient:
    return await KubeClient.from_settings(KubeSettings(kubeconfig=apiserver.kubeconfig, qps=1000, burst=1000,
                                                       timeout=2))


async def _events(client) -> list[dict]:
    return (await client.list("events", "default")).get("items") or []


async def test_first_event_is_created_then_bumped_within_the_window(apiserver):
    client = await _client(apiserver)
    try:
        assert await emit_node_warning(client, NODE, REASON, "first message", clock=lambda: T0) == "created"
        (ev,) = await _events(client)
        assert (ev["reason"], ev["message"], ev["count"], ev["type"]) == (REASON, "first message", 1, "Warning")
        assert ev["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "test-node", "uid": "test-uid-1234"}
        assert ev["metadata"]["name"].startswith("test-node-")
        got = await emit_node_warning(client, NODE, REASON, "updated message", clock=lambda: T0 + 1800)
        assert got == "updated"
        (ev,) = await _events(client)
        assert (ev["count"], ev["message"]) == (2, "updated message")
    finally:
        await client.close()


async def test_an_event_older_than_the_window_gives_a_new_one(apiserver):
    client = await _client(apiserver)
    try:
        await emit_node_warning(client, NODE, REASON, "old", clock=lambda: T0)
        assert await emit_node_warning(client, NODE, REASON, "new", clock=lambda: T0 + 7200) == "created"
        assert sorted(e["message"] for e in await _events(client)) == ["new", "old"]
        # Another reason or another node never bumps this one.
        other = {"metadata": {"name": "other-node", "uid": "u2"}}
        assert await emit_node_warning(client, other, REASON, "x", clock=lambda: T0 + 7201) == "created"
        assert await emit_node_warning(client, NODE, "OtherReason", "y", clock=lambda: T0 + 7202) == "created"
        assert len(await _events(client)) == 4
    finally:
        await client.close()


async def test_api_errors_are_reported_not_raised(apiserver):
    client = await _client(apiserver)
    await apiserver.stop()
    try:
        assert await emit_node_warning(client, NODE, REASON, "m", clock=lambda: T0) == "failed"
    finally:
        await client.close()


def test_newest_matching_rechecks_what_the_selector_should_have_narrowed():
    def ev(name, reason, ts, uid="test-uid-1234", kind="Node"):
        return {"metadata": {"name": name}, "reason": reason, "lastTimestamp": ts,
                "involvedObject": {"kind": kind, "name": "test-node", "uid": uid}}
    events = [ev("a", REASON, "2027-01-01T00:00:00Z"), ev("b", REASON, "2027-01-01T01:00:00Z"),
              ev("c", "Other", "2027-01-02T00:00:00Z"), ev("d", REASON, "2027-01-03T00:00:00Z", uid="old-uid"),
              ev("e", REASON, "2027-01-04T00:00:00Z", kind="Pod")]
    assert newest_matching(events, "test-node", "test-uid-1234", REASON)["metadata"]["name"] == "b"
    assert newest_matching([], "test-node", "", REASON) is None
