"""Agents on the bus (embedded runtime: memory broker, in-process worker): a message to an
agent is a prompt, its answer a reply on the bus; routes chain agents; a workflow hands work
to an agent and resumes on its reply."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hypha_celery import Hypha
from hypha_celery.backends import BackendEvent, MockBackend
from hypha_celery.beat import supervisor
from hypha_celery.bus import (
    FAILED_TYPE,
    REPLY_TYPE,
    Message,
    MessageStatus,
    Scope,
    UnknownRecipient,
    agent,
    deliver,
    human,
    workflow,
)
from hypha_celery.runtime.config import BusSettings, Settings
from hypha_celery.store import agents as agent_rows
from tests.bus.agents import Stage
from tests.bus.support import settled
from tests.bus.worker_app import register_article
from tests.runtime.support import embedded

SCOPE = Scope("alice", "s1")
ALICE = human("alice")


def says(text: str) -> list[BackendEvent]:
    return [BackendEvent.new("text", {"text": text}), BackendEvent.new("result", {})]


def to_agent(name: str, payload: object, **fields: object) -> Message:
    return Message.model_validate({"type": "task", "user_id": "alice", "session_id": "s1",
                                   "from": ALICE, "to": agent(name), "payload": payload,
                                   **fields})


@pytest.fixture
def hypha(tmp_path: Path) -> Iterator[Hypha]:
    h = embedded(f"sqlite:///{tmp_path / 'bus.db'}")
    try:
        yield h
    finally:
        h.close()


def test_an_agent_answers_a_bus_message_on_the_bus(hypha: Hypha) -> None:
    hypha.agents.start(Stage, name="writer", backend=MockBackend, scripts=[says("a poem")])
    sent = hypha.bus.publish(to_agent("writer", "write a poem"))
    reply = hypha.bus.receive(ALICE, SCOPE, timeout=20)
    assert reply is not None and reply.payload == "a poem" and reply.type == REPLY_TYPE
    assert (reply.from_, reply.causation_id, reply.correlation_id) == (
        agent("writer"), sent.id, sent.id)
    done = settled(hypha.bus, sent.id)
    assert done is not None and done.status is MessageStatus.ACKNOWLEDGED
    assert done.attempt_count == 1


def test_a_poison_message_is_dead_lettered_and_the_sender_told(hypha: Hypha) -> None:
    hypha.agents.start(Stage, name="writer", backend=MockBackend, scripts=[says("ok")])
    bad = hypha.bus.publish(to_agent("writer", {"not": "a prompt"}))
    good = hypha.bus.publish(to_agent("writer", {"prompt": "fine"}))
    first = hypha.bus.receive(ALICE, SCOPE, timeout=20)
    second = hypha.bus.receive(ALICE, SCOPE, timeout=20)
    assert first is not None and second is not None
    by_type = {first.type: first, second.type: second}
    assert by_type[FAILED_TYPE].payload == {"agent": "writer", "message_id": bad.id,
                                            "reason": "poison"}
    assert by_type[REPLY_TYPE].causation_id == good.id


def test_a_failed_turn_is_retried_then_dead_lettered(hypha: Hypha) -> None:
    hypha.bus.retry = type(hypha.bus.retry)(max_delivery_attempts=2, initial_delay_ms=10)
    hypha.agents.start(Stage, name="flaky", backend=MockBackend,
                       scripts=[MockBackend.error("boom"), MockBackend.error("boom")])
    sent = hypha.bus.publish(to_agent("flaky", "try"))
    notice = hypha.bus.receive(ALICE, SCOPE, timeout=20)
    assert notice is not None and notice.type == FAILED_TYPE
    dead = hypha.bus.get(sent.id)
    assert dead is not None and dead.status is MessageStatus.DEAD_LETTERED
    assert dead.attempt_count == 2


def test_a_message_to_an_agent_that_is_not_running_is_refused(hypha: Hypha) -> None:
    with pytest.raises(UnknownRecipient):
        hypha.bus.publish(to_agent("ghost", "hello"))


def test_a_route_chains_agents(hypha: Hypha) -> None:
    """GenAgent's pipeline on the bus: each stage's answer is the next stage's prompt."""
    for name, text in (("research", "facts"), ("draft", "draft of facts"),
                       ("edit", "final text")):
        hypha.agents.start(Stage, name=name, backend=MockBackend, scripts=[says(text)])
    sent = hypha.bus.publish(to_agent("research", "topic", route=[agent("draft"),
                                                                   agent("edit"), ALICE],
                                      correlation_id="job-1"))
    final = hypha.bus.receive(ALICE, SCOPE, correlation_id="job-1", timeout=30)
    assert final is not None and final.payload == "final text"
    assert final.from_ == agent("edit")
    chain = [hypha.bus.get(final.causation_id or "")]
    assert chain[0] is not None and chain[0].from_ == agent("draft")
    prompts = [MockBackend.history(agent_rows.read(hypha.store, n)["session"])  # type: ignore[index]
               for n in ("research", "draft", "edit")]
    assert prompts == [["topic"], ["facts"], ["draft of facts"]]
    assert settled(hypha.bus, sent.id).status is MessageStatus.ACKNOWLEDGED  # type: ignore[union-attr]


