"""The bus's operations on each store (SQLite, PostgreSQL): hypha's scenarios 11-13 and the
contract of ``docs/bus.md`` (FIFO, filters, retries, expiry, dead letters, bounds, scope)."""

from __future__ import annotations

import threading

import pytest

from hypha_celery.bus import (
    Bus,
    BusLimits,
    DeadLetterReason,
    Message,
    MessageAlreadyExists,
    MessageNotFound,
    MessageScopeMismatch,
    MessageStatus,
    MessageTooLarge,
    QueueFull,
    RetryPolicy,
    Scope,
    UnknownRecipient,
    agent,
    human,
    workflow,
)
from hypha_celery.errors import BusError, RunNotFound
from hypha_celery.store import EventStore
from tests.bus.support import Clock, message, new_run, scope, trace

BOB = human("bob")


def bus(store: EventStore, clock: Clock, **options: object) -> Bus:
    return Bus(store, clock=clock, **options)  # type: ignore[arg-type]


def test_routing_two_users_share_a_session_id(store: EventStore) -> None:
    """Scenario 11: a pull for user a gets only a's message; after the ack the queue is
    empty; user b still gets b's; a's run traces enqueued, delivered, acknowledged."""
    b = bus(store, Clock())
    a, other = Scope(scope().user_id, "shared"), Scope(scope().user_id, "shared")
    run_a = new_run(store, a)
    msg_a = b.publish(message(a, BOB, run_id=run_a))
    msg_b = b.publish(message(other, BOB))
    got = b.pull(BOB, a)
    assert got is not None and got.id == msg_a.id and got.status is MessageStatus.DELIVERED
    assert b.acknowledge(got.id).status is MessageStatus.ACKNOWLEDGED
    assert b.pull(BOB, a) is None
    got_b = b.pull(BOB, other)
    assert got_b is not None and got_b.id == msg_b.id
    assert trace(store, run_a) == ["message.enqueued", "message.delivered",
                                   "message.acknowledged"]


def test_expiry_dead_letters_on_pull_without_blocking(store: EventStore) -> None:
    """Scenario 12: the expired message is dead-lettered, the fresh one delivered."""
    clock = Clock()
    b = bus(store, clock)
    sc = scope()
    run = new_run(store, sc)
    old = b.publish(message(sc, BOB, run_id=run, expires_at=clock.now + 1))
    fresh = b.publish(message(sc, BOB, run_id=run))
    clock.advance(2)
    got = b.pull(BOB, sc)
    assert got is not None and got.id == fresh.id
    dead = b.get(old.id)
    assert dead is not None and dead.status is MessageStatus.DEAD_LETTERED
    assert dead.reason == DeadLetterReason.EXPIRED
    assert trace(store, run) == ["message.enqueued", "message.enqueued",
                                 "message.dead_lettered", "message.delivered"]


def test_retry_backoff_then_budget_dead_letter(store: EventStore) -> None:
    """Scenario 13: two attempts, 100 ms: retry, not before 100 ms, then dead letter."""
    clock = Clock()
    b = bus(store, clock, retry=RetryPolicy(max_delivery_attempts=2, initial_delay_ms=100))
    sc = scope()
    run = new_run(store, sc)
    sent = b.publish(message(sc, BOB, run_id=run))
    first = b.pull(BOB, sc)
    assert first is not None and first.attempt_count == 1
    again = b.fail(first.id, "busy", retry=True)
    assert again.status is MessageStatus.QUEUED and again.available_at == clock.now + 0.1
    assert b.pull(BOB, sc) is None
    clock.advance(0.099)
    assert b.pull(BOB, sc) is None
    clock.advance(0.001)
    second = b.pull(BOB, sc)
    assert second is not None and second.attempt_count == 2
    dead = b.fail(second.id, retry=True)
    assert dead.status is MessageStatus.DEAD_LETTERED
    assert dead.reason == DeadLetterReason.BUDGET_EXHAUSTED
    assert trace(store, run) == ["message.enqueued", "message.delivered", "message.retrying",
                                 "message.delivered", "message.dead_lettered"]
    assert sent.id == dead.id


