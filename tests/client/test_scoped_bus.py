"""A scoped client's bus (``hypha.as_user(u).bus``): cross-user probes on both store
backends. Another user's message answers as one nobody has; another user's scope or
user id is ``MessageScopeMismatch``; a user's agent endpoints name its own agents."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from hypha_celery import Finish, Graph, Hypha, NotPermitted, Principal, RunNotFound
from hypha_celery.agents import Agent, NoReply
from hypha_celery.backends import MockBackend
from hypha_celery.bus import (
    Message,
    MessageNotFound,
    MessageScopeMismatch,
    MessageStatus,
    Scope,
    UnknownRecipient,
    agent,
    human,
)
from tests.client.test_scoped import same_refusal
from tests.runtime.support import embedded


class Quiet(Agent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": []}, {}

    def handle_response(self, ref: str, response: Any, state: Any) -> NoReply:
        return NoReply(state)


@pytest.fixture
def hypha(store_url: str) -> Iterator[Hypha]:
    h = embedded(store_url)
    yield h
    h.close()


@pytest.fixture
def users() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"alice-{tag}", f"bob-{tag}"


def note(user: str, to: Any = None, **fields: Any) -> Message:
    return Message.model_validate({"type": "note", "user_id": user, "session_id": "s1",
                                   "from": human(user), "to": to or human(user),
                                   "payload": "a prompt's text", **fields})


def test_a_user_publishes_as_itself_only(hypha: Hypha, users: tuple[str, str]) -> None:
    a, b = users
    alice, bob = hypha.as_user(a).bus, hypha.as_user(b).bus
    mine = alice.publish(note(a))
    assert mine.user_id == a
    with pytest.raises(MessageScopeMismatch):
        bob.publish(note(a))
    with pytest.raises(MessageScopeMismatch):  # all or none
        bob.publish_many([note(b), note(a)])
    assert hypha.bus.search(user_id=b) == []


def test_another_users_message_is_one_nobody_has(hypha: Hypha,
                                                  users: tuple[str, str]) -> None:
    a, b = users
    alice, bob = hypha.as_user(a).bus, hypha.as_user(b).bus
    theirs = alice.publish(note(a)).id
    missing = uuid.uuid4().hex
    assert bob.get(theirs) is None and alice.get(theirs) is not None
    assert bob.search() == [] and bob.messages() == []
    assert [m.id for m in alice.search()] == [theirs]
    for action in (bob.acknowledge, lambda i: bob.fail(i, "x", dead_letter=True),
                   bob.redrive, lambda i: bob.acknowledge_many([i])):
        same_refusal(action, theirs, missing)
    with pytest.raises(MessageNotFound):
        bob.fail(theirs, "x")
    assert hypha.bus.get(theirs).status is MessageStatus.QUEUED  # untouched


def test_another_users_scope_is_refused(hypha: Hypha, users: tuple[str, str]) -> None:
    a, b = users
    alice, bob = hypha.as_user(a).bus, hypha.as_user(b).bus
    alice.publish(note(a))
    for probe in (lambda: bob.pull(human(a), Scope(a, "s1")),
                  lambda: bob.pull_many(human(a), Scope(a, "s1"), 5),
                  lambda: bob.receive(human(a), Scope(a, "s1"), timeout=0),
                  lambda: bob.messages(recipient=human(a), scope=Scope(a, "s1")),
                  lambda: bob.search(user_id=a)):
        with pytest.raises(MessageScopeMismatch):
            probe()
    got = alice.pull(human(a), Scope(a, "s1"))
    assert got is not None and alice.acknowledge(got.id).status is MessageStatus.ACKNOWLEDGED


def test_another_users_run_is_one_that_does_not_exist(hypha: Hypha,
                                                      users: tuple[str, str]) -> None:
    a, b = users
    hypha.register(Graph(id="one", nodes={"n": lambda state, inp: {}},
                         decision_policy=lambda ctx: Finish(1)))
    run = hypha.as_user(a).start("one", session_id="s1")
    run.wait(30)
    bob = hypha.as_user(b).bus
    for field in ("run_id", "to"):
        def send(rid: str, field: str = field) -> Message:
            extra = {"run_id": rid} if field == "run_id" else {
                "to": {"kind": "workflow", "id": rid}}
            return bob.publish(note(b, **extra))
        same_refusal(send, run.id, "0" * 32)
    with pytest.raises(RunNotFound):
        send(run.id, "run_id")
    with pytest.raises(UnknownRecipient):
        send(run.id, "to")
    mine = hypha.as_user(a).bus.publish(note(a, run_id=run.id))
    assert [m.id for m in hypha.as_user(a).bus.messages(run_id=run.id)] == [mine.id]
    assert hypha.as_user(b).bus.messages(run_id=run.id) == []


def test_agent_endpoints_name_the_users_own_agents(hypha: Hypha,
                                                   users: tuple[str, str]) -> None:
    a, b = users
    hypha.as_user(a).agents.start(Quiet, name="helper", backend=MockBackend)
    alice, bob = hypha.as_user(a).bus, hypha.as_user(b).bus
    sent = alice.publish(note(a, to=agent("helper")))
    assert sent.to == agent("helper")  # as the user names it
    assert hypha.bus.get(sent.id).to == agent(f"{a}/helper")  # as stored
    assert alice.get(sent.id).to == agent("helper")
    with pytest.raises(UnknownRecipient):  # bob has no helper; alice's is not his
        bob.publish(note(b, to=agent("helper")))
    with pytest.raises(UnknownRecipient):
        bob.publish(note(b, to=agent(f"{a}/helper")))


def test_a_user_redrives_its_own_dead_letters(hypha: Hypha, users: tuple[str, str]) -> None:
    a, _ = users
    alice = hypha.as_user(a).bus
    sent = alice.publish(note(a))
    alice.pull(human(a), Scope(a, "s1"))
    alice.fail(sent.id, "poison", dead_letter=True)
    copy = alice.redrive(sent.id)
    assert copy.status is MessageStatus.QUEUED and copy.metadata["redriven_from"] == sent.id
    assert alice.redrive(sent.id).id == copy.id  # once: the same copy
    assert [m.id for m in alice.search(statuses=[MessageStatus.DEAD_LETTERED])] == [sent.id]


def test_pruning_is_an_admins_and_an_admin_sees_every_user(hypha: Hypha,
                                                            users: tuple[str, str]) -> None:
    a, b = users
    with pytest.raises(NotPermitted):
        hypha.as_user(a).bus.prune(0.0)
    hypha.as_user(a).bus.publish(note(a))
    hypha.as_user(b).bus.publish(note(b))
    ops = hypha.as_principal(Principal.admin("ops")).bus
    assert ops is hypha.bus
    assert {m.user_id for m in ops.search(user_id=a) + ops.search(user_id=b)} == {a, b}
