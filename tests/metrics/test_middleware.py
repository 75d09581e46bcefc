"""PrometheusMiddleware: what each hook records, in a registry of the test's own."""

from __future__ import annotations

import time
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from hypha_celery import Finish, Graph, Hypha, Next, Node, RetryPolicy, RunFailed, Settings
from hypha_celery.metrics import PrometheusMiddleware, names
from hypha_celery.middleware import Attempt, AttemptEnd, Call, CallEnd, RunEnd, RunStart, Sweep

AT = Attempt("r1", "r1.1", "lookup", 1)


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def mw(registry: CollectorRegistry) -> PrometheusMiddleware:
    return PrometheusMiddleware(registry)


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def test_runs_by_graph_status_and_reason(mw: PrometheusMiddleware,
                                         registry: CollectorRegistry) -> None:
    mw.after_run_start(RunStart("r1", "support"))
    mw.after_run_start(RunStart("r2", "support", queued=True))
    mw.after_run_end(RunEnd("r1", "completed", graph_id="support"))
    mw.after_run_end(RunEnd("r2", "failed", "dead_lettered", graph_id="support"))
    mw.after_run_end(RunEnd("r3", "failed", None, graph_id="support"))
    mw.after_run_end(RunEnd("r4", "cancelled", graph_id=""))
    assert value(registry, "hypha_runs_started_total", graph="support") == 1
    assert value(registry, "hypha_runs_queued_total", graph="support") == 1
    assert value(registry, "hypha_runs_completed_total", graph="support") == 1
    assert value(registry, "hypha_runs_failed_total", graph="support",
                 reason="dead_lettered") == 1
    assert value(registry, "hypha_runs_failed_total", graph="support", reason="none") == 1
    assert value(registry, "hypha_runs_cancelled_total", graph="none") == 1


def test_model_and_tool_call_durations_by_kind_name_and_outcome(
        mw: PrometheusMiddleware, registry: CollectorRegistry) -> None:
    model = Call("r1", "r1.1", "ask", "model", "openai:gpt-test", "r1.1:m0")
    tool = Call("r1", "r1.1", "ask", "tool", "search", "r1.1:t1")
    mw.after_call(model, CallEnd(1.25, None, 10, 5))
    mw.after_call(tool, CallEnd(0.05, "ConnectionError"))
    duration = "hypha_call_duration_seconds"

    def sample(suffix: str, **labels: str) -> float:  # ``name`` is a label here
        return registry.get_sample_value(f"{duration}_{suffix}", labels) or 0.0

    assert sample("count", kind="model", name="openai:gpt-test", outcome="ok") == 1
    assert sample("sum", kind="model", name="openai:gpt-test",
                  outcome="ok") == pytest.approx(1.25)
    assert sample("count", kind="tool", name="search", outcome="error") == 1


def test_node_durations_retries_dead_letters_late_results(
        mw: PrometheusMiddleware, registry: CollectorRegistry) -> None:
    mw.after_attempt(AT, AttemptEnd(True, None, 0.2))
    mw.after_attempt(AT, AttemptEnd(False, "ValueError", 1.5))
    mw.after_attempt(AT, AttemptEnd(False, "Stale"))  # the node did not run: not timed
    mw.after_retry_scheduled(AT, 0.5)
    mw.after_dead_letter(AT, "retries_exhausted")
    mw.after_late_result(AT, "timeout")
    duration = "hypha_node_duration_seconds"
    assert value(registry, f"{duration}_count", node="lookup", outcome="ok") == 1
    assert value(registry, f"{duration}_sum", node="lookup", outcome="ok") == pytest.approx(0.2)
    assert value(registry, f"{duration}_count", node="lookup", outcome="error") == 1
    assert value(registry, "hypha_node_retries_total", node="lookup") == 1
    assert value(registry, "hypha_dead_letters_total", node="lookup",
                 reason="retries_exhausted") == 1
    assert value(registry, "hypha_late_results_total", node="lookup", reason="timeout") == 1


def test_sweeps(mw: PrometheusMiddleware, registry: CollectorRegistry) -> None:
    mw.after_sweep(Sweep(0.03, 2))
    mw.after_sweep(Sweep(0.01, 0))
    assert value(registry, "hypha_supervisor_sweep_duration_seconds_count") == 2
    assert value(registry, "hypha_supervisor_sweep_duration_seconds_sum") == \
        pytest.approx(0.04)
    assert value(registry, "hypha_supervisor_decisions_total") == 2


def test_labels_never_carry_run_ids(mw: PrometheusMiddleware,
                                    registry: CollectorRegistry) -> None:
    mw.after_run_end(RunEnd("run-secret", "completed", graph_id="g"))
    mw.after_attempt(Attempt("run-secret", "run-secret.1", "n", 1), AttemptEnd(True))
    for family in registry.collect():
        for sample in family.samples:
            assert "run-secret" not in str(sample.labels)


def test_every_recorded_name_is_registered(mw: PrometheusMiddleware,
                                           registry: CollectorRegistry) -> None:
    registered = {family.name for family in registry.collect()}
    assert set(names.RECORDED) <= registered


# -- through the runtime: the hooks a real (embedded) run calls -------------------------
def policy(ctx: Any) -> Next | Finish:
    if ctx.step == 0:
        return Next("a", ctx.input)
    return Finish(ctx.state)


def ok(state: dict[str, Any], inp: Any) -> dict[str, Any]:
    return {"n": inp}


def bad(state: dict[str, Any], inp: Any) -> dict[str, Any]:
    raise ConnectionError("down")


def test_an_embedded_run_is_counted_by_graph(sqlite_url: str,
                                             registry: CollectorRegistry) -> None:
    mw = PrometheusMiddleware(registry)
    hypha = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                           store_url=sqlite_url, embedded=True), middleware=[mw])
    try:
        hypha.register(Graph("m_ok", {"a": Node(ok)}, policy))
        hypha.register(Graph("m_bad", {"a": Node(bad, retry=RetryPolicy(
            max_attempts=2, backoff=0.01, max_backoff=0.02))}, policy))
        assert hypha.start("m_ok", 1).wait(30) == {"n": 1}
        with pytest.raises(RunFailed):
            hypha.start("m_bad", 1).wait(30)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not value(
                registry, "hypha_runs_failed_total", graph="m_bad", reason="dead_lettered"):
            time.sleep(0.02)  # the after-commit hooks run right after the waiter wakes
    finally:
        hypha.close()
    assert value(registry, "hypha_runs_started_total", graph="m_ok") == 1
    assert value(registry, "hypha_runs_completed_total", graph="m_ok") == 1
    assert value(registry, "hypha_node_duration_seconds_count", node="a", outcome="ok") == 1
    assert value(registry, "hypha_node_duration_seconds_count", node="a",
                 outcome="error") == 2
    assert value(registry, "hypha_node_retries_total", node="a") == 1
    assert value(registry, "hypha_dead_letters_total", node="a",
                 reason="retries_exhausted") == 1
    assert value(registry, "hypha_runs_failed_total", graph="m_bad",
                 reason="dead_lettered") == 1


def test_two_middleware_on_one_registry_share_its_metrics(
        registry: CollectorRegistry) -> None:
    first, second = PrometheusMiddleware(registry), PrometheusMiddleware(registry)
    first.after_run_end(RunEnd("r1", "completed", graph_id="g"))
    second.after_run_end(RunEnd("r2", "completed", graph_id="g"))
    assert value(registry, "hypha_runs_completed_total", graph="g") == 2