def test_backoff_grows_exponentially_up_to_the_cap(store: EventStore) -> None:
    clock = Clock()
    policy = RetryPolicy(max_delivery_attempts=10, initial_delay_ms=250, max_delay_ms=1000)
    assert [policy.delay_ms(n) for n in range(1, 6)] == [250, 500, 1000, 1000, 1000]
    b = bus(store, clock, retry=policy)
    sc = scope()
    b.publish(message(sc, BOB))
    delays = []
    for _ in range(4):
        got = b.pull(BOB, sc)
        assert got is not None
        delays.append(round(b.fail(got.id, retry=True).available_at - clock.now, 3))
        clock.advance(delays[-1])
    assert delays == [0.25, 0.5, 1.0, 1.0]


def test_the_callers_retry_after_wins(store: EventStore) -> None:
    clock = Clock()
    b = bus(store, clock)
    sc = scope()
    b.publish(message(sc, BOB))
    got = b.pull(BOB, sc)
    assert got is not None
    assert b.fail(got.id, retry=True, retry_after_ms=5000).available_at == clock.now + 5


def test_a_direct_fail_leaves_the_queue_and_the_next_is_delivered(store: EventStore) -> None:
    b = bus(store, Clock())
    sc = scope()
    first = b.publish(message(sc, BOB))
    second = b.publish(message(sc, BOB))
    failed = b.fail(first.id, "bad input")
    assert (failed.status, failed.reason) == (MessageStatus.FAILED, "bad input")
    got = b.pull(BOB, sc)
    assert got is not None and got.id == second.id


def test_poison_is_dead_lettered(store: EventStore) -> None:
    b = bus(store, Clock())
    sc = scope()
    sent = b.publish(message(sc, BOB))
    dead = b.fail(sent.id, dead_letter=True)
    assert (dead.status, dead.reason) == (MessageStatus.DEAD_LETTERED, "poison")


def test_terminal_states_are_idempotent(store: EventStore) -> None:
    """ack -> fail -> ack: one acknowledged event; the message stays acknowledged."""
    b = bus(store, Clock())
    sc = scope()
    run = new_run(store, sc)
    sent = b.publish(message(sc, BOB, run_id=run))
    assert b.pull(BOB, sc) is not None
    assert b.acknowledge(sent.id).status is MessageStatus.ACKNOWLEDGED
    assert b.fail(sent.id, "late", retry=True).status is MessageStatus.ACKNOWLEDGED
    assert b.acknowledge(sent.id).status is MessageStatus.ACKNOWLEDGED
    assert trace(store, run) == ["message.enqueued", "message.delivered",
                                 "message.acknowledged"]


def test_fifo_per_queue_and_pull_many(store: EventStore) -> None:
    b = bus(store, Clock())
    sc = scope()
    sent = [b.publish(message(sc, BOB, payload=i)).id for i in range(12)]
    got = [m.id for m in b.pull_many(BOB, sc, 5)]
    got += [m.id for m in b.pull_many(BOB, sc, 100)]
    assert got == sent
    assert [m.status for m in b.acknowledge_many(got)] == [MessageStatus.ACKNOWLEDGED] * 12


def test_pull_filters_by_run_fsm_state_and_correlation(store: EventStore) -> None:
    b = bus(store, Clock())
    sc = scope()
    run_1, run_2 = new_run(store, sc), new_run(store, sc)
    b.publish(message(sc, BOB, run_id=run_1, fsm_state="Draft"))
    second = b.publish(message(sc, BOB, run_id=run_2, fsm_state="Draft"))
    third = b.publish(message(sc, BOB, run_id=run_2, fsm_state="Review",
                              correlation_id="c-1"))
    got = b.pull(BOB, sc, run_id=run_2)
    assert got is not None and got.id == second.id
    got = b.pull(BOB, sc, fsm_state="Review")
    assert got is not None and got.id == third.id
    assert b.pull(BOB, sc, correlation_id="c-2") is None


def test_a_message_not_yet_available_is_skipped(store: EventStore) -> None:
    clock = Clock()
    b = bus(store, clock)
    sc = scope()
    later = b.publish(message(sc, BOB, available_at=clock.now + 10))
    now = b.publish(message(sc, BOB))
    got = b.pull(BOB, sc)
    assert got is not None and got.id == now.id
    assert b.pull(BOB, sc) is None
    clock.advance(10)
    got = b.pull(BOB, sc)
    assert got is not None and got.id == later.id


