"""The one place that speaks Celery canvas.

* a one-node step is ``chain(node, coordinator)``;
* a fan-out is ``chord([edge, ...], reducer) | coordinator``;
* the coordinator link may run *inline*: when the worker that finished the node
  (or the reducer) also consumes the coordinator queue, the task pops the
  coordinator signature off its own chain and runs the step itself, saving a
  broker hop. Otherwise Celery publishes the coordinator message as usual.

Task ids are execution ids, so a duplicate publish carries the same id and
Flower shows ``graph.node`` names with the run's execution ids. What is published here
is the app's also outside a task (a client's kickoff: the middleware's publish hooks,
:func:`~hypha_celery.middleware._celery_signals.publishing`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from celery import Celery, chord
from celery.canvas import Signature

from hypha_celery.middleware._celery_signals import consumed_queues, publishing
from hypha_celery.runtime.config import (
    AGENT_PUMP_TASK,
    AGENTS_QUEUE,
    COORDINATOR_QUEUE,
    COORDINATOR_TASK,
)
from hypha_celery.runtime.protocol import NodeMessage

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class NodeCall:
    """One node (or edge) task to publish: ``msg`` is its argument, serialized only
    when published (a local step runs it as it is)."""

    task: str
    msg: NodeMessage
    queue: str
    timeout: float
    local_budget: float = 0.0
    #: False for at-most-once nodes: they always run as their own early-ack task.
    local_ok: bool = True

    @property
    def env(self) -> dict[str, object]:
        """The task argument, as JSON."""
        return self.msg.to_json()

    def signature(self, app: Celery, *, keep_result: bool) -> Signature:
        eid = self.msg.execution_id
        return app.signature(
            self.task,
            args=(self.env,),
            queue=self.queue,
            task_id=eid,
            argsrepr=f"(<{eid}>,)",  # never node input in logs/Flower
            soft_time_limit=self.timeout + self.local_budget,
            time_limit=hard_limit(self.timeout + self.local_budget),
            ignore_result=not keep_result,
        )


def hard_limit(timeout: float) -> float:
    """The prefork hard kill comes a grace period after the soft limit."""
    return timeout + max(5.0, timeout * 0.25)


def coordinator(app: Celery) -> Signature:
    return app.signature(COORDINATOR_TASK, queue=COORDINATOR_QUEUE, ignore_result=True,
                         argsrepr="(<outcome>,)")


def kickoff(app: Celery, run_id: str, execution_id: str,
            local_limit: float | None = None) -> None:
    """First coordinator message of a run. With ``local_limit`` (the graph's longest
    node timeout plus the local-steps budget) it carries that soft time limit, and the
    coordinator task may run the first nodes itself (local steps) instead of
    publishing them."""
    options: dict[str, object] = {"task_id": f"{execution_id}.c"}
    if local_limit:
        options.update(soft_time_limit=local_limit, time_limit=hard_limit(local_limit))
    with publishing(app):
        coordinator(app).clone(
            args=({"run_id": run_id, "execution_id": execution_id},), **options).apply_async()


def step(app: Celery, call: NodeCall, countdown: float | None = None) -> None:
    """``chain(node, coordinator)``, published the way Celery publishes the rest of
    a running chain (the ``chain`` message option) — the same message as
    ``chain(...).apply_async()`` without re-preparing the canvas each step.
    ``countdown``: a retry, delivered after that many seconds."""
    options: dict[str, object] = {"chain": [coordinator(app)]}
    if countdown:
        options["countdown"] = countdown
    with publishing(app):
        call.signature(app, keep_result=False).apply_async(**options)


def revoke(app: Celery, task_ids: list[str]) -> None:
    """Best-effort: workers drop these task ids if they have not started them. Never
    ``terminate=True`` (it kills a process that may be running another task). A broker
    hiccup is logged, never raised: fencing makes the revoke an optimization."""
    if not task_ids:
        return
    try:
        app.control.revoke(task_ids)
    except Exception as exc:
        log.warning("hypha: revoke failed: %s", type(exc).__name__)


def fanout(app: Celery, edges: list[NodeCall], reducer_task: str, meta: Mapping[str, object],
           queue: str) -> None:
    """``chord([edge, ...], reducer) | coordinator``."""
    header = [e.signature(app, keep_result=True) for e in edges]
    body = app.signature(reducer_task, args=(meta,), queue=queue,
                         task_id=f"{meta['execution_id']}.r", ignore_result=True)
    with publishing(app):
        (chord(header, body) | coordinator(app)).apply_async()


def notify(app: Celery, sig: Mapping[str, Any], outcome: Mapping[str, Any]) -> None:
    """Call the subscriber's signature with the terminal outcome."""
    with publishing(app):
        app.signature(sig).apply_async(args=(outcome,))


# -- the inline coordinator link ------------------------------------------
def take_coordinator(app: Celery, request: Any, enabled: bool) -> bool:
    """Pop the coordinator link off the running task's chain if this worker may
    run it inline. Returns True when the caller must run the step itself."""
    pending = request.chain
    if not enabled or not pending or COORDINATOR_QUEUE not in consumed_queues(app):
        return False
    if pending[-1].get("task") != COORDINATOR_TASK or len(pending) != 1:
        return False
    pending.pop()
    return True


class LocalSteps:
    """Zero-hop steps: the task that just ran a step may run the *next* node itself
    instead of publishing it — only while it has spent less than ``budget`` seconds,
    the task's remaining soft time limit covers the next node's timeout and exceeds it
    by at most ``budget`` (so the limit still enforces that node's timeout), and this
    worker consumes the next node's queue. Slow nodes (an LLM call) therefore always hop and
    spread over workers; fast nodes (tools, transforms) don't pay a broker hop each.
    """

    def __init__(self, app: Celery, request: Any, budget: float) -> None:
        self._queues = consumed_queues(app)
        self._budget = budget
        self._started = time.monotonic()
        limits = request.timelimit or (None, None)
        self._soft = limits[1]
        self.next: NodeCall | None = None

    def offer(self, call: NodeCall) -> bool:
        """Take ``call`` to run locally after the commit (True) or let it be published."""
        elapsed = time.monotonic() - self._started
        if not call.local_ok or elapsed > self._budget or call.queue not in self._queues:
            return False
        if self._soft is not None:
            remaining = float(self._soft) - elapsed
            # the task's soft limit is the node's time limit too: it must fit, and be at
            # most the budget longer than the node's own timeout (else the node would
            # run unchecked past it)
            if call.timeout > remaining or remaining - call.timeout > self._budget:
                return False
        self.next = call
        return True

    def take(self) -> NodeCall | None:
        call, self.next = self.next, None
        return call


def drop_continuation(request: Any) -> None:
    """A stale task must not wake the coordinator."""
    if request.chain:
        request.chain.clear()


def agent_pump(app: Celery, name: str, incarnation: str, token: str) -> None:
    """The message that hands an agent to a worker (``hypha.agent.pump``). Its arguments
    are ids only: prompts and state stay in the store."""
    with publishing(app):
        app.signature(AGENT_PUMP_TASK, args=(name, incarnation, token), queue=AGENTS_QUEUE,
                      ignore_result=True, argsrepr="(<agent>,)").apply_async()