def _kinds(hypha: Hypha, run_id: str, prefix: str) -> list[str]:
    return [e.type for e in hypha.store.events(run_id) if e.type.startswith(prefix)]


def _parked(hypha: Hypha, run_id: str, timeout: float = 10) -> dict[str, object]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        awaited = hypha.store.get(run_id).get("awaiting_message")
        if awaited:
            return dict(awaited)
        time.sleep(0.02)
    raise AssertionError(f"run {run_id} never parked: {_kinds(hypha, run_id, '')}")


def test_a_workflow_hands_work_to_an_agent_and_resumes_on_its_reply(hypha: Hypha) -> None:
    """The hand-off parks the run (no worker waits: run.suspended) while the
    agent's turn runs; the reply's publish resumes it (run.released, action message: the
    node's next attempt finds the reply)."""
    hypha.agents.start(Stage, name="writer", backend=MockBackend,
                       scripts=[MockBackend.gate("turn", says("a draft"))])
    register_article(hypha)
    run = hypha.start("article", {"topic": "bees"}, user_id="alice", session_id="s1")
    assert MockBackend.wait_blocked("turn", timeout=10) is not None
    parked = _parked(hypha, run.id)
    assert parked["attempt"] == 1 and parked["node_id"] == "write"
    assert hypha.store.get(run.id)["status"] == "running"
    MockBackend.release("turn")
    assert run.wait(60)["published"] == "A DRAFT"
    runs = _kinds(hypha, run.id, "run.")
    assert runs.index("run.suspended") < runs.index("run.released")
    released = [e for e in hypha.store.events(run.id) if e.type == "run.released"]
    assert [(e.payload["action"], e.payload["attempt"]) for e in released] == [("message", 2)]
    starts = [e.payload["attempt"] for e in hypha.store.events(run.id)
              if e.type == "node.execution.started" and e.payload["node_id"] == "write"]
    assert starts == [1, 2]  # the parked attempt and the one that found the reply
    for m in hypha.bus.messages(run_id=run.id):  # the completion task acknowledges the
        settled(hypha.bus, m.id)                 # hand-off after its reply resumed the run
    kinds = _kinds(hypha, run.id, "message.")
    # each message enqueued, delivered, acknowledged in that order; the reply's delivery
    # and the request's acknowledgement race (two processes)
    assert sorted(kinds) == sorted(["message.enqueued", "message.delivered"] * 2
                                   + ["message.acknowledged"] * 2)
    assert kinds[:2] == ["message.enqueued", "message.delivered"]
    handoff, reply = hypha.bus.messages(run_id=run.id)
    assert (handoff.fsm_state, handoff.to, reply.to) == ("Write", agent("writer"),
                                                         workflow(run.id))


def test_a_lost_resume_is_the_supervisors_and_a_wait_times_out(hypha: Hypha) -> None:
    """A reply published with no resume (its process died after the commit): the sweep
    resumes the run. A wait past the hand-off's timeout: the sweep times the node out."""
    hypha.agents.start(Stage, name="writer", backend=MockBackend,
                       scripts=[MockBackend.gate("lost", says("late draft"))])
    register_article(hypha, timeout=120)
    run = hypha.start("article", {"topic": "bees"}, user_id="alice", session_id="s1")
    assert MockBackend.wait_blocked("lost", timeout=10) is not None
    parked = _parked(hypha, run.id)
    hypha.bus.wakers.clear()  # the reply's publish resumes nothing
    MockBackend.release("lost")
    reply = _queued_reply(hypha, run.id)
    assert reply is not None and "awaiting_message" in hypha.store.get(run.id)
    decisions = supervisor.sweep(hypha._rt, now=time.time() + 60)
    assert {"run_id": run.id, "action": "resumed", "execution_id": parked["execution_id"],
            "why": "message_waiting"} in decisions
    assert run.wait(60)["published"] == "LATE DRAFT"

    hypha.agents.stop("writer")
    hypha.agents.start(Stage, name="writer", backend=MockBackend,
                       scripts=[MockBackend.gate("never", says("too late"))])
    slow = hypha.start("article", {"topic": "wasps"}, user_id="alice", session_id="s2")
    waiting = _parked(hypha, slow.id)
    early = supervisor.sweep(hypha._rt, now=time.time() + 60)  # within its timeout
    assert not [d for d in early if d.get("run_id") == slow.id]
    decisions = supervisor.sweep(hypha._rt, now=float(waiting["until"]) + 1)  # type: ignore[arg-type]
    assert any(d.get("run_id") == slow.id and d["action"] == "timed_out" for d in decisions)
    failed = [e for e in hypha.store.events(slow.id) if e.type == "node.execution.failed"]
    assert failed and failed[-1].payload["error"]["type"] == "NodeTimeout"
    MockBackend.release("never")


