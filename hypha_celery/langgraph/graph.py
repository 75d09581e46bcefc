"""The hypha graph that runs a LangGraph graph: what maps to what.

* the run's input: ``{"thread", "input", "limit"}``; its state: the thread's
  position (``lg``: an :class:`~.engine.Snapshot`), the stream chunks of the last step
  (``chunks``), the graph's values after it (``values``);
* ``__begin__`` (a node): the thread's last position (the newest earlier run of the
  thread), the input applied by LangGraph's loop, the first superstep prepared;
* a LangGraph node: a hypha node of the same name (``_`` for characters our names do not
  take) running one task of a superstep; when it is the superstep's only task left it
  also ends the superstep (one hop per step);
* a superstep of several tasks (parallel nodes, ``Send``): a ``FanOut`` (a Celery chord)
  whose reducer ``__join__`` (the chord callback) ends the superstep with every task's
  writes, applied in LangGraph's order (:meth:`~.engine.Engine.apply`);
* conditional edges, ``Send`` and ``Command(goto=)``: evaluated by LangGraph's code as
  writes are applied; the policy (the coordinator) reads the tasks it prepared;
* ``interrupt()``: the task ends with the interrupt; the policy parks the run with a
  ``Review`` (reason ``interrupt``; no worker held); an approval whose note is
  ``{"resume": value}`` runs the interrupted tasks again with that value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hypha_celery.errors import GraphSpecError
from hypha_celery.graph import (
    Fail,
    FanOut,
    Finish,
    Graph,
    Next,
    Node,
    Outcome,
    RetryPolicy,
    Review,
)
from hypha_celery.graph.model import Context
from hypha_celery.langgraph.engine import Engine, Snapshot, TaskResult

BEGIN = "__begin__"
JOIN = "__join__"
#: The review reason of a LangGraph interrupt.
INTERRUPT = "interrupt"
#: The failure reason of a run that reached its ``recursion_limit``.
RECURSION_LIMIT = "recursion_limit"
#: A LangGraph run ends when LangGraph's loop says; hypha's own step bound only stops a
#: runaway beyond any ``recursion_limit`` LangGraph takes.
MAX_STEPS = 100_000
_BAD = re.compile(r"[^A-Za-z0-9_\-]")

PreviousFn = Callable[[str, str], Snapshot | None]
#: Publishes a task's stream chunk on the run's live topic: ``(run_id, [mode, chunk, id])``.
LiveFn = Callable[[str, list[Any]], None]


def node_ids(names: list[str]) -> dict[str, str]:
    """Each LangGraph node name's hypha node id (our names: letters, digits, ``_`` and
    ``-``, at most 64; a name that needs changing gets ``_`` and, when taken, a number)."""
    out: dict[str, str] = {}
    taken = {BEGIN, JOIN}
    for name in names:
        base = _BAD.sub("_", name)[:60] or "_"
        if not base[0].isalpha() and base[0] != "_":
            base = "_" + base[:59]
        node_id, n = base, 1
        while node_id in taken:
            n += 1
            node_id = f"{base[:56]}_{n}"
        taken.add(node_id)
        out[name] = node_id
    return out


@dataclass(frozen=True, slots=True)
class TaskCall:
    """What a LangGraph node's hypha node is asked to do (its input): run the prepared
    task ``id``; ``solo``: it is the superstep's only task left, so it also ends the
    superstep; ``resumed``: its ``interrupt()`` returns ``resume`` now."""

    id: str
    solo: bool = False
    resumed: bool = False
    resume: Any = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id}
        if self.solo:
            out["solo"] = True
        if self.resumed:
            out["resume"] = self.resume
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskCall:
        return cls(data["id"], bool(data.get("solo")), "resume" in data, data.get("resume"))


class Mapping_:
    """Builds the hypha :class:`Graph` of one distributed LangGraph graph."""

    def __init__(self, graph_id: str, engine: Engine, previous: PreviousFn,
                 options: Mapping[str, Mapping[str, Any]], live: LiveFn | None = None
                 ) -> None:
        self.graph_id = graph_id
        self.engine = engine
        self.previous = previous
        self.live = live
        names = [n for n in engine.compiled.nodes if n != "__start__"]
        self.ids = node_ids(names)
        self.options = options

    def build(self, options: Mapping[str, Any]) -> Graph:
        """The hypha graph (``options``: the :class:`Graph` options a caller gives, all
        but ``max_steps`` and ``on_node_error``, which this mapping sets)."""
        taken = {"max_steps", "on_node_error", "retry"} & set(options)
        if taken:
            raise GraphSpecError(f"distribute(graph=) cannot set {sorted(taken)}: "
                                 "recursion_limit bounds the steps, a node's error ends "
                                 "the run as in LangGraph, retries are per node")
        nodes: dict[str, Node] = {BEGIN: Node(self._begin)}
        for name, node_id in self.ids.items():
            given = dict(self.options.get(name, {}))
            policies = self.engine.retry_policies.get(name)
            if policies and "retry" not in given:
                given["retry"] = hypha_retry(policies[0])
            nodes[node_id] = Node(self._task_fn(name), **given)
        return Graph(self.graph_id, nodes, self._policy, {JOIN: self._join},
                     max_steps=MAX_STEPS, on_node_error="fail", **options)

    # -- nodes -------------------------------------------------------------------------
    def _begin(self, state: dict[str, Any], run_input: Any, ctx: Any) -> dict[str, Any]:
        thread, limit = run_input["thread"], int(run_input["limit"])
        prev = self.previous(thread, ctx.run_id)
        value = self.engine.codec.decode(run_input["input"])
        step = self.engine.advance(thread, prev, value, limit)
        # LangGraph's loop stops a run at the superstep step + limit + 1 of the checkpoint
        # it started at (-2 on a new thread); each advance here is a loop of its own
        base = int(prev.metadata.get("step", -2)) if prev is not None else -2
        return {"thread": thread, "limit": limit, "stop": base + limit + 2,
                "modes": list(run_input.get("modes") or []),
                "lg": step.snapshot.dumps(),
                "chunks": step.chunks, "values": _last_values(step.chunks, None)}

    def _task_fn(self, name: str) -> Callable[[dict[str, Any], Any, Any], dict[str, Any]]:
        def task(state: dict[str, Any], task_input: Any, ctx: Any) -> dict[str, Any]:
            return self._task(name, state, task_input, ctx.run_id)

        task.__name__ = task.__qualname__ = f"langgraph_node:{name}"
        return task

    def _task(self, name: str, state: dict[str, Any], task_input: Any,
              run_id: str) -> dict[str, Any]:
        snap = Snapshot.of(state["lg"])
        call = TaskCall.from_json(task_input)
        publish = self.live

        def live(entry: list[Any]) -> None:
            if publish is not None:
                publish(run_id, entry)

        result = self.engine.run_task(state["thread"], snap, call.id, state["limit"],
                                      call.resume, call.resumed,
                                      messages="messages" in (state.get("modes") or ()),
                                      live=live if publish is not None else None)
        if not call.solo:
            return {"task": call.id, "result": result.to_json()}
        return self._joined(state, snap, {call.id: result})

    def _join(self, state: dict[str, Any], outcomes: list[Outcome]) -> dict[str, Any]:
        snap = Snapshot.of(state["lg"])
        results: dict[str, TaskResult] = {}
        for o in outcomes:
            value: dict[str, Any] = dict(o.value or {})
            r = value["result"]
            results[str(value["task"])] = TaskResult.from_json(r)
        return self._joined(state, snap, results)

    def _joined(self, state: dict[str, Any], snap: Snapshot,
                results: dict[str, TaskResult]) -> dict[str, Any]:
        """Every task's result handed to the loop; with an interrupt among them, kept as
        pending writes until it is resumed."""
        custom = [c for r in results.values() for c in r.chunks]
        done_now = {t for t, r in results.items() if not r.interrupts}
        writes = [w for w in snap.writes
                  if w[0] not in results or (w[0] not in done_now and w[1] != "__interrupt__")]
        for task_id, r in results.items():
            writes += [[task_id, c, v] for c, v in r.writes]
        interrupts = [i for i in snap.interrupts if i.task_id not in results]
        interrupts += [i for r in results.values() for i in r.interrupts]
        if interrupts or {t.id for t in snap.tasks} - {w[0] for w in writes}:
            kept = Snapshot(snap.checkpoint, snap.metadata, writes, snap.tasks, interrupts)
            return {"lg": kept.dumps(), "chunks": custom}
        step = self.engine.apply(snap, writes, state["limit"])
        # "applied": the writes of the superstep just ended, for get_state_history (the
        # tasks' results of the checkpoint before, as LangGraph keeps them)
        return {"lg": step.snapshot.dumps(), "chunks": custom + step.chunks,
                "values": _last_values(step.chunks, state.get("values")), "applied": writes}

    # -- the decision policy (the coordinator) -----------------------------------------
    def _policy(self, ctx: Context) -> Any:
        state = ctx.state
        if "lg" not in state:
            return Next(BEGIN, ctx.input)
        snap = Snapshot.of(state["lg"])  # type: ignore[arg-type]
        if snap.interrupts:
            return self._interrupted(ctx, snap)
        if not snap.tasks:
            return Finish(state.get("values"))
        if int(snap.metadata.get("step", -1)) >= int(state.get("stop", MAX_STEPS)):  # type: ignore[call-overload]
            return Fail(f"Recursion limit of {state['limit']} reached without hitting a stop "
                        "condition. You can increase the limit by setting the "
                        "`recursion_limit` config key.", RECURSION_LIMIT)
        pending = {t.id for t in snap.tasks} - snap.done()
        return self._dispatch(snap, pending)

    def _interrupted(self, ctx: Context, snap: Snapshot) -> Any:
        review = _review_for(ctx, snap)
        if review is None or review.get("status") == "pending":
            return Review(INTERRUPT, subject={"interrupts": [i.to_json()
                                                             for i in snap.interrupts]})
        if review.get("status") != "approved":
            return Fail(f"the interrupt was {review.get('status')}", "review_rejected")
        note = json.loads(review.get("note") or "{}")
        return self._dispatch(snap, snap.interrupted(), True, note.get("resume"))

    def _dispatch(self, snap: Snapshot, ids: set[str], resumed: bool = False,
                  resume: Any = None) -> Any:
        tasks = [t for t in snap.tasks if t.id in ids]
        if len(tasks) == 1 and not (snap.interrupted() - ids):
            t = tasks[0]
            return Next(self.ids[t.name], TaskCall(t.id, True, resumed, resume).to_json())
        return FanOut([Next(self.ids[t.name], TaskCall(t.id, False, resumed, resume).to_json())
                       for t in tasks],
                      reducer=JOIN)


def hypha_retry(policy: Any) -> RetryPolicy:
    """A LangGraph ``RetryPolicy`` as hypha's: the same attempts, first delay and cap
    (hypha doubles the delay each attempt: LangGraph's ``backoff_factor`` is not kept);
    the errors it retries are those LangGraph's ``retry_on`` takes (the task marks them
    ``transient``, the others ``validation``)."""
    first = float(policy.initial_interval)
    return RetryPolicy(max_attempts=int(policy.max_attempts), backoff=first,
                       max_backoff=max(first, float(policy.max_interval)),
                       jitter=0.2 if policy.jitter else 0.0, retry_on=("transient",))


def _review_for(ctx: Context, snap: Snapshot) -> dict[str, Any] | None:
    """The review asked for the interrupts ``snap`` holds, if there is one."""
    ids = sorted(i.id for i in snap.interrupts)
    for review in reversed(list(ctx.reviews.values())):
        subject = review.get("subject")
        if isinstance(subject, dict) and sorted(
                i.get("id") for i in subject.get("interrupts", [])) == ids:
            return dict(review)
    return None


def _last_values(chunks: list[list[Any]], before: Any) -> Any:
    values = [c for mode, c in chunks if mode == "values"]
    return values[-1] if values else before


__all__ = ["BEGIN", "INTERRUPT", "JOIN", "RECURSION_LIMIT", "LiveFn", "Mapping_", "TaskCall",
           "hypha_retry", "node_ids"]