def test_a_delivery_past_its_ack_deadline_is_delivered_again(store: EventStore) -> None:
    """A consumer that died between pull and ack: the message comes back, counted; past
    the budget it is dead-lettered."""
    clock = Clock()
    b = bus(store, clock, limits=BusLimits(ack_deadline_s=5),
            retry=RetryPolicy(max_delivery_attempts=2))
    sc = scope()
    sent = b.publish(message(sc, BOB))
    assert b.pull(BOB, sc) is not None
    clock.advance(4)
    assert b.pull(BOB, sc) is None
    clock.advance(1)
    again = b.pull(BOB, sc)
    assert again is not None and again.attempt_count == 2
    clock.advance(5)
    assert b.pull(BOB, sc) is None
    dead = b.get(sent.id)
    assert dead is not None and dead.reason == DeadLetterReason.BUDGET_EXHAUSTED


def test_scope_mismatch_with_the_run_and_the_caller(store: EventStore) -> None:
    b = bus(store, Clock())
    sc, other = scope(), scope()
    run = new_run(store, sc)
    with pytest.raises(MessageScopeMismatch) as info:
        b.publish(message(other, BOB, run_id=run))
    assert info.value.code == "MESSAGE_SCOPE_MISMATCH"
    sent = b.publish(message(sc, BOB, run_id=run))
    with pytest.raises(MessageScopeMismatch):
        b.acknowledge(sent.id, scope=other)
    with pytest.raises(MessageScopeMismatch):
        b.fail(sent.id, scope=Scope(sc.user_id, "another-session"))
    assert b.acknowledge(sent.id, scope=sc).status is MessageStatus.ACKNOWLEDGED
    assert trace(store, run) == ["message.enqueued", "message.acknowledged"]


def test_duplicate_id_unknown_message_run_and_recipient(store: EventStore) -> None:
    b = bus(store, Clock())
    sc = scope()
    b.publish(message(sc, BOB, id="m-1" + sc.user_id))
    with pytest.raises(MessageAlreadyExists) as info:
        b.publish(message(sc, human("carol"), id="m-1" + sc.user_id))
    assert info.value.code == "MESSAGE_ALREADY_EXISTS"
    with pytest.raises(MessageNotFound):
        b.acknowledge("nope" + sc.user_id)
    with pytest.raises(RunNotFound):
        b.publish(message(sc, BOB, run_id="no-such-run"))
    with pytest.raises(UnknownRecipient):
        b.publish(message(sc, agent("nobody-" + sc.user_id)))
    with pytest.raises(UnknownRecipient):
        b.publish(message(sc, workflow("no-such-run")))
    assert b.messages(recipient=human("carol"), scope=sc) == []


def test_byte_bound_and_queue_full_record_nothing(store: EventStore) -> None:
    limits = BusLimits(max_message_bytes=1_000, max_queue_messages=3, max_queue_bytes=10_000)
    b = bus(store, Clock(), limits=limits)
    sc = scope()
    with pytest.raises(MessageTooLarge) as big:
        b.publish(message(sc, BOB, payload="x" * 1_000))
    assert isinstance(big.value, BusError) and big.value.limit == 1_000
    sent = [b.publish(message(sc, BOB)) for _ in range(3)]
    with pytest.raises(QueueFull) as full:
        b.publish(message(sc, BOB))
    assert full.value.info["limit"] == "count" and full.value.info["pending_count"] == 3
    b.acknowledge(sent[0].id)  # settled: room again
    b.publish(message(sc, BOB))
    by_bytes = bus(store, Clock(), limits=BusLimits(max_queue_bytes=1_200))
    other = scope()
    by_bytes.publish(message(other, BOB, payload="y" * 400))
    with pytest.raises(QueueFull) as full:
        by_bytes.publish(message(other, BOB, payload="y" * 400))
    assert full.value.info["limit"] == "bytes"
    assert len(b.messages(recipient=BOB, scope=sc)) == 4


