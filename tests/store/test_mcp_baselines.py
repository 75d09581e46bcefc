"""The MCP gateway's baselines in the store (SQLite, PostgreSQL): a contract observed is
quarantined until approved, stays approved while its hash does, is quarantined again when
it changes; an approval names who and, given a hash, only that contract."""

from __future__ import annotations

import uuid

from hypha_celery.store import MAX_BASELINES, EventStore


def test_observe_then_approve_then_drift(store: EventStore) -> None:
    server = f"s_{uuid.uuid4().hex[:8]}"
    first = store.observe_mcp_capability(server, "t", "h1", {"name": "t"}, "read",
                                         approve=False)
    assert (first.status, first.approved_hash, first.decided_by) == ("quarantined", None, None)
    assert store.approve_mcp_capability(server, "t", "bob", capability_hash="other") is None
    approved = store.approve_mcp_capability(server, "t", "bob", capability_hash="h1")
    assert approved is not None and approved.status == "approved"
    assert (approved.approved_hash, approved.decided_by) == ("h1", "bob")
    again = store.observe_mcp_capability(server, "t", "h1", {"name": "t"}, "read",
                                         approve=False)
    assert again.status == "approved" and again.first_seen == first.first_seen
    changed = store.observe_mcp_capability(server, "t", "h2", {"name": "t", "v": 2}, "write",
                                           approve=False)
    assert (changed.status, changed.capability_hash, changed.approved_hash) == (
        "quarantined", "h2", "h1")
    assert changed.contract == {"name": "t", "v": 2} and changed.side_effect == "write"
    auto = store.observe_mcp_capability(server, "t", "h3", {"name": "t"}, "read",
                                        approve=True, by="drift-policy:accept")
    assert (auto.status, auto.approved_hash, auto.decided_by) == (
        "approved", "h3", "drift-policy:accept")


def test_listing_by_server_and_status_is_bounded(store: EventStore) -> None:
    server = f"s_{uuid.uuid4().hex[:8]}"
    for name in ("b", "a", "c"):
        store.observe_mcp_capability(server, name, "h", {}, "read", approve=name == "a")
    assert [r.capability for r in store.mcp_baselines(server)] == ["a", "b", "c"]
    assert [r.capability for r in store.mcp_baselines(server, status="quarantined")] == [
        "b", "c"]
    assert len(store.mcp_baselines(server, limit=1)) == 1
    assert len(store.mcp_baselines(server, limit=10 * MAX_BASELINES)) == 3
    assert store.mcp_baseline(server, "zzz") is None
