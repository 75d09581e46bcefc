"""The app the bus's worker tests run (``build(settings) -> Hypha``)."""

from __future__ import annotations

from hypha_celery import Hypha, Settings


def build(settings: Settings) -> Hypha:
    return Hypha(settings)


def article(settings: Settings) -> Hypha:
    """The app with a workflow that hands its draft to agent ``writer``."""
    hypha = Hypha(settings)
    register_article(hypha)
    return hypha


def register_article(hypha: Hypha, timeout: float = 60) -> None:
    """Workflow ``article``: Write (hand the topic to agent ``writer``), Publish (its
    reply, upper-cased), Done."""
    from hypha_celery.bus import hand_off
    from hypha_celery.fsm import Fsm, WorkflowSpec, workflow_graph

    nodes = {"write": hand_off(hypha.bus, "writer", lambda state, req: f"write {req['topic']}",
                               timeout=timeout),
             "publish": lambda state, req: {"published": state["reply"].upper()}}
    spec = WorkflowSpec.model_validate({
        "id": "article", "initial_state": "Write", "terminal_states": ["Done"],
        "states": [{"id": "Write", "node": "write"}, {"id": "Publish", "node": "publish"},
                   {"id": "Done"}],
        "transitions": [{"from": "Write", "to": "Publish"},
                        {"from": "Publish", "to": "Done"}]})
    hypha.register(workflow_graph(Fsm(spec, nodes), nodes))