def test_a_message_validates_its_fields() -> None:
    with pytest.raises(ValueError):
        Message.model_validate({"type": "t", "user_id": "u:1", "session_id": "s",
                                "from": {"kind": "human", "id": "u"},
                                "to": {"kind": "agent", "id": "a"}})
    with pytest.raises(ValueError):
        Message.model_validate({"type": "t", "user_id": "u", "session_id": "s",
                                "from": {"kind": "robot", "id": "u"},
                                "to": {"kind": "agent", "id": "a"}})
    msg = Message.model_validate({"type": "t", "user_id": "u", "session_id": "s",
                                  "from": {"kind": "human", "id": "u"},
                                  "to": {"kind": "agent", "id": "a"},
                                  "route": [{"kind": "agent", "id": "b"}]})
    assert msg.queue == "u:s:agent:a" and msg.reply_target == (agent("b"), ())


def test_a_message_with_no_run_writes_no_event(store: EventStore) -> None:
    b = bus(store, Clock())
    sc = scope()
    sent = b.publish(message(sc, BOB))
    assert b.pull(BOB, sc) is not None
    done = b.acknowledge(sent.id)
    assert done.status is MessageStatus.ACKNOWLEDGED and done.run_id is None


def test_concurrent_pullers_never_get_the_same_message(store: EventStore) -> None:
    b = bus(store, Clock())
    sc = scope()
    sent = {b.publish(message(sc, BOB, payload=i)).id for i in range(120)}
    got: list[str] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def puller() -> None:
        try:
            while True:
                batch = b.pull_many(BOB, sc, 3)
                if not batch:
                    return
                with lock:
                    got.extend(m.id for m in batch)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=puller) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert len(got) == len(set(got)) == 120 and set(got) == sent


def test_publish_many_is_all_or_nothing(store: EventStore) -> None:
    b = bus(store, Clock(), limits=BusLimits(max_queue_messages=5))
    sc = scope()
    run = new_run(store, sc)
    sent = b.publish_many([message(sc, BOB, run_id=run, payload=i) for i in range(3)])
    assert [m.payload for m in sent] == [0, 1, 2]
    with pytest.raises(QueueFull):
        b.publish_many([message(sc, BOB) for _ in range(3)])
    with pytest.raises(MessageAlreadyExists):
        b.publish_many([message(sc, human("carol")), message(sc, BOB, id=sent[0].id)])
    twice = message(sc, human("carol"))
    with pytest.raises(MessageAlreadyExists):
        b.publish_many([twice, twice])
    assert b.messages(recipient=human("carol"), scope=sc) == []
    assert [m.id for m in b.pull_many(BOB, sc, 10)] == [m.id for m in sent]
    assert trace(store, run) == ["message.enqueued"] * 3 + ["message.delivered"] * 3


def test_the_sweep_deletes_settled_messages_past_retention(store: EventStore) -> None:
    """Settled messages are kept ``retention_s`` after their last change, then the
    supervisor's sweep deletes them (``prune_batch`` at a time); live ones stay."""
    from hypha_celery.bus._agents import sweep

    clock = Clock()
    b = bus(store, clock, limits=BusLimits(retention_s=60.0, prune_batch=2))
    sc = scope()
    done = [b.publish(message(sc, BOB)) for _ in range(3)]
    for _ in done:
        got = b.pull(BOB, sc)
        assert got is not None
        b.acknowledge(got.id)
    live = b.publish(message(sc, BOB))
    woken: list[Message] = []
    clock.advance(30.0)
    sweep(b, lambda m, d: woken.append(m), clock(), 5.0, 5.0, 100)
    assert all(b.get(m.id) is not None for m in done)  # within retention
    clock.advance(31.0)
    # (PostgreSQL is the session's database: older tests' settled messages go too)
    for _ in range(1000):
        sweep(b, lambda m, d: woken.append(m), clock(), 5.0, 5.0, 100)
        if all(b.get(m.id) is None for m in done):
            break
    assert all(b.get(m.id) is None for m in done)
    assert b.get(live.id) is not None  # a live message is never pruned
    assert b.prune(clock(), 2) <= 2  # a batch is bounded


def test_bad_retention_is_refused() -> None:
    with pytest.raises(ValueError, match="retention_s"):
        BusLimits(retention_s=0)
    with pytest.raises(ValueError, match="prune_batch"):
        BusLimits(prune_batch=0)


