"""``react_graph``: the ReAct workflow with its phase nodes, as a :class:`Graph`."""

from __future__ import annotations

from typing import Any

from hypha_celery.errors import GraphSpecError
from hypha_celery.fsm import Fsm, workflow_graph
from hypha_celery.graph import Graph, Node
from hypha_celery.graph.model import NodeFn
from hypha_celery.react._acting import act_node, policy_check_node
from hypha_celery.react._llm import LLMProvider
from hypha_celery.react._provider import Provider
from hypha_celery.react._reasoning import observe, reason_node, select_action
from hypha_celery.react._verifiers import Verifier, tool_answers
from hypha_celery.react._verifying import memory_sync_node, observe_result, verify_node
from hypha_celery.react._workflow import budget_steps, react_workflow
from hypha_celery.tools import ToolPolicy, ToolRegistry

__all__ = ["react_graph"]


def react_graph(provider: Provider, tools: ToolRegistry, *, policy: ToolPolicy | None = None,
                max_iterations: int = 4, graph_id: str = "react",
                max_steps: int | None = None, verify: Verifier = tool_answers,
                model: str | None = None, memory_limit: int = 20,
                review_expires_in: float | None = None, **graph_options: Any) -> Graph:
    """A graph running :func:`react_workflow` over ``provider`` and ``tools``.

    ``policy``: the tool policy (default :meth:`ToolPolicy.default`); ``max_iterations``:
    model calls before the loop stops with its last observation; ``max_steps``: the
    Graph's bound on node steps (default :func:`budget_steps` of ``max_iterations``,
    enough for every iteration to call a tool); ``verify``: when the loop is done
    (default :func:`tool_answers`, hypha's); ``model``: the name model calls are
    recorded under (default the provider's ``name``, else ``"model"``);
    ``memory_limit``: observations kept in ``variables.memory``. ``graph_options`` go
    to :class:`Graph`. ``provider`` may be an :class:`LLMProvider` (a real model
    through ``ctx.llm``).
    """
    if not (isinstance(max_iterations, int) and max_iterations >= 1):
        raise GraphSpecError(f"max_iterations must be an int >= 1, got {max_iterations!r}")
    if not (isinstance(memory_limit, int) and memory_limit >= 1):
        raise GraphSpecError(f"memory_limit must be an int >= 1, got {memory_limit!r}")
    policy = policy if policy is not None else ToolPolicy.default()
    name = model or str(getattr(provider, "name", "") or "model")
    reason: Any = reason_node(provider, name, tools, max_iterations)
    if isinstance(provider, LLMProvider):  # a real model: the I/O queue, its ref declared
        reason = Node(reason, models=[provider.ref])
    nodes: dict[str, NodeFn | Node] = {
        "observe": observe,
        "reason": reason,
        "select_action": select_action,
        "policy_check": policy_check_node(tools, policy),
        "act": act_node(tools, policy, at_most_once=False),
        "act_effect": act_node(tools, policy, at_most_once=True),
        "observe_result": observe_result,
        "verify": verify_node(verify, max_iterations),
        "memory_sync": memory_sync_node(memory_limit),
    }
    spec = react_workflow(graph_id, review_expires_in=review_expires_in)
    steps = budget_steps(max_iterations) if max_steps is None else max_steps
    return workflow_graph(Fsm(spec, nodes), nodes, max_steps=steps, **graph_options)
