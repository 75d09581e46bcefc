"""A run's page shows its workflow's recovery case (ids, status, strategy, evidence)."""

from __future__ import annotations

from hypha_celery import Hypha
from hypha_celery.fsm import Fsm, WorkflowSpec, workflow_graph
from tests.console.support import Tokens, app_for, client
from tests.fsm.test_recovery_cases import NODES, booking, waiting


def test_the_run_page_shows_the_case(hypha: Hypha, t: Tokens) -> None:
    spec = booking({"strategies": ["retry", "escalate"], "max_same_strategy": 1})
    hypha.register(workflow_graph(Fsm(WorkflowSpec.model_validate(spec), NODES), NODES,
                                  max_steps=40))
    run = hypha.as_user(t.alice_id).start("booking", {"charge": "always"})
    waiting(run)
    page = client(app_for(hypha, t), t.alice).get(f"/runs/{run.id}").text
    assert 'id="recovery-case"' in page
    assert f"{run.id}:case:1" in page and "escalated" in page
    assert "Charge:charge:ConnectionError:transient" in page
    assert "max_same_strategy" in page and "Reserve" in page
    quiet = hypha.as_user(t.alice_id).start("booking", {"charge": "ok"}, session_id="s2")
    quiet.wait(30)
    assert 'id="recovery-case"' not in client(app_for(hypha, t), t.alice).get(
        f"/runs/{quiet.id}").text
