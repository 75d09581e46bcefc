"""Where the runtime calls its middleware (:mod:`hypha_celery.middleware`).

Run start and end are told after the commit that recorded them (after-commit callbacks,
never inside the transaction), in the process that wrote it: a run admitted by
``Hypha.start`` in the client's, a queued run started when its lane's previous run ended in
the worker's (or the client's, for ``cancel``); a late result after the commit that logged
it. The coordinator step (:func:`around_step`) is wrapped around the task bodies in
:mod:`~hypha_celery.runtime.tasks` and the supervisor's steps; the node attempt around
the task bodies. Nothing is built when no middleware overrides the hook: the hot path pays
one dict lookup per hook.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from hypha_celery.events import View
from hypha_celery.events.payloads import RunCompleted, TerminalPayload
from hypha_celery.middleware import Attempt, AttemptEnd, MiddlewareStack, RunEnd, RunStart, Step
from hypha_celery.runtime.core import Runtime
from hypha_celery.runtime.protocol import NodeMessage, NodeOutcome
from hypha_celery.store import Tx

T = TypeVar("T")


def run_started(tx: Tx, rt: Runtime, run_id: str, graph_id: str, *, queued: bool) -> None:
    """After the commit: ``after_run_start`` (``run.started``, or ``run.queued``)."""
    stack = rt.middleware
    if stack.wants("after_run_start"):
        start = RunStart(run_id, graph_id, queued)
        tx.after_commit(lambda: stack.after_run_start(start))


def run_ended(tx: Tx, rt: Runtime, view: View, ended: TerminalPayload,
              next_run: str | None) -> None:
    """After the commit of the terminal event ``ended``: ``after_run_end``, then
    ``after_run_start`` of the run the lane was handed to (``next_run``)."""
    stack = rt.middleware
    if stack.wants("after_run_end"):
        reason = None if isinstance(ended, RunCompleted) else ended.reason
        end = RunEnd(view["run_id"], ended.kind.removeprefix("run."), reason,
                     view.get("graph_id") or "")
        tx.after_commit(lambda: stack.after_run_end(end))
    if next_run is not None:
        nxt = tx.lock(next_run)
        run_started(tx, rt, next_run, (nxt["graph_id"] if nxt else None) or "", queued=False)


def around_step(stack: MiddlewareStack, at: Step, fn: Callable[[], T]) -> T:
    """``fn`` (a coordinator step, its transaction committed or rolled back when it
    returns) between ``before_step`` and ``after_step``."""
    stack.before_step(at)
    try:
        result = fn()
    except BaseException as exc:
        stack.after_step(at, exc)
        raise
    stack.after_step(at, None)
    return result


def wants_step(stack: MiddlewareStack) -> bool:
    return stack.wants("before_step") or stack.wants("after_step")


def stepped(rt: Runtime, run_id: str, execution_id: str, fn: Callable[[], T]) -> T:
    """:func:`around_step` when a middleware wants it, else just ``fn()``."""
    stack = rt.middleware
    if not wants_step(stack):
        return fn()
    return around_step(stack, Step(run_id, execution_id), fn)


def late_result(tx: Tx, rt: Runtime, late: Attempt, reason: str) -> None:
    """After the commit of its ``node.execution.late_result``: ``after_late_result``."""
    stack = rt.middleware
    if stack.wants("after_late_result"):
        tx.after_commit(lambda: stack.after_late_result(late, reason))


def late_attempt(outcome: NodeOutcome, attempt: int = 1) -> Attempt:
    """The attempt a late outcome is told as: its ``started`` record's, else ``attempt``."""
    started = outcome.started
    return Attempt(outcome.run_id, outcome.execution_id, outcome.node_id,
                   started["attempt"] if started else attempt)


def attempt_of(msg: NodeMessage, attempt: int) -> Attempt:
    return Attempt(msg.run_id, msg.execution_id, msg.node_id, attempt)


def attempt_end(outcome: NodeOutcome | None) -> AttemptEnd:
    """How an attempt ended, from its outcome; ``None`` (the run no longer awaited it)
    and an edge outcome stored by an earlier delivery (``settled``) did not run the
    node: ``error_type`` ``"Stale"``. An attempt that parked its run until a message
    comes (``AwaitingMessage``) did its work: ``ok``."""
    if outcome is None or outcome.settled:
        return AttemptEnd(False, "Stale")
    if outcome.error is None or outcome.awaiting is not None:
        return AttemptEnd(True, None, outcome.duration)
    return AttemptEnd(False, outcome.error.get("type") or "Error", outcome.duration)
