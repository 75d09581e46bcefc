"""Celery task registration. The bodies stay short: a node message's path is
:class:`~hypha_celery.runtime.delivery.NodeDelivery`'s, a step
:mod:`~hypha_celery.runtime.coordinator`'s.

Idempotent tasks (coordinator, nodes, edges, reducers) ack late and are
requeued when their worker process dies; at-most-once nodes ack early.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from celery import Task

from hypha_celery.graph import Graph
from hypha_celery.runtime import canvas, failures
from hypha_celery.runtime.config import COORDINATOR_TASK
from hypha_celery.runtime.core import Runtime
from hypha_celery.runtime.delivery import NodeDelivery, local_steps, step
from hypha_celery.runtime.lanes import kickoff_id
from hypha_celery.runtime.nodes import run_reducer
from hypha_celery.runtime.protocol import FanoutMeta, Payload, ReducerOutcome, parse_payload

__all__ = ["RESULT_REPR", "node_task", "register_coordinator", "register_graph", "step"]

#: Worker logs and task events show results cut to this many characters: a node's
#: output (possibly prompt text) never reaches logs or Flower.
RESULT_REPR = 8


def register_coordinator(rt: Runtime) -> None:
    @rt.app.task(name=COORDINATOR_TASK, bind=True, ignore_result=True, shared=False,
                 acks_late=True, reject_on_worker_lost=True)
    def coordinator(self: Task, payload: object) -> None:
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


def _continue(rt: Runtime, task: Task, outcome: ReducerOutcome) -> dict[str, object] | None:
    """Run the coordinator link inline when possible, else let the chain carry it."""
    if canvas.take_coordinator(rt.app, task.request, rt.inline_coordinator):
        step(rt, outcome)
        return None
    return outcome.to_json()


def _register_node(rt: Runtime, graph: Graph, node_id: str) -> None:
    late = not graph.nodes[node_id].at_most_once

    @rt.app.task(name=f"{graph.id}.{node_id}", bind=True, ignore_result=False, shared=False,
                 resultrepr_maxsize=RESULT_REPR, acks_late=late, reject_on_worker_lost=late)
    def node(self: Task, env: object) -> dict[str, object] | None:
        return node_task(rt, graph, self, env)


def _register_reducer(rt: Runtime, graph: Graph, name: str) -> None:
    @rt.app.task(name=f"{graph.id}.{name}", bind=True, ignore_result=True, shared=False,
                 resultrepr_maxsize=RESULT_REPR, acks_late=True, reject_on_worker_lost=True)
    def reducer(self: Task, results: list[object], meta: object) -> dict[str, object] | None:
        parsed = _parsed(rt, self.name, meta, FanoutMeta.from_json)
        if parsed is None:
            return None
        return _continue(rt, self, run_reducer(rt, graph, parsed, results))


def node_task(rt: Runtime, graph: Graph, task: Task, env: object) -> dict[str, object] | None:
    """One delivery of a node or edge message (its path: :class:`NodeDelivery`)."""
    delivery = NodeDelivery.received(rt, graph, task, env)
    return None if delivery is None else delivery.in_task(task)


def _coordinator_step(rt: Runtime, task: Task, payload: Payload) -> None:
    """A coordinator message. A kickoff that carries a soft time limit (see
    :func:`canvas.kickoff`) may go on with local steps; anything else is one step."""
    soft = (task.request.timelimit or (None, None))[1]
    if soft and rt.local_budget > 0 and payload.execution_id == kickoff_id(payload.run_id):
        local_steps(rt, None, task, payload, None)
    else:
        step(rt, payload)
