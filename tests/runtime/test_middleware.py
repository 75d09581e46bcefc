"""The middleware hooks around a real run on the embedded runtime."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from hypha_celery import (
    Context,
    Finish,
    Graph,
    Hypha,
    Next,
    Node,
    RetryPolicy,
    RunCancelled,
    RunFailed,
    Settings,
)
from hypha_celery.agents.telemetry import Telemetry
from hypha_celery.middleware import (
    Attempt,
    AttemptEnd,
    Middleware,
    RunEnd,
    RunStart,
    Settling,
    Step,
)
from hypha_celery.runtime.leases import LeaseMiddleware
from hypha_celery.runtime.live import LiveEnds
from hypha_celery.runtime.protocol import NodeOutcome
from hypha_celery.runtime.retries import Retries
from hypha_celery.runtime.tasks import step
from tests.runtime.support import WAIT, wait_until

FAST = RetryPolicy(max_attempts=2, backoff=0.01, max_backoff=0.02)


class Recorder(Middleware):
    """Appends ``(name, hook, detail)`` to a list shared by every recorder."""

    def __init__(self, name: str, calls: list[tuple[str, str, Any]]) -> None:
        self.name, self.calls, self._lock = name, calls, threading.Lock()

    def _add(self, hook: str, detail: Any) -> None:
        with self._lock:
            self.calls.append((self.name, hook, detail))

    def after_run_start(self, run: RunStart) -> None:
        self._add("after_run_start", run)

    def after_run_end(self, run: RunEnd) -> None:
        self._add("after_run_end", run)

    def before_step(self, step: Step) -> None:
        self._add("before_step", step.execution_id)

    def after_step(self, step: Step, error: BaseException | None) -> None:
        self._add("after_step", step.execution_id)

    def before_attempt(self, attempt: Attempt) -> None:
        self._add("before_attempt", attempt)

    def after_attempt(self, attempt: Attempt, end: AttemptEnd) -> None:
        self._add("after_attempt", (attempt, end))

    def after_retry_scheduled(self, attempt: Attempt, delay: float) -> None:
        self._add("after_retry_scheduled", (attempt, delay))

    def after_dead_letter(self, attempt: Attempt, reason: str) -> None:
        self._add("after_dead_letter", (attempt, reason))

    def after_late_result(self, attempt: Attempt, reason: str) -> None:
        self._add("after_late_result", (attempt, reason))


class Raising(Middleware):
    """Every run and node hook raises."""

    def after_run_start(self, run: RunStart) -> None:
        raise RuntimeError("start")

    def after_run_end(self, run: RunEnd) -> None:
        raise RuntimeError("end")

    def before_step(self, step: Step) -> None:
        raise RuntimeError("step")

    def after_step(self, step: Step, error: BaseException | None) -> None:
        raise RuntimeError("step")

    def before_attempt(self, attempt: Attempt) -> None:
        raise RuntimeError("attempt")

    def after_attempt(self, attempt: Attempt, end: AttemptEnd) -> None:
        raise RuntimeError("attempt")


def two_nodes(ctx: Context) -> Next | Finish:
    if ctx.step == 0:
        return Next("a", ctx.input)
    if ctx.step == 1:
        return Next("b", None)
    return Finish(ctx.state)


def add(state: dict[str, Any], inp: Any) -> dict[str, Any]:
    return {"n": state.get("n", 0) + (inp or 1)}


@pytest.fixture
def calls() -> list[tuple[str, str, Any]]:
    return []


def embedded(store_url: str, middleware: list[Middleware], **settings: Any) -> Hypha:
    return Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                          store_url=store_url, embedded=True, **settings),
                 middleware=middleware)


@pytest.fixture
def hypha_with(sqlite_url: str, calls: list[tuple[str, str, Any]]) -> Iterator[Hypha]:
    app = embedded(sqlite_url, [Recorder("outer", calls), Recorder("inner", calls)])
    try:
        yield app
    finally:
        app.close()


def ended(calls: list[tuple[str, str, Any]]) -> bool:
    return sum(hook == "after_run_end" for _, hook, _ in calls) == 2


def test_the_hooks_see_a_run_in_order(hypha_with: Hypha,
                                      calls: list[tuple[str, str, Any]]) -> None:
    hypha_with.register(Graph("mw1", {"a": Node(add), "b": Node(add)}, two_nodes))
    run = hypha_with.start("mw1", 2)
    assert run.wait(WAIT) == {"n": 3}
    wait_until(lambda: ended(calls), what="after_run_end")
    outer = [(hook, detail) for name, hook, detail in calls if name == "outer"]
    assert outer[0] == ("after_run_start", RunStart(run.id, "mw1", False))
    assert ("after_run_end", RunEnd(run.id, "completed", None)) in outer
    attempts = [d for h, d in outer if h == "before_attempt"]
    assert [(a.execution_id, a.node, a.attempt) for a in attempts] == [
        (f"{run.id}.1", "a", 1), (f"{run.id}.2", "b", 1)]
    ends = [d[1] for h, d in outer if h == "after_attempt"]
    assert [e.ok for e in ends] == [True, True] and all(e.duration_s >= 0 for e in ends)
    steps = [d for h, d in outer if h == "before_step"]
    assert steps == [f"{run.id}.0", f"{run.id}.1", f"{run.id}.2"]
    assert [d for h, d in outer if h == "after_step"] == steps
    # each step and attempt: before ... after, never interleaved with the next one
    brackets = [h for h, _ in outer if h.endswith(("_step", "_attempt"))]
    assert brackets == ["before_step", "after_step", "before_attempt", "after_attempt"] * 2 + [
        "before_step", "after_step"]


def test_before_hooks_run_in_list_order_and_after_hooks_reversed(
        hypha_with: Hypha, calls: list[tuple[str, str, Any]]) -> None:
    hypha_with.register(Graph("mw2", {"a": Node(add), "b": Node(add)}, two_nodes))
    run = hypha_with.start("mw2", 1)
    run.wait(WAIT)
    wait_until(lambda: ended(calls), what="after_run_end")
    for hook, first in (("before_step", "outer"), ("after_step", "inner"),
                        ("before_attempt", "outer"), ("after_attempt", "inner")):
        names = [name for name, h, _ in calls if h == hook]
        assert names[0] == first and names == [first, ("inner" if first == "outer"
                                                         else "outer")] * (len(names) // 2)


def test_a_raising_middleware_never_breaks_a_run(sqlite_url: str) -> None:
    calls: list[tuple[str, str, Any]] = []
    app = embedded(sqlite_url, [Raising(), Recorder("after", calls)])
    try:
        app.register(Graph("mw3", {"a": Node(add), "b": Node(add)}, two_nodes))
        run = app.start("mw3", 5)
        assert run.wait(WAIT) == {"n": 6}
        wait_until(lambda: any(h == "after_run_end" for _, h, _ in calls), what="run end")
        assert sum(h == "after_attempt" for _, h, _ in calls) == 2
    finally:
        app.close()


def test_retries_and_dead_letters_are_told(hypha_with: Hypha,
                                           calls: list[tuple[str, str, Any]]) -> None:
    def fails(state: dict[str, Any], inp: Any) -> dict[str, Any]:
        raise ConnectionError("down")

    def policy(ctx: Context) -> Next | Finish:
        return Next("a", None) if ctx.step == 0 else Finish(ctx.state)

    hypha_with.register(Graph("mw4", {"a": Node(fails, retry=FAST)}, policy))
    run = hypha_with.start("mw4")
    with pytest.raises(RunFailed):
        run.wait(WAIT)
    wait_until(lambda: ended(calls), what="after_run_end")
    outer = [(hook, detail) for name, hook, detail in calls if name == "outer"]
    ((attempt, delay),) = [d for h, d in outer if h == "after_retry_scheduled"]
    assert (attempt.execution_id, attempt.attempt) == (f"{run.id}.1", 1) and delay >= 0
    ends = [d[1] for h, d in outer if h == "after_attempt"]
    assert [(e.ok, e.error_type) for e in ends] == [(False, "ConnectionError")] * 2
    ((attempt, reason),) = [d for h, d in outer if h == "after_dead_letter"]
    assert (attempt.attempt, reason) == (2, "retries_exhausted")
    assert ("after_run_end", RunEnd(run.id, "failed", "dead_lettered")) in outer


def test_retries_then_leases_come_first_unless_leases_are_off(sqlite_url: str) -> None:
    mine = Recorder("mine", [])
    with_leases = embedded(sqlite_url, [mine])
    without = embedded(sqlite_url, [mine], lease_interval=0.0)
    try:
        retries, leases, telemetry, ends, last = with_leases._rt.middleware.middleware
        assert isinstance(retries, Retries) and isinstance(leases, LeaseMiddleware)
        assert isinstance(telemetry, Telemetry) and isinstance(ends, LiveEnds)
        assert last is mine
        (retries, telemetry, ends, last) = without._rt.middleware.middleware
        assert isinstance(retries, Retries) and isinstance(telemetry, Telemetry)
        assert last is mine
        assert with_leases.agents._rt.middleware is with_leases._rt.middleware
    finally:
        with_leases.close()
        without.close()


def test_a_queued_run_is_told_when_admitted_and_again_when_it_starts(
        hypha_with: Hypha, calls: list[tuple[str, str, Any]]) -> None:
    gate = threading.Event()

    def held(state: dict[str, Any], inp: Any) -> dict[str, Any]:
        gate.wait(WAIT)
        return {"n": 1}

    def once(ctx: Context) -> Next | Finish:
        return Next("a", None) if ctx.step == 0 else Finish(ctx.state)

    hypha_with.register(Graph("mw5", {"a": Node(held)}, once))
    first = hypha_with.start("mw5", user_id="u", session_id="s")
    second = hypha_with.start("mw5", user_id="u", session_id="s")
    gate.set()
    first.wait(WAIT)
    second.wait(WAIT)
    wait_until(lambda: sum(h == "after_run_end" for n, h, _ in calls if n == "outer") == 2,
               what="both ends")
    starts = [d for n, h, d in calls if n == "outer" and h == "after_run_start"]
    assert starts == [RunStart(first.id, "mw5", False), RunStart(second.id, "mw5", True),
                      RunStart(second.id, "mw5", False)]


def test_a_node_cancelled_while_running_is_told_late_once(
        hypha_with: Hypha, calls: list[tuple[str, str, Any]]) -> None:
    started, gate = threading.Event(), threading.Event()

    def held(state: dict[str, Any], inp: Any) -> dict[str, Any]:
        started.set()
        gate.wait(WAIT)
        return {"n": 1}

    def once(ctx: Context) -> Next | Finish:
        return Next("a", None) if ctx.step == 0 else Finish(ctx.state)

    hypha_with.register(Graph("mw6", {"a": Node(held)}, once))
    run = hypha_with.start("mw6")
    assert started.wait(WAIT)
    assert run.cancel() is True
    with pytest.raises(RunCancelled):
        run.wait(WAIT)
    gate.set()

    def told() -> list[Any]:
        return [d for n, h, d in calls if n == "outer" and h == "after_late_result"]

    wait_until(lambda: told(), what="after_late_result")
    ((attempt, reason),) = told()
    assert (attempt.run_id, attempt.execution_id, attempt.node, attempt.attempt, reason) == (
        run.id, f"{run.id}.1", "a", 1, "cancelled")
    assert [d for n, h, d in calls if n == "inner" and h == "after_late_result"] == told()
    # a duplicate delivery finds it logged: nothing is logged or told again
    step(hypha_with._rt, NodeOutcome(run.id, f"{run.id}.1", "a", update={"n": 1}))
    assert len(told()) == 1
    late = [e for e in run.events() if e.kind == "node.execution.late_result"]
    assert [e.data["reason"] for e in late] == ["cancelled"]


class Decides(Middleware):
    """Changes what becomes of failed attempts (the runtime's ``Retries`` decides after
    it): dead-letters a ``validation`` error at once, retries a ``policy`` error the
    node's retry policy would not."""

    def __init__(self) -> None:
        self.told: list[tuple[int, str | None]] = []

    def after_attempt_outcome(self, outcome: Settling) -> None:
        error = outcome.error
        self.told.append((outcome.attempt.attempt, None if error is None else error["class"]))
        if error is not None and error["class"] == "validation":
            outcome.dead_letter("refused_by_middleware")
        elif error is not None and error["class"] == "policy" and outcome.attempt.attempt < 3:
            outcome.retry(0.01)


