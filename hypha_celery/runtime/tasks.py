"""Celery task registration. The bodies stay short: the work is in
:mod:`~hypha_celery.runtime.nodes` and :mod:`~hypha_celery.runtime.coordinator`."""

from __future__ import annotations

from typing import Any

from celery import Task
from celery.signals import celeryd_after_setup

from hypha_celery.graph import Graph
from hypha_celery.runtime import canvas
from hypha_celery.runtime.config import COORDINATOR_TASK
from hypha_celery.runtime.coordinator import coordinate
from hypha_celery.runtime.core import Runtime
from hypha_celery.runtime.nodes import Envelope, edge_ref, run_node, run_reducer

#: Worker logs and task events show results cut to this many characters: a node's
#: output (possibly prompt text) never reaches logs or Flower.
RESULT_REPR = 8


@celeryd_after_setup.connect
def _remember_queues(sender: Any, instance: Any, **kwargs: Any) -> None:
    app = instance.app
    canvas.set_consumed_queues(app, frozenset(app.amqp.queues.consume_from or app.amqp.queues))


def register_coordinator(rt: Runtime) -> None:
    @rt.app.task(name=COORDINATOR_TASK, bind=True, ignore_result=True, shared=False)
    def coordinator(self: Task, payload: Envelope) -> None:
        if payload is not None:
            coordinate(rt, payload)


def register_graph(rt: Runtime, graph: Graph) -> None:
    for node_id in graph.nodes:
        _register_node(rt, graph, node_id)
    for name in graph.reducers:
        _register_reducer(rt, graph, name)


def _continue(rt: Runtime, task: Task, outcome: Envelope) -> Envelope | None:
    """Run the coordinator link inline when possible, else let the chain carry it."""
    if canvas.take_coordinator(rt.app, task.request, rt.inline_coordinator):
        coordinate(rt, outcome)
        return None
    return outcome


def _register_node(rt: Runtime, graph: Graph, node_id: str) -> None:
    @rt.app.task(name=f"{graph.id}.{node_id}", bind=True, ignore_result=False, shared=False,
                 resultrepr_maxsize=RESULT_REPR)
    def node(self: Task, env: Envelope) -> Envelope | None:
        outcome, seen = run_node(rt, graph, env, attempt=self.request.retries + 1)
        if env.get("edge_of"):
            return edge_ref(env, outcome)
        if outcome is None:
            canvas.drop_continuation(self.request)
            return None
        if not canvas.take_coordinator(rt.app, self.request, rt.inline_coordinator):
            return outcome
        local = canvas.LocalSteps(rt.app, self.request, rt.local_budget) \
            if rt.local_budget > 0 else None
        while (call := coordinate(rt, outcome, seen, local)) is not None:
            outcome, seen = run_node(rt, graph, call.env)
            if outcome is None:
                return None
        return None


def _register_reducer(rt: Runtime, graph: Graph, name: str) -> None:
    @rt.app.task(name=f"{graph.id}.{name}", bind=True, ignore_result=True, shared=False,
                 resultrepr_maxsize=RESULT_REPR)
    def reducer(self: Task, results: list[Any], meta: Envelope) -> Envelope | None:
        return _continue(rt, self, run_reducer(rt, graph, meta, results))
