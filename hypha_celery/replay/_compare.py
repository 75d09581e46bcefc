"""Compare a fixture with another capture of the same (or another) run: per family,
index-wise mismatches plus multiset missing / extra; the output by canonical JSON."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, computed_field

from hypha_celery.errors import FixtureRunMismatch
from hypha_celery.events.envelope import Event, canonical
from hypha_celery.jsontypes import JsonValue
from hypha_celery.replay._fixture import Projection, ReplayFixture, check_single_run, project

#: The sequence families :func:`compare` checks, in report order (then ``output``).
SEQUENCE_FAMILIES = ("event_types", "state_path", "tool_calls", "model_calls",
                     "policy_decisions", "memory_read_set", "skill_activations",
                     "context_hashes", "reasoning_decisions")
FAMILIES = (*SEQUENCE_FAMILIES, "output")
Family = Literal["event_types", "state_path", "tool_calls", "model_calls", "policy_decisions",
                 "memory_read_set", "skill_activations", "context_hashes",
                 "reasoning_decisions", "output"]


class Mismatch(BaseModel):
    """Position ``index`` differs; ``None`` when one side is shorter."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int
    expected: str | None
    actual: str | None


class SequenceDiff(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    expected: list[str]
    actual: list[str]
    mismatches: list[Mismatch]
    #: in ``expected`` more often than in ``actual`` (multiset difference)
    missing: list[str]
    #: in ``actual`` more often than in ``expected``
    extra: list[str]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> bool:
        return not self.mismatches


class OutputDiff(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    expected: JsonValue = None
    actual: JsonValue = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> bool:
        return canonical(self.expected) == canonical(self.actual)


class TraceDiff(BaseModel):
    """The result of :func:`compare`; ``passed`` when every family passed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fixture_id: str
    expected_run_id: str
    actual_run_id: str
    event_types: SequenceDiff
    state_path: SequenceDiff
    tool_calls: SequenceDiff
    model_calls: SequenceDiff
    policy_decisions: SequenceDiff
    memory_read_set: SequenceDiff
    skill_activations: SequenceDiff
    context_hashes: SequenceDiff
    reasoning_decisions: SequenceDiff
    output: OutputDiff

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> bool:
        return all(self.family(name).passed for name in FAMILIES)

    def family(self, name: str) -> SequenceDiff | OutputDiff:
        if name not in FAMILIES:
            raise KeyError(f"no family {name!r} (known: {', '.join(FAMILIES)})")
        diff: SequenceDiff | OutputDiff = getattr(self, name)
        return diff

    def failed(self) -> list[str]:
        """The families that differ, in report order."""
        return [name for name in FAMILIES if not self.family(name).passed]


def diff_sequences(expected: Sequence[str], actual: Sequence[str]) -> SequenceDiff:
    mismatches = [
        Mismatch(index=i, expected=expected[i] if i < len(expected) else None,
                 actual=actual[i] if i < len(actual) else None)
        for i in range(max(len(expected), len(actual)))
        if i >= len(expected) or i >= len(actual) or expected[i] != actual[i]
    ]
    want, got = Counter(expected), Counter(actual)
    return SequenceDiff(expected=list(expected), actual=list(actual), mismatches=mismatches,
                        missing=list((want - got).elements()),
                        extra=list((got - want).elements()))


def compare(fixture: ReplayFixture, actual: ReplayFixture | Sequence[Event], *,
            check_run_id: bool = False) -> TraceDiff:
    """Compare ``fixture`` with ``actual`` (a run's events, or another fixture's).

    Both sides are projected with the fixture's :class:`~hypha_celery.replay.ReplaySpec`
    (so a family the fixture dropped is dropped from ``actual`` too). With
    ``check_run_id=True`` events of another run than the fixture's raise
    :class:`FixtureRunMismatch`. Pure: nothing is re-executed, read or recorded.
    """
    spec = fixture.replay_spec
    expected = project(fixture.events, spec)
    if isinstance(actual, ReplayFixture):
        actual_run_id, got = actual.run_id, project(actual.events, spec)
    else:
        got = project(actual, spec)
        actual_run_id = check_single_run(got.events)
    if check_run_id and actual_run_id != fixture.run_id:
        raise FixtureRunMismatch(fixture.id, fixture.run_id, actual_run_id)
    return _diff(fixture, expected, got, actual_run_id)


def _diff(fixture: ReplayFixture, expected: Projection, got: Projection,
          actual_run_id: str) -> TraceDiff:
    seqs = {name: diff_sequences(getattr(expected, name), getattr(got, name))
            for name in SEQUENCE_FAMILIES}
    return TraceDiff(fixture_id=fixture.id, expected_run_id=fixture.run_id,
                     actual_run_id=actual_run_id,
                     output=OutputDiff(expected=expected.final_output, actual=got.final_output),
                     **seqs)


def describe(diff: SequenceDiff | OutputDiff, limit: int = 3) -> str:
    """One line about a family's difference (empty when it passed)."""
    if diff.passed:
        return ""
    if isinstance(diff, OutputDiff):
        return f"expected {_short(canonical(diff.expected))}, got {_short(canonical(diff.actual))}"
    parts = []
    for m in diff.mismatches[:limit]:
        parts.append(f"[{m.index}] expected {_short(m.expected)} got {_short(m.actual)}")
    if len(diff.mismatches) > limit:
        parts.append(f"... {len(diff.mismatches) - limit} more")
    if diff.missing:
        parts.append(f"missing {', '.join(_short(v) for v in diff.missing[:limit])}"
                     + (" ..." if len(diff.missing) > limit else ""))
    if diff.extra:
        parts.append(f"extra {', '.join(_short(v) for v in diff.extra[:limit])}"
                     + (" ..." if len(diff.extra) > limit else ""))
    return "; ".join(parts)


def _short(value: str | None, width: int = 60) -> str:
    if value is None:
        return "(none)"
    return value if len(value) <= width else value[:width - 3] + "..."
