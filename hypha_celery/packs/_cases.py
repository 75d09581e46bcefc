"""Pack test runs: a pack's ``evaluation_cases`` and ``regression_cases`` run as real runs
on a host (the embedded default, or workers on a broker) and judged by the evaluation
machinery (:mod:`hypha_celery.evaluation`); nothing here is a second evaluator.

- An **evaluation case** runs its workflow on its input; the run must complete, its output
  must meet the case's output contract (default: the workflow's) and its trace must be
  complete (:func:`~hypha_celery.evaluation.evaluate_run`: ``eval.*`` in its log).
- A **regression case** runs its workflow and compares the run, check by check
  (:func:`~hypha_celery.evaluation.run_case`; default checks ``event_types``,
  ``state_path``, ``output_contract``), with its ``fixture`` (a replay fixture file,
  ``hypha capture``, relative to the pack file) or, without one, with a first run of the
  same case made in this test run (the workflow must reproduce itself). The compared run
  records ``regression.started`` / ``regression.completed``.

Bounds: at most :data:`MAX_CASES` cases per test run; each run gets ``timeout`` seconds
(default :data:`DEFAULT_CASE_TIMEOUT`, at most :data:`MAX_CASE_TIMEOUT`), then it is
cancelled and its case is an error. A case whose run waits for a person (a human review),
or is parked or quarantined, is an error at once: a case runs unattended. The pack is
checked before any run starts (a case naming a missing workflow is a
:class:`~hypha_celery.errors.PackError`, nothing started).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, computed_field

from hypha_celery.errors import HyphaError, PackError, RunFailed, WaitTimeout
from hypha_celery.evaluation import (
    DEFAULT_CHECKS,
    Check,
    OutputContract,
    TraceSpec,
    evaluate_run,
    record,
    run_case,
)
from hypha_celery.events import TERMINAL_STATUSES
from hypha_celery.events import payloads as ev
from hypha_celery.packs._check import problems
from hypha_celery.packs._model import DomainPack, PackCase
from hypha_celery.replay import ReplayFixture, capture, read_fixture
from hypha_celery.store import EventStore

__all__ = ["DEFAULT_CASE_TIMEOUT", "MAX_CASES", "MAX_CASE_TIMEOUT", "CaseHost", "CaseKind",
           "CaseResult", "CaseRun", "CaseStatus", "PackTestReport", "case_lines",
           "run_cases", "selected_cases"]

#: The most cases one pack test run runs (evaluation and regression together).
MAX_CASES = 1_000
#: Seconds one case's run may take before it is cancelled and the case is an error.
DEFAULT_CASE_TIMEOUT = 60.0
#: The largest ``timeout`` a pack test run accepts.
MAX_CASE_TIMEOUT = 3_600.0
#: How often a waiting case looks at its run's status (a run's end wakes it sooner).
_SLICE = 0.5
_WAITING = ("queued", "running")


class CaseKind(StrEnum):
    EVALUATION = "evaluation"
    REGRESSION = "regression"


class CaseStatus(StrEnum):
    """``failed``: the run completed and a check failed; ``error``: the run did not
    complete (failed, cancelled, timed out, held for a person) or could not start."""

    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"


class CaseResult(BaseModel):
    """One case's verdict: its runs, its checks (every check, passed or not) and, for a
    failure or an error, one line saying why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    kind: CaseKind
    workflow: str
    status: CaseStatus
    run_ids: list[str] = []
    checks: list[Check] = []
    message: str = ""
    duration: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status is CaseStatus.PASSED


class PackTestReport(BaseModel):
    """Every case of one pack test run, in the pack's order (evaluation cases first)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pack: str  # id@version
    cases: list[CaseResult]
    duration: float = 0.0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.cases)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def summary(self) -> dict[str, int]:
        count = {s: sum(1 for c in self.cases if c.status is s) for s in CaseStatus}
        return {"total": len(self.cases), "passed": count[CaseStatus.PASSED],
                "failed": count[CaseStatus.FAILED], "errors": count[CaseStatus.ERROR]}


class CaseRun(Protocol):
    """What a started run offers (a :class:`~hypha_celery.RunHandle`)."""

    id: str

    def wait(self, timeout: float | None = None) -> Any: ...
    def cancel(self) -> bool: ...


class CaseHost(Protocol):
    """Where cases run: a :class:`~hypha_celery.Hypha` (or a client bound to a principal)
    with the pack's graphs registered."""

    @property
    def store(self) -> EventStore: ...
    def start(self, graph: str, input: Any = None) -> CaseRun: ...


