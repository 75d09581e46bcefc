"""The circuit breaker's half-open state (hypha's ``halfOpenMaxAttempts``) on a real store
(SQLite and PostgreSQL), and on the embedded runtime: after the open period a bounded
number of retries run as probes; a probe's success closes the circuit, its failure
re-opens it; the other retries wait another reset."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from hypha_celery import Context, Finish, Graph, Hypha, Next, Node, RetryPolicy
from hypha_celery.runtime import failures
from hypha_celery.runtime.retries import Retries
from hypha_celery.store import EventStore
from hypha_celery.store.recovery import circuit_state
from tests.runtime.support import WAIT, of_kind, running

T0, RESET = 1_000.0, 30.0


@pytest.fixture
def key() -> str:
    """A circuit of the test's own (the PostgreSQL database is the session's)."""
    return f"vendor-{uuid.uuid4().hex}"


def open_circuit(store: EventStore, key: str) -> float:
    """Three failures (the default threshold): open until T0 + 2 + RESET."""
    for i in range(failures.THRESHOLD):
        opened, until = store.record_failure(key, T0 + i, failures.THRESHOLD, RESET)
    assert opened and until == T0 + 2 + RESET
    return until


def test_the_defaults_are_hyphas() -> None:
    assert (failures.THRESHOLD, failures.RESET, failures.HALF_OPEN_PROBES) == (3, 30.0, 1)


def test_states_follow_the_open_period() -> None:
    assert circuit_state(0.0, T0, RESET) == "closed"
    assert circuit_state(T0 + 5, T0, RESET) == "open"
    assert circuit_state(T0, T0, RESET) == "half_open"
    assert circuit_state(T0, T0 + RESET - 0.001, RESET) == "half_open"
    assert circuit_state(T0, T0 + RESET, RESET) == "closed"  # no probe told anything


def test_only_the_probe_budget_runs_after_the_open_period(store: EventStore, key: str) -> None:
    until = open_circuit(store, key)
    assert store.claim_probe(key, T0 + 3, 1, RESET) == until  # the probe
    assert store.claim_probe(key, T0 + 4, 1, RESET) == until + RESET  # waits
    assert store.claim_probe(key, until + 1, 1, RESET) == until + 1 + RESET  # spent
    other = open_circuit(store, key + "-2")
    assert [store.claim_probe(key + "-2", T0 + 3, 2, RESET) for _ in range(3)] == [
        other, other, other + RESET]
    assert store.claim_probe(key + "-3", T0, 1, RESET) == T0  # a closed circuit: at once


def test_a_failure_while_open_counts_nothing(store: EventStore, key: str) -> None:
    until = open_circuit(store, key)
    assert store.record_failure(key, T0 + 10, failures.THRESHOLD, RESET) == (False, until)


def test_a_half_open_failure_reopens_at_once(store: EventStore, key: str) -> None:
    until = open_circuit(store, key)
    store.claim_probe(key, T0 + 3, 1, RESET)
    now = until + 0.5  # the probe ran and failed
    assert store.record_failure(key, now, failures.THRESHOLD, RESET) == (True, now + RESET)
    assert store.claim_probe(key, now + 1, 1, RESET) == now + RESET  # a new probe


def test_a_half_open_success_closes(store: EventStore, key: str) -> None:
    until = open_circuit(store, key)
    store.claim_probe(key, T0 + 3, 1, RESET)
    store.record_success(key)
    row = store.circuit(key)
    assert row is not None and (row["failures"], row["open_until"]) == (0, 0.0)
    assert circuit_state(row["open_until"], until + 1, RESET) == "closed"
    # closed again: one failure opens nothing, the threshold counts from zero
    assert store.record_failure(key, until + 1, failures.THRESHOLD, RESET) == (False, 0.0)


@pytest.fixture
def rt(store_url: str) -> Iterator[Hypha]:
    with running(store_url) as h:
        yield h


def once(ctx: Context) -> Next | Finish:
    return Next("a", ctx.input) if ctx.step == 0 else Finish(ctx.state)


class Down:
    """Fails while ``down``; counts its calls."""

    def __init__(self, down: int) -> None:
        self.down, self.calls = down, 0

    def __call__(self, state: dict[str, Any], inp: Any) -> dict[str, Any]:
        self.calls += 1
        if self.calls <= self.down:
            raise ConnectionError("vendor down")
        return {"calls": self.calls}


def test_a_probe_that_works_closes_the_circuit(rt: Hypha, monkeypatch: pytest.MonkeyPatch
                                               ) -> None:
    hypha = rt
    (retries,) = [m for m in hypha._rt.middleware.middleware if isinstance(m, Retries)]
    monkeypatch.setattr(retries, "reset", 0.4)
    policy = RetryPolicy(max_attempts=6, backoff=0.01, max_backoff=0.05)
    node = Down(3)
    dep = f"probe-{uuid.uuid4().hex}"
    hypha.register(Graph("probe", {"a": Node(node, retry=policy, dependency=dep)}, once))
    run = hypha.start("probe")
    assert run.wait(WAIT) == {"calls": 4}
    (opened,) = of_kind(run, "recovery.circuit.opened")
    third = [e for e in of_kind(run, "node.execution.retrying") if e.data["attempt"] == 3][0]
    assert third.data["delay"] >= 0.35  # the probe waited for the open period
    row = hypha.store.circuit(dep)
    assert row is not None and (row["failures"], row["open_until"]) == (0, 0.0)  # closed


def test_a_probe_that_fails_reopens_and_the_next_probe_waits(
        rt: Hypha, monkeypatch: pytest.MonkeyPatch) -> None:
    hypha = rt
    (retries,) = [m for m in hypha._rt.middleware.middleware if isinstance(m, Retries)]
    monkeypatch.setattr(retries, "reset", 0.3)
    policy = RetryPolicy(max_attempts=6, backoff=0.01, max_backoff=0.05)
    node = Down(4)
    dep = f"probe-{uuid.uuid4().hex}"
    hypha.register(Graph("probe2", {"a": Node(node, retry=policy, dependency=dep)}, once))
    run = hypha.start("probe2")
    assert run.wait(WAIT) == {"calls": 5}
    opened = of_kind(run, "recovery.circuit.opened")
    assert len(opened) == 2  # by the threshold, then by the failed probe
    delays = {e.data["attempt"]: e.data["delay"] for e in of_kind(run,
                                                                 "node.execution.retrying")}
    assert delays[3] >= 0.25 and delays[4] >= 0.25  # each probe waited an open period