def test_extend_keeps_a_delivery_with_its_consumer(store: EventStore) -> None:
    clock = Clock()
    b = bus(store, clock, limits=BusLimits(ack_deadline_s=5))
    sc = scope()
    sent = b.publish(message(sc, BOB))
    assert b.pull(BOB, sc) is not None
    assert b.extend(sent.id, 100) is True
    clock.advance(50)  # past the ack deadline, within the extension
    assert b.pull(BOB, sc) is None
    clock.advance(51)
    again = b.pull(BOB, sc)
    assert again is not None and again.attempt_count == 2
    b.acknowledge(sent.id)
    assert b.extend(sent.id, 100) is False  # settled: nothing to extend
    with pytest.raises(ValueError):
        b.extend(sent.id, 0)


def test_a_direct_consumer_takes_a_message_to_an_idle_queue(store: EventStore) -> None:
    """Delivered by the publish (one transaction: enqueued, delivered), handed after the
    commit, no wake-up; a message behind one in flight is queued and woken (FIFO); a
    consumer that raises leaves it delivered until the ack deadline."""
    clock = Clock()
    handed: list[Message] = []
    woken: list[str] = []
    b = bus(store, clock, limits=BusLimits(ack_deadline_s=5),
            wake=lambda msg, delay: woken.append(msg.id))
    b.direct[BOB.kind] = handed.append
    sc = scope()
    run_id = new_run(store, sc)
    first = b.publish(message(sc, BOB, run_id=run_id))
    assert (first.status, first.attempt_count) == (MessageStatus.DELIVERED, 1)
    assert [m.id for m in handed] == [first.id] and woken == []
    assert trace(store, run_id) == ["message.enqueued", "message.delivered"]
    second = b.publish(message(sc, BOB, run_id=run_id))
    assert second.status is MessageStatus.QUEUED and woken == [second.id]
    b.acknowledge(first.id)
    assert b.pull(BOB, sc) is not None  # the queued one, by the woken consumer
    b.acknowledge(second.id)
    later = b.publish(message(sc, BOB, available_at=clock() + 10))
    assert later.status is MessageStatus.QUEUED  # not available yet: woken with a delay
    clock.advance(10)
    assert b.pull(BOB, sc) is not None
    b.acknowledge(later.id)

    def broken(msg: Message) -> None:
        raise RuntimeError("consumer down")

    b.direct[BOB.kind] = broken
    lost = b.publish(message(sc, BOB))
    assert lost.status is MessageStatus.DELIVERED
    assert b.pull(BOB, sc) is None
    clock.advance(5)
    again = b.pull(BOB, sc)
    assert again is not None and again.id == lost.id and again.attempt_count == 2


def test_answer_publishes_the_reply_and_acknowledges_in_one_transaction(
        store: EventStore) -> None:
    """Both or neither; the queues' live counters move together; a settled message
    stays as it is; a refused reply acknowledges nothing."""
    clock = Clock()
    woken: list[tuple[str, MessageStatus]] = []
    b = bus(store, clock, limits=BusLimits(max_queue_messages=1))
    sc = scope()
    run_id = new_run(store, sc)
    ask = b.publish(message(sc, BOB, run_id=run_id))
    assert b.pull(BOB, sc) is not None
    b.wakers.append(lambda msg, delay: woken.append((msg.id, b.get(ask.id).status)))  # type: ignore[union-attr]
    reply = b.answer(ask.id, message(sc, human("ann"), run_id=run_id, causation_id=ask.id))
    assert reply.status is MessageStatus.QUEUED
    assert b.get(ask.id).status is MessageStatus.ACKNOWLEDGED  # type: ignore[union-attr]
    assert woken == [(reply.id, MessageStatus.ACKNOWLEDGED)]  # woken after the commit
    assert trace(store, run_id) == ["message.enqueued", "message.delivered",
                                    "message.enqueued", "message.acknowledged"]
    assert b.publish(message(sc, BOB)) is not None  # BOB's queue was counted out
    # a refused reply (ann's queue is full) leaves the message delivered
    again = b.pull(BOB, sc)
    assert again is not None
    with pytest.raises(QueueFull):
        b.answer(again.id, message(sc, human("ann")))
    assert b.get(again.id).status is MessageStatus.DELIVERED  # type: ignore[union-attr]
    with pytest.raises(MessageNotFound):
        b.answer("nope", message(sc, human("zoe")))
    late = b.answer(ask.id, message(sc, human("zoe")))  # settled: it stays acknowledged
    assert late.status is MessageStatus.QUEUED
    assert b.get(ask.id).status is MessageStatus.ACKNOWLEDGED  # type: ignore[union-attr]
