"""Regression: compare stored runs with replay fixtures, check by check.

A :class:`RegressionSpec` (YAML) names fixtures (files, or ids in a fixture directory)
and the checks that must pass; :func:`run_regression` compares each fixture with a run in
the store (by default the run it was captured from, re-read) and records
``regression.started`` then ``regression.completed`` (verdict in ``payload.status``) or,
if the comparison raised, ``regression.failed`` on every run it compared.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, TypedDict

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    computed_field,
    field_validator,
)

from hypha_celery.errors import InvalidRegressionSpec
from hypha_celery.evaluation._contracts import OutputContract, validate_output
from hypha_celery.evaluation._results import Check, EvaluationResult
from hypha_celery.evaluation._trace import evaluate_trace
from hypha_celery.events import payloads as ev
from hypha_celery.events.envelope import Event
from hypha_celery.replay._compare import SEQUENCE_FAMILIES, TraceDiff, compare, describe
from hypha_celery.replay._fixture import ReplayFixture, final_output, own_events
from hypha_celery.replay._record import emit
from hypha_celery.replay._store import FileFixtureStore, read_fixture
from hypha_celery.store import EventStore

RegressionCheck = Literal["event_types", "state_path", "tool_calls", "model_calls",
                          "policy_decisions", "memory_read_set", "skill_activations",
                          "context_hashes", "reasoning_decisions", "output", "output_contract",
                          "trace_completeness"]
DEFAULT_CHECKS: tuple[RegressionCheck, ...] = ("event_types", "state_path", "output_contract")


class RegressionSpec(BaseModel):
    """``id``; ``fixtures``: fixture files (``*.json`` or anything with a ``/``, relative
    to the spec's directory) or fixture ids looked up as ``<id>.replay.json`` in the fixture
    directory; ``runs``: fixture (as written, or its id) -> the run id to compare with
    (default: the fixture's own run); ``required_checks`` (default ``event_types``,
    ``state_path``, ``output_contract``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    fixtures: list[str] = Field(min_length=1)
    runs: dict[str, str] = Field(default_factory=dict)
    required_checks: list[RegressionCheck] = Field(
        default_factory=lambda: list(DEFAULT_CHECKS), min_length=1)
    _base: Path | None = PrivateAttr(default=None)

    @field_validator("required_checks")
    @classmethod
    def _unique(cls, checks: list[RegressionCheck]) -> list[RegressionCheck]:
        return list(dict.fromkeys(checks))

    @field_validator("fixtures")
    @classmethod
    def _named(cls, fixtures: list[str]) -> list[str]:
        if any(not f.strip() for f in fixtures):
            raise ValueError("a fixture reference is empty")
        return fixtures

    @property
    def base(self) -> Path | None:
        """The directory of the YAML file the spec was loaded from."""
        return self._base

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RegressionSpec:
        """Parse a YAML file; :class:`InvalidRegressionSpec` names the file and problem."""
        source = Path(path)
        try:
            data = yaml.safe_load(source.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidRegressionSpec(f"{source}: cannot read the spec ({exc})") from None
        except yaml.YAMLError as exc:
            raise InvalidRegressionSpec(f"{source}: not valid YAML ({exc})") from None
        spec = cls.parse(data, str(source))
        spec._base = source.resolve().parent
        return spec

    @classmethod
    def parse(cls, data: Any, source: str = "<spec>") -> RegressionSpec:
        if not isinstance(data, dict):
            raise InvalidRegressionSpec(f"{source}: a regression spec is a mapping with id, "
                                        "fixtures, runs and required_checks")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise InvalidRegressionSpec(f"{source}: {where + ': ' if where else ''}"
                                        f"{first['msg']}") from None


class RegressionCase(BaseModel):
    """One fixture compared with one run; ``checks`` holds ``regression.<check>`` per
    required check, in the spec's order."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    fixture_id: str
    run_id: str | None = None
    checks: list[Check]
    diff: TraceDiff | None = None
    contract: EvaluationResult | None = None
    trace: EvaluationResult | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)


class RegressionReport(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    spec_id: str
    cases: list[RegressionCase]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.cases)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def summary(self) -> dict[str, int]:
        passed = sum(1 for c in self.cases if c.passed)
        return {"total": len(self.cases), "passed": passed, "failed": len(self.cases) - passed}


def _check(name: str, passed: bool, message: str) -> Check:
    return Check(id=f"regression.{name}", passed=passed, message=message)


def _failed_case(case_id: str, fixture_id: str, checks: Sequence[str], message: str,
                 run_id: str | None = None) -> RegressionCase:
    return RegressionCase(id=case_id, fixture_id=fixture_id, run_id=run_id,
                          checks=[_check(c, False, message) for c in checks])


def is_path(ref: str) -> bool:
    return ref.endswith(".json") or "/" in ref or os.sep in ref


def resolve_fixture(ref: str, base: Path, fixtures_dir: Path) -> ReplayFixture | None:
    """The fixture ``ref`` names, or ``None`` when there is no such file."""
    if is_path(ref):
        path = Path(ref) if Path(ref).is_absolute() else base / ref
        try:
            return read_fixture(path)
        except FileNotFoundError:
            return None
    return FileFixtureStore(fixtures_dir).load(ref)


def run_case(case_id: str, fixture: ReplayFixture, events: Sequence[Event],
             checks: Sequence[str], *, check_run_id: bool = False) -> RegressionCase:
    """Compare ``fixture`` with a run's ``events`` under ``checks``; pure."""
    own = own_events(events)
    diff = compare(fixture, own, check_run_id=check_run_id)
    contract = trace = None
    out: list[Check] = []
    for name in checks:
        if name in (*SEQUENCE_FAMILIES, "output"):
            family = diff.family(name)
            out.append(_check(name, family.passed, describe(family) or "matches the fixture"))
        elif name == "output_contract":
            if fixture.output_contract is not None:
                contract = validate_output(final_output(own),
                                           OutputContract("output", fixture.output_contract),
                                           run_id=diff.actual_run_id,
                                           evaluation_id=f"{case_id}:output_contract")
                bad = contract.failed_checks()
                out.append(_check(name, not bad, "; ".join(c.message for c in bad[:3])
                                  or "the output satisfies the fixture's contract"))
            else:
                out.append(_check(name, diff.output.passed, "no contract in the fixture: "
                                  + (describe(diff.output) or "the output matches")))
        else:  # trace_completeness
            trace = evaluate_trace(own, run_id=diff.actual_run_id)
            bad = trace.failed_checks()
            out.append(_check(name, not bad, ", ".join(c.id for c in bad[:5])
                              or "the trace is complete"))
    return RegressionCase(id=case_id, fixture_id=fixture.id, run_id=diff.actual_run_id,
                          checks=out, diff=diff, contract=contract, trace=trace)


def _compared_run(spec: RegressionSpec, ref: str, fixture: ReplayFixture) -> str | None:
    return spec.runs.get(ref) or spec.runs.get(fixture.id)


def _check_runs_keys(spec: RegressionSpec, known: set[str]) -> None:
    unknown = sorted(set(spec.runs) - known)
    if unknown:
        raise InvalidRegressionSpec(f"spec {spec.id}: runs names {', '.join(unknown)}, which "
                                    "is not one of its fixtures")


def run_regression(spec: RegressionSpec, store: EventStore, *,
                   fixtures_dir: str | os.PathLike[str] | None = None,
                   record_events: bool = True) -> RegressionReport:
    """Run every case of ``spec`` against ``store``.

    A fixture that cannot be found gives the case ``missing:<ref>`` with every required
    check failed; a run that is not in the store fails every check of its case too. The
    fixture directory defaults to the spec file's directory (else the working directory).
    """
    base = spec.base or Path.cwd()
    directory = Path(fixtures_dir) if fixtures_dir is not None else base
    checks: list[str] = list(spec.required_checks)
    resolved = [(ref, resolve_fixture(ref, base, directory)) for ref in spec.fixtures]
    _check_runs_keys(spec, {ref for ref, _ in resolved}
                     | {f.id for _, f in resolved if f is not None})
    cases: list[RegressionCase] = []
    for ref, fixture in resolved:
        if fixture is None:
            cases.append(_failed_case(f"missing:{ref}", ref, checks,
                                      f"fixture {ref} not found"))
            continue
        cases.append(_run_one(spec, store, ref, fixture, checks, record_events))
    return RegressionReport(id=f"{spec.id}:run", spec_id=spec.id, cases=cases)


class _CaseIds(TypedDict):
    """What every ``regression.*`` event says first."""

    spec_id: str
    case_id: str
    fixture_id: str


def _run_one(spec: RegressionSpec, store: EventStore, ref: str, fixture: ReplayFixture,
             checks: list[str], record_events: bool) -> RegressionCase:
    case_id = f"{spec.id}:{fixture.id}"
    override = _compared_run(spec, ref, fixture)
    run_id = override or fixture.run_id
    events = store.events(run_id)
    if not events:
        return _failed_case(case_id, fixture.id, checks,
                            f"run {run_id} is not in the event store", run_id)
    head: _CaseIds = {"spec_id": spec.id, "case_id": case_id, "fixture_id": fixture.id}
    if record_events:
        emit(store, run_id, ev.RegressionStarted(**head, checks=checks))
    try:
        case = run_case(case_id, fixture, events, checks, check_run_id=override is None)
    except Exception as exc:
        if record_events:
            emit(store, run_id, ev.RegressionFailed(
                **head, error=f"{type(exc).__name__}: {exc}"[:500]))
        raise
    if record_events:
        emit(store, run_id, ev.RegressionCompleted(
            **head, status="passed" if case.passed else "failed",
            checks={c.id: c.passed for c in case.checks}))
    return case

