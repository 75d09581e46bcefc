"""One node message's path, owned by one object: :class:`NodeDelivery`.

parse (the envelope checked, or the message dead-lettered ``invalid_schema``) → count
deliveries (a redelivery is recorded; past the limit the message is dead-lettered
``delivery_limit`` instead of run) → attempt (:func:`~.nodes.run_node` between
``before_attempt`` and ``after_attempt``) → what becomes of it (``after_attempt_outcome``:
the :class:`~hypha_celery.runtime.retries.Retries` middleware retries it or dead-letters
it; the delivery implements :class:`~hypha_celery.middleware.Settling` for it) → settle
(an edge's or an at-most-once node's outcome stored, first writer wins) → continue (an
edge hands the chord its reference; a node's outcome goes to the coordinator: the
chain's message, or the step run inline, then zero-hop local steps).

A delivery runs in its own task (:meth:`NodeDelivery.in_task`) or as a local step of the
task before it (:func:`local_steps`: attempt 1, nothing to parse or count).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from celery import Task
from celery.exceptions import Ignore

from hypha_celery.events import View
from hypha_celery.graph import Graph, RetryPolicy
from hypha_celery.middleware import Attempt, AttemptEnd
from hypha_celery.runtime import canvas, failures
from hypha_celery.runtime.coordinator import coordinate, node_call
from hypha_celery.runtime.core import Runtime
from hypha_celery.runtime.nodes import edge_ref, run_node, settle
from hypha_celery.runtime.protocol import NodeMessage, NodeOutcome, Payload
from hypha_celery.runtime.seams import attempt_end, attempt_of, stepped

__all__ = ["NodeDelivery", "local_steps", "publish_retry", "step"]


class NodeDelivery:
    """One delivery of a node or edge message (attempt ``number``, of task ``task`` from
    ``queue``), from its parse to what follows it."""

    __slots__ = ("_attempt", "delay", "graph", "msg", "number", "outcome", "queue", "rt",
                 "seen", "task")

    def __init__(self, rt: Runtime, graph: Graph, msg: NodeMessage, number: int, task: str,
                 queue: str | None) -> None:
        self.rt, self.graph, self.msg = rt, graph, msg
        self.number, self.task, self.queue = number, task, queue
        #: What the attempt did (``None``: it did not run, the run no longer awaits it).
        self.outcome: NodeOutcome | None = None
        #: The run as read before the attempt (the coordinator's optimistic write).
        self.seen: View | None = None
        #: Set once the attempt is retried: after that many seconds (negative: another
        #: delivery had already scheduled the retry).
        self.delay: float | None = None
        self._attempt: Attempt | None = None

    @classmethod
    def received(cls, rt: Runtime, graph: Graph, task: Task, env: Any) -> NodeDelivery | None:
        """Parse: the delivery of ``env``, or ``None`` once a message that does not have
        the envelope's schema is dead-lettered (a malformed payload never raises)."""
        problem = failures.envelope_problem(env, graph, task.name)
        if problem is not None:
            failures.malformed(rt, task.name, env, "invalid_schema", problem)
            return None
        msg = NodeMessage.from_json(env)
        request = task.request
        return cls(rt, graph, msg, int(msg.attempt or request.retries + 1), task.name,
                   (request.delivery_info or {}).get("routing_key"))

    # -- the path ------------------------------------------------------------------
    def run(self, redelivered: bool = False) -> NodeOutcome | None:
        """Count the delivery, attempt, decide: the outcome to hand on, or ``None`` (the
        run no longer awaits it, or it is retried: :attr:`delay`)."""
        if redelivered:
            dead = failures.count_delivery(self.rt, self.msg, self.task, self.queue)
            if dead is not None:
                self.outcome = dead
                return self._handed_on(dead)
        outcome = self._attempted()
        if outcome is None:
            return None
        self.rt.middleware.after_attempt_outcome(self)
        if self.delay is not None:
            if self.delay >= 0 and self.rt.middleware.wants("after_retry_scheduled"):
                self.rt.middleware.after_retry_scheduled(self.attempt, self.delay)
            return None
        assert self.outcome is not None
        return self._handed_on(self.outcome)

    def in_task(self, task: Task) -> dict[str, object] | None:
        """The whole path in the delivery's own task; what the task returns."""
        request = task.request
        outcome = self.run(failures.deliveries(request) > 1)
        msg = self.msg
        if outcome is None:
            if self.delay is not None:
                self._retry_in_task(task, self.delay)
                return None
            if msg.edge_of is not None:
                return edge_ref(msg, None).to_json()
            canvas.drop_continuation(request)
            return None
        outcome = settle(self.rt, self.graph, outcome, self.number)
        if msg.edge_of is not None:
            return edge_ref(msg, outcome).to_json()
        if not canvas.take_coordinator(self.rt.app, request, self.rt.inline_coordinator):
            return outcome.to_json()
        local_steps(self.rt, self.graph, task, outcome, self.seen)
        return None

    def _attempted(self) -> NodeOutcome | None:
        """:func:`run_node` between ``before_attempt`` and ``after_attempt`` (the lease
        middleware holds its lease in between)."""
        rt, stack = self.rt, self.rt.middleware
        if not (stack.wants("before_attempt") or stack.wants("after_attempt")):
            self.outcome, self.seen = run_node(rt, self.graph, self.msg, self.number)
            return self.outcome
        at = self.attempt
        stack.before_attempt(at)
        try:
            self.outcome, self.seen = run_node(rt, self.graph, self.msg, self.number)
        except BaseException as exc:
            stack.after_attempt(at, AttemptEnd(False, type(exc).__name__))
            raise
        stack.after_attempt(at, attempt_end(self.outcome))
        return self.outcome

    def _handed_on(self, outcome: NodeOutcome) -> NodeOutcome:
        """``after_dead_letter`` for a final outcome that is one (a late one is told by
        the step that logs it, :mod:`~hypha_celery.runtime.late`)."""
        dead = outcome.dead_letter
        if dead is not None and self.rt.middleware.wants("after_dead_letter"):
            self.rt.middleware.after_dead_letter(self.attempt, dead["reason"])
        return outcome

    def _retry_in_task(self, task: Task, delay: float) -> None:
        """Publish the next attempt after ``delay`` s (an edge keeps its chord membership
        through ``Task.retry``); a negative delay means another delivery already did."""
        if delay < 0:
            if self.msg.edge_of is not None:
                raise Ignore()  # never count a duplicate in the chord join
            canvas.drop_continuation(task.request)
            return
        if self.msg.edge_of is not None:
            raise task.retry(countdown=delay, max_retries=None)
        canvas.drop_continuation(task.request)
        publish_retry(self.rt, self.graph, self.msg, self.number, delay)

    # -- what a middleware reads and may change (Settling) ---------------------------
    @property
    def attempt(self) -> Attempt:
        if self._attempt is None:
            self._attempt = attempt_of(self.msg, self.number)
        return self._attempt

    @property
    def error(self) -> Mapping[str, Any] | None:
        return None if self.outcome is None else self.outcome.error

    @property
    def late(self) -> bool:
        return self.outcome is not None and self.outcome.late

    @property
    def decided(self) -> bool:
        return self.delay is not None or (
            self.outcome is not None and self.outcome.dead_letter is not None)

    @property
    def retry_policy(self) -> RetryPolicy | None:
        return self.graph.retry_for(self.msg.node_id)

    @property
    def dependency(self) -> str:
        calls = self.outcome.calls if self.outcome is not None else None
        return self.graph.failure_dependency(self.msg.node_id, calls)

    @property
    def dependencies(self) -> tuple[str, ...]:
        calls = self.outcome.calls if self.outcome is not None else None
        return self.graph.dependencies_of(self.msg.node_id, calls or [])

    def retry(self, delay: float, circuit: tuple[str, float] | None = None) -> None:
        outcome = self.outcome
        if outcome is None or outcome.error is None or self.decided:
            return
        recorded = failures.record_retry(self.rt, outcome, self.number, delay, outcome.error,
                                         circuit)
        self.delay = delay if recorded else -1.0

    def dead_letter(self, reason: str) -> None:
        outcome = self.outcome
        if outcome is None or outcome.error is None or self.decided:
            return
        self.outcome = failures.dead_lettered(
            self.msg, outcome.error, self.task, self.queue, attempts=self.number,
            reason=reason, duration=outcome.duration, started=outcome.started,
            calls=outcome.calls)


