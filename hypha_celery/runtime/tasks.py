"""Celery task registration. The bodies stay short: the work is in
:mod:`~hypha_celery.runtime.nodes`, :mod:`~hypha_celery.runtime.failures` and
:mod:`~hypha_celery.runtime.coordinator`.

Idempotent tasks (coordinator, nodes, edges, reducers) ack late and are
requeued when their worker process dies; at-most-once nodes ack early.

The middleware hooks of a coordinator step and of a node attempt (its retry and dead
letter) are called here, around the task bodies (:func:`step`,
:func:`node_attempt`); run start and end from :mod:`~hypha_celery.runtime.seams`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from celery import Task
from celery.exceptions import Ignore
from celery.signals import celeryd_after_setup

from hypha_celery.events import View
from hypha_celery.graph import Graph
from hypha_celery.middleware import AttemptEnd
from hypha_celery.runtime import canvas, failures
from hypha_celery.runtime.config import COORDINATOR_TASK
from hypha_celery.runtime.coordinator import coordinate, node_call
from hypha_celery.runtime.core import Runtime
from hypha_celery.runtime.lanes import kickoff_id
from hypha_celery.runtime.nodes import edge_ref, run_node, run_reducer, settle
from hypha_celery.runtime.protocol import (
    FanoutMeta,
    NodeMessage,
    NodeOutcome,
    Payload,
    ReducerOutcome,
    parse_payload,
)
from hypha_celery.runtime.seams import attempt_end, attempt_of, stepped

#: A message as Celery hands it over and takes it back: a JSON object.
Json = dict[str, object]

#: Worker logs and task events show results cut to this many characters: a node's
#: output (possibly prompt text) never reaches logs or Flower.
RESULT_REPR = 8


@celeryd_after_setup.connect
def _remember_queues(sender: Any, instance: Any, **kwargs: Any) -> None:
    app = instance.app
    canvas.set_consumed_queues(app, frozenset(app.amqp.queues.consume_from or app.amqp.queues))


def register_coordinator(rt: Runtime) -> None:
    @rt.app.task(name=COORDINATOR_TASK, bind=True, ignore_result=True, shared=False,
                 acks_late=True, reject_on_worker_lost=True)
    def coordinator(self: Task, payload: Json) -> None:
        if isinstance(payload, dict) and "run_id" in payload and "execution_id" in payload:
            parsed = _parsed(rt, self.name, payload, parse_payload)
            if parsed is not None:
                _coordinator_step(rt, self, parsed)
        elif payload is not None:
            failures.malformed(rt, self.name, payload, "invalid_schema",
                               "coordinator payload needs run_id and execution_id")


_P = TypeVar("_P")


def _parsed(rt: Runtime, task: str, data: Any, parse: Callable[[Any], _P]) -> _P | None:
    """``parse(data)``, or None with the message recorded as a dead letter
    (``invalid_schema``) when it does not parse: a malformed payload never raises in a
    task body."""
    try:
        return parse(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        failures.malformed(rt, task, data, "invalid_schema",
                           f"payload does not parse ({type(exc).__name__})")
        return None


def register_graph(rt: Runtime, graph: Graph) -> None:
    for node_id in graph.nodes:
        _register_node(rt, graph, node_id)
    for name in graph.reducers:
        _register_reducer(rt, graph, name)


def _continue(rt: Runtime, task: Task, outcome: ReducerOutcome) -> Json | None:
    """Run the coordinator link inline when possible, else let the chain carry it."""
    if canvas.take_coordinator(rt.app, task.request, rt.inline_coordinator):
        step(rt, outcome)
        return None
    return outcome.to_json()


def step(rt: Runtime, payload: Payload, seen: View | None = None,
         local: canvas.LocalSteps | None = None) -> canvas.NodeCall | None:
    """:func:`coordinate` between ``before_step`` and ``after_step``."""
    return stepped(rt, payload.run_id, payload.execution_id,
                   lambda: coordinate(rt, payload, seen, local))


def node_attempt(rt: Runtime, graph: Graph, msg: NodeMessage, attempt: int = 1
                 ) -> tuple[NodeOutcome | None, View | None]:
    """:func:`run_node` between ``before_attempt`` and ``after_attempt`` (the lease
    middleware holds its lease in between)."""
    stack = rt.middleware
    if not (stack.wants("before_attempt") or stack.wants("after_attempt")):
        return run_node(rt, graph, msg, attempt)
    at = attempt_of(msg, attempt)
    stack.call("before_attempt", at)
    try:
        outcome, seen = run_node(rt, graph, msg, attempt)
    except BaseException as exc:
        stack.call("after_attempt", at, AttemptEnd(False, type(exc).__name__))
        raise
    stack.call("after_attempt", at, attempt_end(outcome))
    return outcome, seen


def _handed_on(rt: Runtime, msg: NodeMessage, outcome: NodeOutcome, attempt: int) -> None:
    """``after_dead_letter`` for a final outcome that is one (a late one is told by the
    step that logs it, :mod:`~hypha_celery.runtime.late`)."""
    stack = rt.middleware
    if outcome.dead_letter is not None and stack.wants("after_dead_letter"):
        stack.call("after_dead_letter", attempt_of(msg, attempt), outcome.dead_letter["reason"])


def _retried(rt: Runtime, msg: NodeMessage, attempt: int, delay: float) -> None:
    if rt.middleware.wants("after_retry_scheduled"):
        rt.middleware.call("after_retry_scheduled", attempt_of(msg, attempt), delay)


def _register_node(rt: Runtime, graph: Graph, node_id: str) -> None:
    late = not graph.nodes[node_id].at_most_once

    @rt.app.task(name=f"{graph.id}.{node_id}", bind=True, ignore_result=False, shared=False,
                 resultrepr_maxsize=RESULT_REPR, acks_late=late, reject_on_worker_lost=late)
    def node(self: Task, env: Json) -> Json | None:
        return node_task(rt, graph, self, env)


def _register_reducer(rt: Runtime, graph: Graph, name: str) -> None:
    @rt.app.task(name=f"{graph.id}.{name}", bind=True, ignore_result=True, shared=False,
                 resultrepr_maxsize=RESULT_REPR, acks_late=True, reject_on_worker_lost=True)
    def reducer(self: Task, results: list[Any], meta: Json) -> Json | None:
        parsed = _parsed(rt, self.name, meta, FanoutMeta.from_json)
        if parsed is None:
            return None
        return _continue(rt, self, run_reducer(rt, graph, parsed, results))


def node_task(rt: Runtime, graph: Graph, task: Task, env: Json) -> Json | None:
    """One delivery of a node or edge message."""
    problem = failures.envelope_problem(env, graph, task.name)
    if problem is not None:
        failures.malformed(rt, task.name, env, "invalid_schema", problem)
        return None
    msg = NodeMessage.from_json(env)
    attempt = int(msg.attempt or task.request.retries + 1)
    queue = (task.request.delivery_info or {}).get("routing_key")
    outcome, seen = _deliver(rt, graph, task, msg, attempt, queue)
    if outcome is None:
        if msg.edge_of is not None:
            return edge_ref(msg, None).to_json()
        canvas.drop_continuation(task.request)
        return None
    delay, outcome = failures.retry_delay(rt, graph, msg, outcome, attempt, task.name, queue)
    if delay is not None:
        _retry(rt, graph, task, msg, attempt, delay)
        return None
    _handed_on(rt, msg, outcome, attempt)
    outcome = settle(rt, graph, outcome, attempt)
    if msg.edge_of is not None:
        return edge_ref(msg, outcome).to_json()
    if not canvas.take_coordinator(rt.app, task.request, rt.inline_coordinator):
        return outcome.to_json()
    _local_steps(rt, graph, task, outcome, seen)
    return None


def _deliver(rt: Runtime, graph: Graph, task: Task, msg: NodeMessage, attempt: int,
             queue: str | None) -> tuple[NodeOutcome | None, Any]:
    if failures.deliveries(task.request) > 1:
        dead = failures.count_delivery(rt, msg, task.name, queue)
        if dead is not None:
            return dead, None
    return node_attempt(rt, graph, msg, attempt)


def _retry(rt: Runtime, graph: Graph, task: Task, msg: NodeMessage, attempt: int,
           delay: float) -> None:
    """Publish the next attempt after ``delay`` s (an edge keeps its chord membership
    through ``Task.retry``); a negative delay means another delivery already did."""
    if delay < 0:
        if msg.edge_of is not None:
            raise Ignore()  # never count a duplicate in the chord join
        canvas.drop_continuation(task.request)
        return
    _retried(rt, msg, attempt, delay)
    if msg.edge_of is not None:
        raise task.retry(countdown=delay, max_retries=None)
    canvas.drop_continuation(task.request)
    publish_retry(rt, graph, msg, attempt, delay)


def publish_retry(rt: Runtime, graph: Graph, msg: NodeMessage, attempt: int,
                  delay: float) -> None:
    call = node_call(rt, graph, msg.with_attempt(attempt + 1))
    canvas.step(rt.app, call, countdown=delay)


def _coordinator_step(rt: Runtime, task: Task, payload: Payload) -> None:
    """A coordinator message. A kickoff that carries a soft time limit (see
    :func:`canvas.kickoff`) may go on with local steps; anything else is one step."""
    soft = (task.request.timelimit or (None, None))[1]
    if soft and rt.local_budget > 0 and payload.execution_id == kickoff_id(payload.run_id):
        _local_steps(rt, None, task, payload, None)
    else:
        step(rt, payload)


def _local_steps(rt: Runtime, graph: Graph | None, task: Task, outcome: Payload, seen: Any
                 ) -> None:
    """The inline coordinator step, then zero-hop steps while the budget lasts."""
    local = canvas.LocalSteps(rt.app, task.request, rt.local_budget) \
        if rt.local_budget > 0 else None
    while (call := step(rt, outcome, seen, local)) is not None:
        graph = graph or rt.graphs[call.task.rsplit(".", 1)[0]]
        msg = call.msg
        result, seen = node_attempt(rt, graph, msg)
        if result is None:
            return
        delay, outcome = failures.retry_delay(rt, graph, msg, result, 1, call.task,
                                              call.queue)
        if delay is not None:
            if delay >= 0:
                _retried(rt, msg, 1, delay)
                publish_retry(rt, graph, msg, 1, delay)
            return
        _handed_on(rt, msg, outcome, 1)