class Failing:
    """Raises ``exc`` for the first ``failures`` attempts, then returns."""

    def __init__(self, exc: Exception, failures: int) -> None:
        self.exc, self.failures, self.attempts = exc, failures, 0

    def __call__(self, state: dict[str, Any], inp: Any) -> dict[str, Any]:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise self.exc
        return {"ok": self.attempts}


def test_a_middleware_may_retry_an_attempt_the_policy_would_not(sqlite_url: str) -> None:
    decides = Decides()
    app = embedded(sqlite_url, [decides])
    try:
        node = Failing(PermissionError("denied"), 2)  # class policy: never retried by FAST
        app.register(Graph("mw_retry", {"a": Node(node, retry=FAST)}, once_a))
        run = app.start("mw_retry")
        assert run.wait(WAIT) == {"ok": 3}
        assert decides.told == [(1, "policy"), (2, "policy"), (3, None)]
        retries = [e for e in run.events() if e.type == "node.execution.retrying"]
        assert [e.data["attempt"] for e in retries] == [1, 2]
    finally:
        app.close()


def test_a_middleware_may_dead_letter_an_attempt_the_policy_would_retry(
        sqlite_url: str) -> None:
    app = embedded(sqlite_url, [Decides()])
    try:
        node = Failing(ValueError("bad"), 5)
        policy = RetryPolicy(max_attempts=3, backoff=0.01, retry_on=("validation",))
        app.register(Graph("mw_dead", {"a": Node(node, retry=policy)}, once_a))
        run = app.start("mw_dead")
        with pytest.raises(RunFailed) as info:
            run.wait(WAIT)
        assert info.value.reason == "dead_lettered" and node.attempts == 1
        (record,) = app.store.dead_letters(run_id=run.id)
        assert record["reason"] == "refused_by_middleware"
        assert not [e for e in run.events() if e.type == "node.execution.retrying"]
    finally:
        app.close()


def once_a(ctx: Context) -> Next | Finish:
    return Next("a", ctx.input) if ctx.step == 0 else Finish(ctx.state)
