"""Scoped clients (``Hypha.as_user``): every read and write path, across two users, on
both store backends. What belongs to another user answers exactly as what does not
exist: the same error type and the same message, with the id as given."""

from __future__ import annotations

import io
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hypha_celery import (
    Context,
    Finish,
    Graph,
    Hypha,
    NotPermitted,
    NotRedrivable,
    Principal,
    Review,
    RunNotFound,
)
from hypha_celery.agents import Agent, NoReply
from hypha_celery.backends import BackendEvent, MockBackend
from hypha_celery.errors import InvalidPrincipal, Overloaded
from hypha_celery.exchange import export_jsonl
from tests.runtime.support import WAIT, embedded, wait_until

GATE = threading.Event()


def _graph() -> Graph:
    def work(state: dict[str, Any], inp: Any) -> dict[str, Any]:
        if inp == "hold":
            GATE.wait(WAIT)
        return {"echo": inp}

    def policy(ctx: Context) -> Any:
        if ctx.step == 0:
            from hypha_celery import Next
            return Next("work", ctx.input)
        if ctx.input == "review" and not ctx.reviews:
            return Review("check", {"what": "the echo"})
        return Finish(ctx.state["echo"])

    return Graph(id="echo", nodes={"work": work}, decision_policy=policy)


class Quiet(Agent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts.get("scripts", [])}, {}

    def handle_response(self, ref: str, response: Any, state: Any) -> NoReply:
        return NoReply(state)


REPLY = [BackendEvent.new("text", {"text": "hi"}).to_json(),
         BackendEvent.new("result", {}).to_json()]


@pytest.fixture
def hypha(store_url: str) -> Iterator[Hypha]:
    h = embedded(store_url)
    h.register(_graph())
    GATE.clear()
    yield h
    GATE.set()
    h.close()


@pytest.fixture(autouse=True)
def names(monkeypatch: pytest.MonkeyPatch) -> None:
    """Users of their own per test: the PostgreSQL database is shared by the session."""
    global ALICE, BOB, CAROL
    tag = uuid.uuid4().hex[:8]
    ALICE, BOB, CAROL = f"alice-{tag}", f"bob-{tag}", f"carol-{tag}"


ALICE = BOB = CAROL = ""


def same_refusal(action: Callable[[Any], Any], theirs: Any, missing: Any) -> None:
    """``action`` on another user's object fails exactly as on one that does not exist
    (the same type, the same message but for the id given)."""
    with pytest.raises(Exception) as found:
        action(theirs)
    with pytest.raises(Exception) as nobody:
        action(missing)
    assert type(found.value) is type(nobody.value)
    assert str(found.value).replace(str(theirs), "ID") == \
        str(nobody.value).replace(str(missing), "ID")


def test_a_user_reads_and_acts_on_its_own_runs_only(hypha: Hypha) -> None:
    alice, bob = hypha.as_user(ALICE), hypha.as_user(BOB)
    run = alice.start("echo", "hi", session_id="s1")
    assert run.wait(WAIT) == "hi"
    assert hypha.get_run(run.id).status().status == "completed"  # unscoped: trusted
    assert alice.get_run(run.id).status().status == "completed"
    assert [e.kind for e in alice.get_run(run.id).events()][0] == "run.created"
    assert alice.runs() == [run.id] and bob.runs() == []
    assert alice.session_runs("s1") == [run.id] and bob.session_runs("s1") == []
    assert alice.store.events(run.id) and bob.store.events(run.id) == []
    assert list(bob.store.history(run.id)) == []
    assert bob.store.last_event(run.id, "run.created") is None
    assert bob.store.load_many([run.id]) == {}
    assert bob.store.by_status("completed") == []
    for action in (lambda rid: bob.get_run(rid), lambda rid: bob.cancel(rid),
                   lambda rid: bob.release(rid), lambda rid: bob.fail_quarantined(rid),
                   lambda rid: bob.approve(rid), lambda rid: bob.reject(rid, reason="no"),
                   lambda rid: bob.store.get(rid)):
        same_refusal(action, run.id, "0" * 32)


