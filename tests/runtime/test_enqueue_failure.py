"""A run whose kickoff cannot be published is failed, never left hanging."""

from __future__ import annotations

import pytest

from hypha_celery import BrokerUnavailable, Finish, Graph, Hypha, RunFailed, Settings


def test_unreachable_broker_fails_the_run_with_a_typed_error(sqlite_url: str) -> None:
    # a real Redis client pointed at a closed port: the publish fails for real
    settings = Settings(broker_url="redis://127.0.0.1:1/0", result_backend="redis://127.0.0.1:1/0",
                        store_url=sqlite_url, embedded=False)
    hypha = Hypha(settings)
    hypha.celery.conf.broker_connection_max_retries = 0
    hypha.celery.conf.broker_transport_options = {"max_retries": 0}
    hypha.register(Graph(id="g", nodes={"n": lambda s, i: {}}, decision_policy=lambda c: Finish()))
    try:
        with pytest.raises(BrokerUnavailable):
            hypha.start("g", {})
        (run_id,) = hypha.store.run_ids()
        view = hypha.store.get(run_id)
        assert view["status"] == "failed"
        assert view["error"]["reason"] == "enqueue_failed"
        kinds = [e.kind for e in hypha.store.events(run_id)]
        assert kinds == ["run.created", "run.started", "run.failed"]
        assert hypha.store.rebuild(run_id) == view
        with pytest.raises(RunFailed):
            hypha.get_run(run_id).wait(timeout=1)
    finally:
        hypha.close()