def _queued_reply(hypha: Hypha, run_id: str, timeout: float = 20) -> Message | None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for msg in hypha.bus.messages(run_id=run_id):
            if msg.to == workflow(run_id) and msg.status is MessageStatus.QUEUED:
                return msg
        time.sleep(0.02)
    return None


def test_a_message_to_an_idle_agent_is_delivered_by_its_publish(hypha: Hypha) -> None:
    """No wake-up hop: publish writes it delivered (enqueued and delivered in one
    transaction) and hands it to the agent; a second message while the first is in
    flight queues behind it (FIFO) and is delivered by the wake-up task."""
    hypha.agents.start(Stage, name="writer", backend=MockBackend,
                       scripts=[MockBackend.gate("slow", says("one")), says("two")])
    first = hypha.bus.publish(to_agent("writer", "a"))
    assert (first.status, first.attempt_count) == (MessageStatus.DELIVERED, 1)
    assert MockBackend.wait_blocked("slow", timeout=10) is not None  # the turn runs
    second = hypha.bus.publish(to_agent("writer", "b"))
    assert second.status is MessageStatus.QUEUED  # the first is in flight: no overtaking
    MockBackend.release("slow")
    replies = [hypha.bus.receive(ALICE, SCOPE, timeout=20) for _ in range(2)]
    # the turns ran in order; their completion tasks may publish the replies either way
    answered = {r.causation_id: r.payload for r in replies if r is not None}
    assert answered == {first.id: "one", second.id: "two"}
    for sent in (first, second):
        done = settled(hypha.bus, sent.id)
        assert done is not None and done.status is MessageStatus.ACKNOWLEDGED
        assert done.attempt_count == 1


def test_a_turn_longer_than_the_ack_deadline_is_not_handed_twice(tmp_path: Path) -> None:
    """Once the agent accepted the prompt the message is held (``agent_hold_s``), not
    leased for the ack deadline: a pull past the deadline does not take it again."""
    h = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                       store_url=f"sqlite:///{tmp_path / 'hold.db'}", embedded=True,
                       bus=BusSettings(ack_deadline_s=0.5)))
    try:
        h.agents.start(Stage, name="slow", backend=MockBackend,
                       scripts=[MockBackend.gate("long", says("done"))])
        sent = h.bus.publish(to_agent("slow", "think hard"))
        assert MockBackend.wait_blocked("long", timeout=10) is not None
        time.sleep(1.0)  # twice the ack deadline
        assert deliver(h.bus, h.agents, SCOPE, "slow") == 0  # held: not re-taken
        MockBackend.release("long")
        reply = h.bus.receive(ALICE, SCOPE, timeout=20)
        assert reply is not None and reply.payload == "done"
        done = settled(h.bus, sent.id)
        assert done is not None and done.status is MessageStatus.ACKNOWLEDGED
        assert done.attempt_count == 1
        assert MockBackend.history(agent_rows.read(h.store, "slow")["session"]) == [  # type: ignore[index]
            "think hard"]
    finally:
        h.close()


def test_a_reply_to_a_workflow_cancelled_while_it_waited_is_dead_lettered(
        hypha: Hypha) -> None:
    hypha.agents.start(Stage, name="writer", backend=MockBackend,
                       scripts=[MockBackend.gate("orphan", says("unread draft"))])
    register_article(hypha)
    run = hypha.start("article", {"topic": "bees"}, user_id="alice", session_id="s1")
    assert MockBackend.wait_blocked("orphan", timeout=10) is not None
    _parked(hypha, run.id)
    assert hypha.cancel(run.id)
    assert "awaiting_message" not in hypha.store.get(run.id)
    MockBackend.release("orphan")
    end = time.monotonic() + 20
    while True:
        replies = [m for m in hypha.bus.messages(run_id=run.id) if m.to == workflow(run.id)]
        if replies and replies[0].status.terminal:
            break
        assert time.monotonic() < end, replies
        time.sleep(0.02)
    assert (replies[0].status, replies[0].reason) == (MessageStatus.DEAD_LETTERED,
                                                      "recipient_ended")
    assert run.status().status == "cancelled"