def test_the_refusal_names_only_the_id_given(hypha: Hypha) -> None:
    run = hypha.as_user(ALICE).start("echo", "hi")
    run.wait(WAIT)
    with pytest.raises(RunNotFound) as err:
        hypha.as_user(BOB).get_run(run.id)
    assert str(err.value) == f"no run {run.id!r} in the event store"
    assert ALICE not in str(err.value)


def test_waiting_streaming_and_cancelling_go_through_the_scope(hypha: Hypha) -> None:
    alice, bob = hypha.as_user(ALICE), hypha.as_user(BOB)
    run = alice.start("echo", "hold")
    with pytest.raises(RunNotFound):
        bob.get_run(run.id)
    with pytest.raises(RunNotFound):
        bob.cancel(run.id)
    assert alice.get_run(run.id).status().status in ("running", "queued")
    stream = alice.get_run(run.id).stream(timeout=WAIT)
    assert alice.cancel(run.id) is True
    items = list(stream)
    assert items[-1]["kind"] == "end" and items[-1]["status"] == "cancelled"
    GATE.set()


def test_runs_without_a_user_are_an_operators(hypha: Hypha) -> None:
    run = hypha.start("echo", "hi")
    run.wait(WAIT)
    with pytest.raises(RunNotFound):
        hypha.as_user(ALICE).get_run(run.id)
    ops = hypha.as_principal(Principal.admin("ops"))
    assert ops.get_run(run.id).status().status == "completed"
    assert run.id in ops.runs()


def test_a_user_starts_runs_for_itself_only(hypha: Hypha) -> None:
    alice = hypha.as_user(ALICE)
    with pytest.raises(NotPermitted):
        alice.start("echo", "hi", user_id=BOB)
    run = alice.start("echo", "hi", user_id=ALICE)
    assert hypha.store.get(run.id)["user_id"] == ALICE
    ops = hypha.as_principal(Principal.admin("ops"))
    assert hypha.store.get(ops.start("echo", "x", user_id="carol").id)["user_id"] == "carol"


def test_idempotency_keys_are_per_user(hypha: Hypha) -> None:
    alice, bob = hypha.as_user(ALICE), hypha.as_user(BOB)
    first = alice.start("echo", "a", idempotency_key="k1")
    assert alice.start("echo", "a", idempotency_key="k1").id == first.id
    other = bob.start("echo", "b", idempotency_key="k1")  # no conflict, nothing learned
    assert other.id != first.id
    assert other.wait(WAIT) == "b" and first.wait(WAIT) == "a"


def test_reviews_are_scoped(hypha: Hypha) -> None:
    alice, bob = hypha.as_user(ALICE), hypha.as_user(BOB)
    run = alice.start("echo", "review")
    wait_until(lambda: alice.reviews(), what="the review")
    assert [r.run_id for r in alice.reviews()] == [run.id]
    assert bob.reviews() == []
    with pytest.raises(RunNotFound):
        bob.approve(run.id)
    with pytest.raises(NotPermitted):
        alice.approve(run.id, by="mallory")
    alice.approve(run.id, note="fine")
    assert run.wait(WAIT) == "review"
    approved = [e for e in hypha.store.events(run.id) if e.kind == "human.review.approved"]
    assert approved[0].data["by"] == ALICE


def test_dead_letters_are_scoped(hypha: Hypha) -> None:
    alice, bob = hypha.as_user(ALICE), hypha.as_user(BOB)
    run = alice.start("echo", "hi")
    run.wait(WAIT)
    mine = hypha.store.add_dead_letter(_letter(run.id))
    orphan = hypha.store.add_dead_letter(_letter(None))
    assert [d["id"] for d in alice.dead_letters()] == [mine]
    assert bob.dead_letters() == []
    assert bob.store.dead_letter(mine) is None and alice.store.dead_letter(orphan) is None
    same_refusal(bob.redrive, mine, 10**9)
    assert str(_refusal(lambda: bob.redrive(mine))) == f"no dead letter {mine}"
    assert bob.store.purge_dead_letters() == 0
    assert {mine, orphan} <= {d["id"] for d in hypha.store.dead_letters(limit=10_000)}


def _refusal(call: Callable[[], Any]) -> BaseException:
    with pytest.raises(NotRedrivable) as err:
        call()
    return err.value


