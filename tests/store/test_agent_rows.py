"""The agents' table statements and the lane FIFO, on every store backend (PostgreSQL
takes plain driver SQL for them: the same results are expected)."""

from __future__ import annotations

import uuid

from hypha_celery.store import EventStore
from hypha_celery.store import agents as table


def _agent(store: EventStore) -> tuple[str, str]:
    name, incarnation = f"a-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    assert table.create(store, name, incarnation, "K", "idle", {"n": 0}, {"s": [1]})
    return name, incarnation


def test_an_agent_row_is_locked_written_and_its_events_appended(store: EventStore) -> None:
    name, inc = _agent(store)
    with store.transaction() as tx:
        row = table.lock(tx, name)
        assert row is not None and not row.session.parsed  # read as text, parsed on use
        assert (row.doc, row.session.value(), row.seq) == ({"n": 0}, {"s": [1]}, 1)
        assert (row.control, row.heartbeat_at) == (None, None)
        table.append(tx, [table.AgentEvent(inc, 2, "agent.turn.started", 1.0, {"ref": "r"})])
        table.update(tx, name, inc, {"n": 1, "text": "é \"q\""}, "idle", 3, control="stop",
                     beat=True, events=[table.AgentEvent(inc, 3, "agent.turn.completed", 2.0,
                                                         {"ref": "r"})])
    with store.transaction() as tx:
        row = table.lock(tx, name)
        assert row is not None and row.doc == {"n": 1, "text": "é \"q\""} and row.seq == 3
        assert row.session.value() == {"s": [1]} and row.control == "stop" and row.heartbeat_at
        table.update(tx, name, inc, {"n": 2}, "idle", 3, session=None, control=None)
    with store.transaction() as tx:
        row = table.lock(tx, name)
        assert row is not None and row.session.value() is None and row.control is None
        assert table.lock(tx, "nobody") is None
    kinds = [(e.seq, e.kind, e.data) for e in store.events(inc)]
    assert kinds == [(1, "agent.started", {"name": name, "kind": "K"}),
                     (2, "agent.turn.started", {"ref": "r"}),
                     (3, "agent.turn.completed", {"ref": "r"})]


def test_results_keep_the_newest_within_count_and_bytes(store: EventStore) -> None:
    _, inc = _agent(store)
    for i, size in enumerate([10, 10, 10, 30]):
        with store.transaction() as tx:
            table.put_result(tx, inc, f"r{i}", {"i": i}, size, max_count=3, max_bytes=45)
    with store.transaction() as tx:  # an ask's outcome: kept outside the bounds
        table.put_result(tx, inc, "ask", {"i": 9}, 999, max_count=3, max_bytes=45,
                         internal=True)
    with store.transaction() as tx:  # too big alone: not kept
        table.put_result(tx, inc, "big", {"i": 8}, 46, max_count=3, max_bytes=45)
    kept = {ref for ref in ("r0", "r1", "r2", "r3", "ask", "big")
            if table.take_result(store, ref) is not None}
    assert kept == {"r2", "r3", "ask"}  # newest first: 30 + 10 = 40; 10 more passes 45


def test_stopped_turns_and_heartbeats_of_many_agents_in_one_go(store: EventStore) -> None:
    owned = [_agent(store) for _ in range(3)]
    with store.transaction() as tx:
        table.update(tx, *owned[0], {"n": 0}, "idle", 1, control="ref-1")
    gone = ("gone", uuid.uuid4().hex)
    replaced = (owned[2][0], uuid.uuid4().hex)  # the name lives on, another incarnation
    turns = [(*owned[0], "ref-1"), (*owned[1], "ref-2"), (*owned[2], "ref-3"),
             (*gone, "ref-4"), (*replaced, "ref-5")]
    assert table.stopped(store, turns) == {turns[0], turns[3], turns[4]}
    assert table.stopped(store, [(*owned[0], "ref-other")]) == set()
    assert table.stopped(store, []) == set()
    table.heartbeats(store, [*owned[:2], gone])
    with store.transaction() as tx:
        beats = [table.lock(tx, name) for name, _ in owned]
    assert [b is not None and b.heartbeat_at is not None for b in beats] == [True, True, False]


def test_a_lane_pops_oldest_first_and_keeps_its_counts(store: EventStore) -> None:
    from hypha_celery import lanes

    lane = f"a:{uuid.uuid4().hex}:p"
    with store.transaction() as tx:
        assert lanes.pop(tx, lane) is None
        for ref, size in (("one", 3), ("two", 5)):
            assert lanes.push(tx, lane, ref, size, {"ref": ref}) is None
    with store.transaction() as tx:
        first = lanes.pop(tx, lane)
        assert first is not None and (first.ref, first.bytes, first.payload) == (
            "one", 3, {"ref": "one"})
        state = lanes.lock(tx, lane)
        assert (state.pending_count, state.pending_bytes) == (1, 5)
    with store.transaction() as tx:
        second, empty = lanes.pop(tx, lane), lanes.pop(tx, lane)
        state = lanes.lock(tx, lane)
    assert second is not None and second.ref == "two" and empty is None
    assert (state.pending_count, state.pending_bytes) == (0, 0)


def test_a_result_put_again_replaces_the_old_one(store: EventStore) -> None:
    _, inc = _agent(store)
    for i, ref in enumerate(["r0", "r1", "r2", "r1"]):
        with store.transaction() as tx:
            table.put_result(tx, inc, ref, {"i": i}, 10, max_count=3, max_bytes=30)
    taken = {ref: table.take_result(store, ref) for ref in ("r0", "r1", "r2")}
    assert taken["r0"] is not None and taken["r2"] is not None
    assert taken["r1"] is not None and taken["r1"]["i"] == 3

