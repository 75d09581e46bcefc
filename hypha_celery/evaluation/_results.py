"""Checks, results and summaries: what every evaluator returns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypedDict

from pydantic import BaseModel, ConfigDict, computed_field

from hypha_celery.jsontypes import JsonValue

#: An evaluation's verdict (a result's, a summary's).
EvaluationStatus = Literal["passed", "failed"]


class ResultBrief(TypedDict):
    id: str
    kind: str
    status: EvaluationStatus
    failed_checks: list[str]


class SummaryBrief(TypedDict):
    """:meth:`EvaluationSummary.brief`: ids, verdicts and counts (``eval.completed``)."""

    id: str
    status: EvaluationStatus
    score: float
    results: list[ResultBrief]


class Check(BaseModel):
    """One verdict. ``path`` (``$.a[0]``) locates an output-contract issue."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    passed: bool
    message: str = ""
    path: str | None = None
    expected: JsonValue = None
    actual: JsonValue = None


class EvaluationResult(BaseModel):
    """The checks of one evaluator run; ``score`` is ``(total - failed) / max(1, total)``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    kind: str
    run_id: str | None = None
    checks: list[Check]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def status(self) -> EvaluationStatus:
        return "passed" if self.passed else "failed"

    @computed_field  # type: ignore[prop-decorator]
    @property
    def score(self) -> float:
        failed = sum(1 for c in self.checks if not c.passed)
        total = max(1, len(self.checks))
        return (total - failed) / total

    def failed_checks(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]


class EvaluationSummary(BaseModel):
    """Several results; passes when every result passes; ``score`` is their mean (1.0
    when there are none)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    run_id: str | None = None
    results: list[EvaluationResult]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def status(self) -> EvaluationStatus:
        return "passed" if self.passed else "failed"

    @computed_field  # type: ignore[prop-decorator]
    @property
    def score(self) -> float:
        return sum(r.score for r in self.results) / len(self.results) if self.results else 1.0

    def brief(self) -> SummaryBrief:
        """Ids, verdicts and counts only (never outputs or messages): what ``eval.completed``
        carries."""
        return {"id": self.id, "status": self.status, "score": self.score,
                "results": [{"id": r.id, "kind": r.kind, "status": r.status,
                             "failed_checks": [c.id for c in r.failed_checks()][:50]}
                            for r in self.results]}


def result(id: str, kind: str, checks: Sequence[Check], run_id: str | None = None
           ) -> EvaluationResult:
    return EvaluationResult(id=id, kind=kind, run_id=run_id, checks=list(checks))