def _letter(run_id: str | None) -> dict[str, Any]:
    return {"run_id": run_id, "execution_id": None, "task": "hypha.node.x", "queue": None,
            "args": [], "reason": "malformed", "error_class": "permanent",
            "error": {"message": "x"}, "attempts": 1, "status": "open",
            "created_at": time.time()}


def test_exports_hold_only_the_users_runs(hypha: Hypha) -> None:
    alice, bob = hypha.as_user(ALICE), hypha.as_user(BOB)
    a = alice.start("echo", "a")
    b = bob.start("echo", "b")
    a.wait(WAIT), b.wait(WAIT)
    out = io.StringIO()
    export_jsonl(alice.store, out)
    assert a.id in out.getvalue() and b.id not in out.getvalue()
    with pytest.raises(RunNotFound) as err:
        export_jsonl(alice.store, io.StringIO(), [b.id])
    assert str(err.value) == f"no run {b.id!r} in the event store"


def test_sweeps_need_an_admin(hypha: Hypha) -> None:
    with pytest.raises(NotPermitted):
        hypha.as_user(ALICE).sweep()
    assert isinstance(hypha.as_principal(Principal.admin("ops")).sweep(), list)


def test_agents_are_scoped_by_name(hypha: Hypha) -> None:
    alice, bob = hypha.as_user(ALICE).agents, hypha.as_user(BOB).agents
    info = alice.start(Quiet, name="helper", backend=MockBackend, scripts=[REPLY, REPLY])
    assert info.name == "helper"
    mine = bob.start(Quiet, name="helper", backend=MockBackend, scripts=[REPLY])
    assert mine.incarnation != info.incarnation  # the same name, two agents
    assert alice.list() == ["helper"] and bob.list() == ["helper"]
    assert {f"{ALICE}/helper", f"{BOB}/helper"} <= set(hypha.agents.list())
    ref = alice.tell("helper", "one")
    assert wait_until(lambda: alice.poll("helper", ref).response).text == "hi"
    assert bob.poll("helper", ref).reason == "not_found"  # bob's helper, not alice's ref
    assert alice.status("helper").name == "helper"
    assert alice.whereis("ghost") is None
    carol = hypha.as_user(CAROL).agents
    for call in (lambda n: carol.tell(n, "x"), carol.status, carol.stop, carol.drain,
                 carol.runtime_snapshot, lambda n: carol.poll(n, ref),
                 lambda n: carol.cancel_request(n, ref), carol.stream):
        same_refusal(call, "helper", "ghost")
    for cast in (lambda n: carol.notify(n, {"x": 1}), carol.halt, carol.resume,
                 carol.interrupt):  # casts to a name nobody has do nothing, as here
        assert cast("helper") is None
    snapshot = alice.runtime_snapshot("helper")
    assert not snapshot["halted"] and snapshot["pending_notifications"] == 0
    alice.stop("helper")
    assert alice.list() == [] and bob.list() == ["helper"]
    bob.stop("helper")


def test_agents_per_owner_are_bounded(store_url: str) -> None:
    from dataclasses import replace

    h = embedded(store_url)
    h.settings = replace(h.settings, max_agents_per_owner=1)
    try:
        alice = h.as_user(ALICE).agents
        alice.start(Quiet, name="one", backend=MockBackend)
        with pytest.raises(Overloaded) as err:
            alice.start(Quiet, name="two", backend=MockBackend)
        assert err.value.info["max_count"] == 1
        assert alice.list() == ["one"]
        h.as_user(BOB).agents.start(Quiet, name="one", backend=MockBackend)
        alice.stop("one")
        h.as_user(BOB).agents.stop("one")
    finally:
        h.close()


@pytest.mark.parametrize("bad", ["", "a/b", "x" * 129, "tab\there", 7, None])
def test_principal_ids_are_validated(bad: Any) -> None:
    with pytest.raises(InvalidPrincipal):
        Principal.user(bad)


def test_a_principal_travels_as_json() -> None:
    p = Principal.admin("ops")
    assert Principal.from_json(p.to_json()) == p
    assert p.to_json() == {"role": "admin", "id": "ops"}
    for bad in ({"role": "root", "id": "x"}, {"id": "x"}, "user:x", {"role": "user"}):
        with pytest.raises(InvalidPrincipal):
            Principal.from_json(bad)