def publish_retry(rt: Runtime, graph: Graph, msg: NodeMessage, attempt: int,
                  delay: float) -> None:
    call = node_call(rt, graph, msg.with_attempt(attempt + 1))
    canvas.step(rt.app, call, countdown=delay)


def step(rt: Runtime, payload: Payload, seen: View | None = None,
         local: canvas.LocalSteps | None = None) -> canvas.NodeCall | None:
    """:func:`coordinate` between ``before_step`` and ``after_step``."""
    return stepped(rt, payload.run_id, payload.execution_id,
                   lambda: coordinate(rt, payload, seen, local))


def local_steps(rt: Runtime, graph: Graph | None, task: Task, outcome: Payload,
                seen: View | None) -> None:
    """Continue: the inline coordinator step, then zero-hop steps (each one node
    delivery, attempt 1) while the budget lasts."""
    local = canvas.LocalSteps(rt.app, task.request, rt.local_budget) \
        if rt.local_budget > 0 else None
    while (call := step(rt, outcome, seen, local)) is not None:
        graph = graph or rt.graphs[call.task.rsplit(".", 1)[0]]
        delivery = NodeDelivery(rt, graph, call.msg, 1, call.task, call.queue)
        result = delivery.run()
        if result is None:
            if delivery.delay is not None and delivery.delay >= 0:
                publish_retry(rt, graph, call.msg, 1, delivery.delay)
            return
        outcome, seen = result, delivery.seen
