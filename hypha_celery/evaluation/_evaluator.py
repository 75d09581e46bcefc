"""The deterministic evaluator: output contracts, trace specs and evaluation specs over
recorded events; never a model, a tool or a human. :func:`evaluate_run` records
``eval.started`` then ``eval.completed`` (the verdict is ``payload.summary.status``) or,
when the evaluation itself raised, ``eval.failed``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from hypha_celery.errors import RunNotFound
from hypha_celery.evaluation._contracts import OutputContract, as_contract, validate_output
from hypha_celery.evaluation._results import Check, EvaluationResult, EvaluationSummary, result
from hypha_celery.evaluation._trace import TraceSpec, evaluate_trace
from hypha_celery.events import payloads as ev
from hypha_celery.events.envelope import Event
from hypha_celery.jsontypes import JsonObject
from hypha_celery.replay._fixture import final_output, own_events
from hypha_celery.replay._record import emit
from hypha_celery.store import EventStore

EvaluationType = Literal["schema", "output_contract", "tool_trace", "policy", "process",
                         "regression", "cost", "latency", "human"]
#: Types that need a judge outside the event log: they fail, explicitly.
NOT_DETERMINISTIC = ("cost", "latency", "human")
_TRACE_TYPES = ("tool_trace", "policy", "process", "regression")


class EvaluationSpec(BaseModel):
    """hypha's evaluation spec: ``schema`` validates the output against ``rubric`` (a JSON
    Schema; without one it fails), ``output_contract`` runs the contracts given to the
    evaluator (none: fails), ``tool_trace`` / ``policy`` / ``process`` / ``regression`` run
    trace completeness, ``cost`` / ``latency`` / ``human`` fail as not deterministic."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    type: EvaluationType
    rubric: JsonObject | None = None  # a JSON Schema
    version: str | None = None


class _Missing:
    def __repr__(self) -> str:
        return "<the run's final output>"


FINAL_OUTPUT: Any = _Missing()


def _unsupported(spec: EvaluationSpec, message: str, run_id: str | None) -> EvaluationResult:
    return result(spec.id, spec.type, [Check(id=f"{spec.id}:unsupported", passed=False,
                                             message=message)], run_id)


def _run_spec(spec: EvaluationSpec, events: Sequence[Event], output: Any,
              contracts: Sequence[OutputContract], run_id: str | None
              ) -> list[EvaluationResult]:
    if spec.type == "schema":
        if spec.rubric is None:
            return [_unsupported(spec, "a schema evaluation needs a rubric (a JSON Schema)",
                                 run_id)]
        return [validate_output(output, OutputContract(spec.id, spec.rubric), run_id=run_id,
                                evaluation_id=spec.id)]
    if spec.type == "output_contract":
        if not contracts:
            return [_unsupported(spec, "an output_contract evaluation needs output contracts, "
                                       "none were given", run_id)]
        return [validate_output(output, c, run_id=run_id, evaluation_id=f"{spec.id}:{c.id}")
                for c in contracts]
    if spec.type in _TRACE_TYPES:
        return [evaluate_trace(events, run_id=run_id, evaluation_id=spec.id)]
    return [_unsupported(spec, f"a {spec.type} evaluation is not deterministic (it needs an "
                               "external judge)", run_id)]


def _contracts(contracts: Sequence[OutputContract | Mapping[str, object]]
               ) -> list[OutputContract]:
    return [as_contract(c, "output" if i == 0 else f"output.{i + 1}")
            for i, c in enumerate(contracts)]


def evaluate(
    events: Sequence[Event], *, run_id: str | None = None, output: Any = FINAL_OUTPUT,
    contracts: Sequence[OutputContract | Mapping[str, object]] = (),
    traces: Sequence[TraceSpec] = (), specs: Sequence[EvaluationSpec] = (),
    evaluation_id: str | None = None,
) -> EvaluationSummary:
    """Run every contract (against ``output``, default: the run's final output as
    :func:`~hypha_celery.replay.final_output` gives it), every trace spec and every
    evaluation spec over ``events``; pure. A bare schema in ``contracts`` gets the id
    ``output`` (``output.2``, ... when there are several)."""
    checked = _contracts(contracts)
    out = final_output(events) if output is FINAL_OUTPUT else output
    results = [validate_output(out, c, run_id=run_id) for c in checked]
    results += [evaluate_trace(events, t, run_id=run_id) for t in traces]
    for spec in specs:
        results += _run_spec(spec, events, out, checked, run_id)
    sid = evaluation_id or (f"{run_id}:deterministic-evaluation" if run_id
                            else "deterministic-evaluation")
    return EvaluationSummary(id=sid, run_id=run_id, results=results)


def evaluate_run(
    store: EventStore, run_id: str, *,
    contracts: Sequence[OutputContract | Mapping[str, object]] = (),
    traces: Sequence[TraceSpec] = (), specs: Sequence[EvaluationSpec] = (),
    record_events: bool = True,
) -> EvaluationSummary:
    """:func:`evaluate` a stored run's own events (``eval.*`` / ``replay.*`` /
    ``regression.*`` left out) and, with ``record_events``, record ``eval.started`` then
    ``eval.completed {summary}`` (ids, verdicts and scores only) or ``eval.failed {error}``
    in its log. :class:`RunNotFound` for an unknown run and
    :class:`~hypha_celery.errors.InvalidContract` for a bad contract: nothing recorded."""
    checked = _contracts(contracts)
    events = own_events(store.events(run_id))
    if not events:
        raise RunNotFound(f"no run {run_id!r} in the event store")
    if record_events:
        emit(store, run_id, ev.EvalStarted(contracts=[c.id for c in checked],
                                           traces=[t.id for t in traces],
                                           specs=[s.id for s in specs]))
    try:
        summary = evaluate(events, run_id=run_id, contracts=checked, traces=traces,
                           specs=specs)
    except Exception as exc:
        if record_events:
            emit(store, run_id, ev.EvalFailed(error=f"{type(exc).__name__}: {exc}"[:500]))
        raise
    if record_events:
        emit(store, run_id, ev.EvalCompleted(summary=summary.brief()))
    return summary