def selected_cases(pack: DomainPack, only: Iterable[str] = ()
                   ) -> list[tuple[CaseKind, PackCase]]:
    """The cases to run (``only``: these ids; default every case), after checking the
    whole pack; :class:`PackError` for a broken pack (a case naming a missing workflow),
    an unknown id in ``only`` or more than :data:`MAX_CASES` cases."""
    found = problems(pack)
    if found:
        raise PackError(found)
    cases = [(CaseKind.EVALUATION, c) for c in pack.evaluation_cases]
    cases += [(CaseKind.REGRESSION, c) for c in pack.regression_cases]
    wanted = list(dict.fromkeys(only))
    if wanted:
        known = {c.id for _, c in cases}
        unknown = [w for w in wanted if w not in known]
        if unknown:
            raise PackError([("", f"no case {u!r} in pack {pack.ref} (known: "
                                  f"{', '.join(sorted(known)) or 'none'})") for u in unknown])
        cases = [(k, c) for k, c in cases if c.id in wanted]
    if len(cases) > MAX_CASES:
        raise PackError([("", f"{len(cases)} cases: a pack test runs at most {MAX_CASES} "
                              "(pick some with --case)")])
    return cases


def run_cases(pack: DomainPack, host: CaseHost, *, only: Iterable[str] = (),
              timeout: float = DEFAULT_CASE_TIMEOUT, base_dir: str | Path | None = None,
              on_start: Callable[[CaseKind, PackCase], None] | None = None,
              on_done: Callable[[CaseResult], None] | None = None) -> PackTestReport:
    """Run the cases of ``pack`` (``only``: these ids) one after another on ``host``,
    each run bounded by ``timeout`` seconds; ``base_dir``: where a regression case's
    ``fixture`` is (the pack file's directory; default the working directory).
    ``on_start`` / ``on_done`` follow the progress. Checks the pack first (nothing runs
    when it has a problem); a case that cannot start or whose run does not complete is an
    ``error`` case, never an exception."""
    if not 0 < timeout <= MAX_CASE_TIMEOUT:
        raise PackError([("", f"a case timeout is more than 0 and at most "
                              f"{MAX_CASE_TIMEOUT:g} seconds, not {timeout:g}")])
    cases = selected_cases(pack, only)
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    began = time.monotonic()
    results: list[CaseResult] = []
    for kind, case in cases:
        if on_start is not None:
            on_start(kind, case)
        result = _run_one(pack, host, kind, case, timeout, base)
        results.append(result)
        if on_done is not None:
            on_done(result)
    return PackTestReport(pack=pack.ref, cases=results, duration=time.monotonic() - began)


# -- one case -----------------------------------------------------------------------------
class _NotCompleted(Exception):
    """A case's run did not complete: the case is an error (``str``: why)."""


def _run_one(pack: DomainPack, host: CaseHost, kind: CaseKind, case: PackCase,
             timeout: float, base: Path) -> CaseResult:
    began = time.monotonic()
    runs: list[str] = []
    try:
        if kind is CaseKind.EVALUATION:
            checks = _evaluation(pack, host, case, timeout, runs)
        else:
            checks = _regression(pack, host, case, timeout, base, runs)
    except (_NotCompleted, HyphaError, OSError) as exc:
        return CaseResult(id=case.id, kind=kind, workflow=case.workflow,
                          status=CaseStatus.ERROR, run_ids=runs, message=_line(exc),
                          duration=time.monotonic() - began)
    failed = [c for c in checks if not c.passed]
    message = "; ".join(f"{c.id}: {c.message}" if c.message else c.id for c in failed[:3])
    return CaseResult(id=case.id, kind=kind, workflow=case.workflow,
                      status=CaseStatus.FAILED if failed else CaseStatus.PASSED,
                      run_ids=runs, checks=checks, message=message,
                      duration=time.monotonic() - began)


