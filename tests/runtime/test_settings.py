"""The failure-handling settings: parsed from the environment, checked at register,
and in the Celery profile."""

from __future__ import annotations

import pytest

from hypha_celery import Graph, GraphSpecError, Hypha, Next, Node, RetryPolicy, Settings
from hypha_celery.errors import SetupError
from hypha_celery.runtime.config import celery_config


def test_from_env_reads_the_failure_settings() -> None:
    s = Settings.from_env({"HYPHA_BROKER_URL": "redis://h/1", "HYPHA_VISIBILITY_TIMEOUT": "120",
                           "HYPHA_SWEEP_INTERVAL": "2", "HYPHA_DELIVERY_LIMIT": "5",
                           "HYPHA_LEASE_INTERVAL": "0.5"})
    assert (s.visibility_timeout, s.sweep_interval, s.delivery_limit, s.lease_interval) == (
        120.0, 2.0, 5, 0.5)
    defaults = Settings.from_env({})
    assert (defaults.visibility_timeout, defaults.sweep_interval, defaults.delivery_limit,
            defaults.lease_interval) == (3600.0, 5.0, 3, 1.0)
    assert defaults.broker_delivery_limit == 10
    assert Settings.from_env({"HYPHA_DELIVERY_LIMIT": "5"}).broker_delivery_limit == 15
    assert Settings.from_env({"HYPHA_BROKER_DELIVERY_LIMIT": "4"}).broker_delivery_limit == 4
    with pytest.raises(SetupError, match="HYPHA_VISIBILITY_TIMEOUT"):
        Settings.from_env({"HYPHA_VISIBILITY_TIMEOUT": "soon"})


def test_the_celery_profile_acks_late_and_schedules_the_supervisor() -> None:
    conf = celery_config(Settings.from_env({"HYPHA_BROKER_URL": "redis://h/1",
                                            "HYPHA_VISIBILITY_TIMEOUT": "900"}))
    assert conf["task_reject_on_worker_lost"] is True
    assert conf["broker_transport_options"]["visibility_timeout"] == 900.0
    assert conf["result_backend_transport_options"]["visibility_timeout"] == 900.0
    entry = conf["beat_schedule"]["hypha-supervisor"]
    assert entry["task"] == "hypha.supervisor" and entry["schedule"] == 5.0
    assert conf["beat_scheduler"] == "celery.beat:Scheduler"  # no shelve (pickle) file
    assert "hypha.effects" in {q.name for q in conf["task_queues"]}


def test_idempotent_tasks_ack_late_and_effects_ack_early(sqlite_url: str) -> None:
    hypha = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                           store_url=sqlite_url, embedded=True))
    try:
        hypha.register(Graph("acks", {"pure": lambda s, i: {},
                                      "pay": Node(lambda s, i: {}, side_effect="irreversible")},
                             lambda ctx: Next("pure")))
        tasks = hypha.celery.tasks
        assert tasks["acks.pure"].acks_late and tasks["acks.pure"].reject_on_worker_lost
        assert not tasks["acks.pay"].acks_late and not tasks["acks.pay"].reject_on_worker_lost
        assert tasks["hypha.coordinator"].acks_late
    finally:
        hypha.close()


def test_register_refuses_a_node_that_outlives_the_visibility_timeout(sqlite_url: str) -> None:
    hypha = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                           store_url=sqlite_url, embedded=True, visibility_timeout=60.0))
    try:
        slow = Graph("slow", {"a": Node(lambda s, i: {}, timeout=50)}, lambda ctx: Next("a"))
        with pytest.raises(GraphSpecError, match="HYPHA_VISIBILITY_TIMEOUT is 60s"):
            hypha.register(slow)
        retried = Graph("retried", {"a": Node(lambda s, i: {}, timeout=10,
                                              retry=RetryPolicy(max_backoff=45))},
                        lambda ctx: Next("a"))
        with pytest.raises(GraphSpecError):
            hypha.register(retried)  # 10 s + 5 s grace + 45 s retry delay
        assert "slow" not in hypha.graphs and "retried" not in hypha.graphs
        hypha.register(Graph("fits", {"a": Node(lambda s, i: {}, timeout=10)},
                             lambda ctx: Next("a")))
    finally:
        hypha.close()
