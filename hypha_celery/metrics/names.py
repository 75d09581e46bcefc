"""Every metric name hypha exports (docs/operations.md "Metrics" lists the same).

Counters are exposed with Prometheus' ``_total`` suffix, histograms with ``_bucket``,
``_sum`` and ``_count``. Labels are bounded: graph and node ids, queues, statuses,
reasons, error type names, the model references and tool names nodes call and the MCP
servers and tools the gateway discovered, never a run, user or session id."""

from __future__ import annotations

from typing import Final

RUNS_STARTED: Final = "hypha_runs_started"
RUNS_QUEUED: Final = "hypha_runs_queued"
RUNS_COMPLETED: Final = "hypha_runs_completed"
RUNS_FAILED: Final = "hypha_runs_failed"
RUNS_CANCELLED: Final = "hypha_runs_cancelled"
NODE_DURATION: Final = "hypha_node_duration_seconds"
CALL_DURATION: Final = "hypha_call_duration_seconds"
MODEL_CALL_FAILURES: Final = "hypha_model_call_failures"
NODE_RETRIES: Final = "hypha_node_retries"
DEAD_LETTERS: Final = "hypha_dead_letters"
LATE_RESULTS: Final = "hypha_late_results"
SWEEP_DURATION: Final = "hypha_supervisor_sweep_duration_seconds"
SWEEP_DECISIONS: Final = "hypha_supervisor_decisions"
QUEUE_DEPTH: Final = "hypha_queue_depth"
AGENTS: Final = "hypha_agents"
BUS_MESSAGES: Final = "hypha_bus_messages"
BUS_OLDEST_AGE: Final = "hypha_bus_oldest_age_seconds"
BUS_FULLEST_QUEUE: Final = "hypha_bus_fullest_queue"
RECOVERY_CASES: Final = "hypha_recovery_cases"
SESSIONS_OPENED: Final = "hypha_sessions_opened"
MCP_CALLS: Final = "hypha_mcp_calls"
MCP_CALL_SECONDS: Final = "hypha_mcp_call_seconds"
MCP_TOOLS_QUARANTINED: Final = "hypha_mcp_tools_quarantined"

#: Counters and histograms (recorded by :class:`~hypha_celery.metrics.PrometheusMiddleware`).
RECORDED: Final = (RUNS_STARTED, RUNS_QUEUED, RUNS_COMPLETED, RUNS_FAILED, RUNS_CANCELLED,
                   NODE_DURATION, CALL_DURATION, MODEL_CALL_FAILURES, NODE_RETRIES,
                   DEAD_LETTERS, LATE_RESULTS, SWEEP_DURATION, SWEEP_DECISIONS, MCP_CALLS,
                   MCP_CALL_SECONDS)
#: Gauges read on scrape (:class:`~hypha_celery.metrics.HyphaCollector`).
GAUGES: Final = (QUEUE_DEPTH, AGENTS, BUS_MESSAGES, BUS_OLDEST_AGE, BUS_FULLEST_QUEUE,
                 RECOVERY_CASES, SESSIONS_OPENED, MCP_TOOLS_QUARANTINED)
ALL: Final = RECORDED + GAUGES
