"""``react_graph``: the ReAct workflow with its phase nodes, as a :class:`Graph`."""

from __future__ import annotations

from typing import Any

from hypha_celery.context import ContextBudget
from hypha_celery.errors import GraphSpecError
from hypha_celery.fsm import Fsm, workflow_graph
from hypha_celery.graph import Graph, Node
from hypha_celery.graph.model import NodeFn
from hypha_celery.react._acting import act_node, policy_check_node
from hypha_celery.react._context import ReactMemory, plan_context
from hypha_celery.react._llm import DEFAULT_SYSTEM, LLMProvider
from hypha_celery.react._provider import Provider
from hypha_celery.react._reasoning import observe, reason_node, select_action
from hypha_celery.react._verifiers import Verifier, tool_answers
from hypha_celery.react._verifying import memory_sync_node, observe_result, verify_node
from hypha_celery.react._workflow import budget_steps, react_workflow
from hypha_celery.skills import SkillPolicy, SkillRegistry, SkillRequest
from hypha_celery.tools import ToolPolicy, ToolRegistry

__all__ = ["react_graph"]


def react_graph(provider: Provider, tools: ToolRegistry, *, policy: ToolPolicy | None = None,
                max_iterations: int = 4, graph_id: str = "react",
                max_steps: int | None = None, verify: Verifier = tool_answers,
                model: str | None = None, memory_limit: int = 20,
                review_expires_in: float | None = None,
                instructions: str | None = None,
                skills: SkillRegistry | None = None,
                skill_request: SkillRequest | None = None,
                skill_policy: SkillPolicy | None = None,
                memory: bool | ReactMemory = False,
                context_budget: ContextBudget | None = None,
                **graph_options: Any) -> Graph:
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

    What the model sees (each ``reason`` step builds it before its call,
    :mod:`hypha_celery.react._context`): ``instructions``: the system instructions
    (default: the provider's ``system``, else :data:`DEFAULT_SYSTEM`); ``skills``: the
    skills bound to the loop (a snapshot is taken now); ``skill_request``: which of them
    a step selects (``attached``, ``required``, ``allowed``, ``intent``, ``manual``;
    default: every registered skill attached, none required; its ``text`` is the
    question and its ``available_tools`` the loop's tools, so leave them empty);
    ``skill_policy``: trust and tools (default :class:`SkillPolicy`); ``memory``:
    recall the run's user's memory at each step (``True``: :class:`ReactMemory`'s
    defaults, 5 records matching any word of the question); ``context_budget``: the
    token budgets (default :data:`DEFAULT_BUDGET`). Raises now: ``GraphSpecError``,
    ``ContextSpecError``, ``SkillNotFound`` (a skill id the registry lacks),
    ``InvalidMemoryQuery``.
    """
    if not (isinstance(max_iterations, int) and max_iterations >= 1):
        raise GraphSpecError(f"max_iterations must be an int >= 1, got {max_iterations!r}")
    if not (isinstance(memory_limit, int) and memory_limit >= 1):
        raise GraphSpecError(f"memory_limit must be an int >= 1, got {memory_limit!r}")
    policy = policy if policy is not None else ToolPolicy.default()
    name = model or str(getattr(provider, "name", "") or "model")
    plan = plan_context(
        instructions=instructions if instructions is not None
        else str(getattr(provider, "system", "") or DEFAULT_SYSTEM),
        tokenizer_ref=str(provider.ref) if isinstance(provider, LLMProvider) else name,
        tool_ids=[spec.id for spec in tools.specs()], skills=skills,
        skill_request=skill_request, skill_policy=skill_policy, memory=memory,
        budget=context_budget)
    reason: Any = reason_node(provider, name, tools, max_iterations, plan)
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