def _line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if isinstance(exc, _NotCompleted) else f"{type(exc).__name__}: {text}"


def _contract(pack: DomainPack, case: PackCase) -> OutputContract | None:
    name = case.output_contract or pack.workflow(case.workflow).output_contract
    return OutputContract(name, pack.output_contracts[name]) if name else None


def _evaluation(pack: DomainPack, host: CaseHost, case: PackCase, timeout: float,
                runs: list[str]) -> list[Check]:
    run_id = _completed_run(host, case, timeout, runs)
    contract = _contract(pack, case)
    summary = evaluate_run(host.store, run_id, contracts=[contract] if contract else [],
                           traces=[TraceSpec()])
    return [c for r in summary.results for c in r.checks]


def _regression(pack: DomainPack, host: CaseHost, case: PackCase, timeout: float,
                base: Path, runs: list[str]) -> list[Check]:
    contract = _contract(pack, case)
    fixture: ReplayFixture
    if case.fixture is not None:
        fixture = read_fixture(base / case.fixture)
    else:
        baseline = _completed_run(host, case, timeout, runs)
        fixture = capture(host.store.events(baseline), fixture_id=f"{case.id}.baseline",
                          output_contract=dict(contract.schema) if contract else None)
    run_id = _completed_run(host, case, timeout, runs)
    checks = list(case.checks or DEFAULT_CHECKS)
    case_id = f"{pack.ref}:{case.id}"
    _emit(host.store, run_id, ev.RegressionStarted(
        spec_id=pack.ref, case_id=case_id, fixture_id=fixture.id, checks=checks))
    result = run_case(case_id, fixture, host.store.events(run_id), checks)
    _emit(host.store, run_id, ev.RegressionCompleted(
        spec_id=pack.ref, case_id=case_id, fixture_id=fixture.id,
        status="passed" if result.passed else "failed",
        checks={c.id: c.passed for c in result.checks}))
    return result.checks


def _emit(store: EventStore, run_id: str, payload: ev.Payload) -> None:
    record(store, run_id, payload.kind, payload.dump())


def _completed_run(host: CaseHost, case: PackCase, timeout: float, runs: list[str]) -> str:
    """Start ``case``'s run and wait until it completes; its id. :class:`_NotCompleted`
    when it fails, is cancelled, waits for a person or takes more than ``timeout``
    seconds (it is cancelled then)."""
    run = host.start(case.workflow, case.input)
    runs.append(run.id)
    end = time.monotonic() + timeout
    while True:
        status = host.store.get(run.id)["status"]
        if status in TERMINAL_STATUSES:
            break
        if status not in _WAITING:
            raise _NotCompleted(f"run {run.id} is {status}: a case runs to its end "
                                "unattended (no human review, nothing held)")
        left = end - time.monotonic()
        if left <= 0:
            run.cancel()
            raise _NotCompleted(f"run {run.id} still {status} after {timeout:g}s "
                                "(cancelled)")
        try:
            run.wait(min(left, _SLICE))
        except WaitTimeout:
            continue
        except RunFailed as exc:
            raise _NotCompleted(_ended(run.id, exc)) from None
    try:
        run.wait(0)
    except RunFailed as exc:
        raise _NotCompleted(_ended(run.id, exc)) from None
    return run.id


def _ended(run_id: str, exc: RunFailed) -> str:
    """``run ... failed: node_failed: boom: RuntimeError: ...`` (the error's own line)."""
    return " ".join(str(exc).split()) or f"run {run_id} failed: {exc.reason}"


def case_lines(report: PackTestReport) -> Sequence[str]:
    """One plain line per case, then the verdict (what a log without a table shows)."""
    lines = [f"{c.status.value:<7} {c.kind.value:<10} {c.id}" + (f"  {c.message}"
                                                                  if c.message else "")
             for c in report.cases]
    s = report.summary
    lines.append(f"{report.pack}: {s['total']} cases, {s['passed']} passed, {s['failed']} "
                 f"failed, {s['errors']} errors in {report.duration:.1f}s")
    return lines
