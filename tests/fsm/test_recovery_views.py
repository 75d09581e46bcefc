"""A recovery case where people and tools look: ``hypha status``, the audit view and the
trace (span events of the coordinator step under TracingMiddleware)."""

from __future__ import annotations

import time
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from hypha_celery import Hypha, Settings
from hypha_celery.cli.status import status_lines
from hypha_celery.events.status import CaseStatus
from hypha_celery.fsm import Fsm, WorkflowSpec, workflow_graph
from hypha_celery.tracing import TracingMiddleware
from tests.fsm.test_recovery_cases import NODES, booking, waiting
from tests.runtime.support import WAIT, running


def register(h: Hypha, spec: dict[str, Any]) -> None:
    h.register(workflow_graph(Fsm(WorkflowSpec.model_validate(spec), NODES), NODES,
                              max_steps=40))


def test_status_shows_the_workflow_state_and_its_case(store_url: str) -> None:
    with running(store_url) as h:
        register(h, booking({"strategies": ["retry", "fallback", "escalate"]}))
        run = h.start("booking", {"charge": "always", "backup": "fail"})
        waiting(run)
        lines = dict(line.split(None, 1) for line in status_lines(run.status()))
        assert lines["state"] == "HumanReview"
        case = lines["case"]
        assert case.startswith(f"{run.id}:case:1 escalated in Charge (fallback #2, 4 cycles")
        assert case.endswith("compensated Reserve: max_same_strategy")
        assert run.status().case is not None and run.status().case["status"] == "escalated"
        done = h.start("booking", {"charge": 1})
        done.wait(WAIT)
        assert "resolved in Charge (retry #1, 1 cycles" in dict(
            line.split(None, 1) for line in status_lines(done.status()))["case"]


def test_the_audit_lists_each_case_and_its_cycles(store_url: str) -> None:
    with running(store_url) as h:
        register(h, booking())
        run = h.start("booking", {"charge": "always"})
        run.wait(WAIT)
        (case,) = run.audit().recovery_cases
        assert (case.state, case.node, case.status) == ("Charge", "charge", CaseStatus.DEGRADED)
        assert case.fingerprint == "Charge:charge:ConnectionError:transient"
        assert [(c.strategy, c.attempt, c.target, c.progress, c.reason) for c in case.cycles] == [
            ("retry", 1, "Charge", True, "first"), ("retry", 2, "Charge", False, "again"),
            ("fallback", 1, "Backup", False, "no_progress")]
        assert case.reason == "fallback" and case.error is None
        failed = h.start("booking", {"charge": "invalid", "release": "raise"})
        waiting(failed)
        (bad,) = failed.audit().recovery_cases
        assert (bad.status, bad.reason, bad.error) == (
            CaseStatus.ESCALATED, "compensation_failed", ("RuntimeError", "unknown"))
        assert "reservation api down" not in failed.audit().model_dump_json()


def case_events(exporter: InMemorySpanExporter) -> list[Any]:
    return [e for s in exporter.get_finished_spans() if s.name == "hypha.step"
            for e in s.events if e.name.startswith("recovery.case.")]


def test_case_events_are_span_events_of_the_step(sqlite_url: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    h = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                       store_url=sqlite_url, embedded=True),
              middleware=[TracingMiddleware(provider)])
    try:
        register(h, booking())
        run = h.start("booking", {"charge": 1})
        run.wait(WAIT)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(case_events(exporter)) < 3:
            time.sleep(0.02)  # the last step's span ends after the run's wait wakes
    finally:
        h.close()
    events = case_events(exporter)
    assert [e.name for e in events] == ["recovery.case.opened", "recovery.case.attempted",
                                        "recovery.case.resolved"]
    attempted = dict(events[1].attributes or {})
    assert attempted["hypha.case_id"] == f"{run.id}:case:1"
    assert (attempted["hypha.strategy"], attempted["hypha.cycle"]) == ("retry", 1)
    assert len(str(attempted["hypha.evidence"])) == 16
    assert dict(events[2].attributes or {})["hypha.status"] == "resolved"
    assert all("gateway down" not in str(dict(e.attributes or {})) for e in events)


def test_hypha_audit_prints_the_cases(store_url: str) -> None:
    from hypha_celery.cli.views import audit_lines

    with running(store_url) as h:
        register(h, booking())
        run = h.start("booking", {"charge": "always"})
        run.wait(WAIT)
        lines = audit_lines(run.audit())
    start = lines.index("cases     1")
    assert lines[start + 1] == f"  {run.id}:case:1  Charge/charge  degraded (fallback)"
    cycles = lines[start + 2:start + 5]
    assert [c.split()[2:5] for c in cycles] == [["retry", "#1", "->"], ["retry", "#2", "->"],
                                                ["fallback", "#1", "->"]]
    assert cycles[1].endswith("(no progress)  again")
    assert lines[start + 5].startswith("outcome   completed")
