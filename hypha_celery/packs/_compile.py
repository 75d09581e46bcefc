"""A pack's workflow as a :class:`~hypha_celery.graph.Graph`.

Each node the workflow binds is built from the ``nodes`` section: ``code`` is imported
(``module:attr``, the working directory on ``sys.path``), ``tool`` becomes a governed
:func:`~hypha_celery.tools.tool_node` over the pack's tools, ``set`` merges its constants
into the state. A tool node's execution scope is its state's ``tools`` (else the state's
``tool_profiles``, else the workflow's ``tool_profile``, else any tool); its policy is the
state's (else the workflow's ``policy``, the pack's ``default_policy``, hypha's default),
with the state's ``denied_tools`` denied. Transitions are checked against the workflow's
policy too: capability ``fsm:<workflow>:<from>-><to>`` as the scope, side effect ``none``
(so a policy whose ``default_effect`` is ``deny`` must allow its transitions).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

from hypha_celery.errors import HyphaError, PackError
from hypha_celery.evaluation._contracts import OutputContract
from hypha_celery.fsm import Fsm, StateSpec, TransitionPolicy, workflow_graph
from hypha_celery.graph import Graph, Node
from hypha_celery.graph.model import NodeFn
from hypha_celery.jsontypes import JsonObject, JsonValue
from hypha_celery.loading import load_object
from hypha_celery.packs._check import problems
from hypha_celery.packs._model import DomainPack, PackWorkflow
from hypha_celery.packs._paths import Problem, path
from hypha_celery.packs._sessions import session_graph_problems, session_graphs
from hypha_celery.tools import ToolPolicy, ToolRegistry, ToolSpec, tool_node

__all__ = ["compile_all", "compile_pack", "output_issues", "tool_registry",
           "transition_policy", "validate_input", "workflow_policy"]

#: What a transition is to a tool policy: no side effect, its capability as the scope.
_TRANSITION = ToolSpec(id="fsm.transition", input_schema={"type": "object"},
                       side_effect="none")


def compile_pack(pack: DomainPack, workflow_id: str | None = None, **graph_options: Any
                 ) -> Graph:
    """The graph of ``workflow_id`` (default: the pack's ``default_workflow``, else its
    first). ``graph_options`` go to :class:`Graph` (``execution_timeout``, ...).
    :class:`PackError` lists every problem: the pack's, code that does not import."""
    _check(pack)
    return _compile(pack, _workflow(pack, workflow_id), **graph_options)


def compile_all(pack: DomainPack, **graph_options: Any) -> dict[str, Graph]:
    """Every workflow's graph, by workflow id, and the graphs of the session profiles
    that change one (``<workflow>--<profile>``: :mod:`~hypha_celery.packs._sessions`);
    one :class:`PackError` for all problems."""
    _check(pack)
    graphs: dict[str, Graph] = {}
    found: list[Problem] = []
    for wf in pack.workflows:
        try:
            graphs[wf.id] = _compile(pack, wf, **graph_options)
        except PackError as exc:
            found += [p for p in exc.problems if p not in found]
    if found:
        raise PackError(found)
    return {**graphs, **session_graphs(pack, _compile, **graph_options)}


def workflow_policy(pack: DomainPack, wf: PackWorkflow) -> ToolPolicy:
    """The policy of ``wf``'s tools and transitions."""
    ref = wf.policy or pack.default_policy
    policy = pack.policy(ref) if ref else ToolPolicy.default()
    if policy is None:
        raise PackError([("policy", f"unknown policy {ref!r}")])
    return policy


def transition_policy(policy: ToolPolicy) -> TransitionPolicy:
    """``policy`` as the FSM's ``capability -> (allowed, reason)``."""
    def decide(capability: str) -> tuple[bool, str]:
        decision = policy.decide(_TRANSITION, capability)
        return decision.allowed, decision.reason
    return decide


def tool_registry(pack: DomainPack, only: Iterable[str] | None = None) -> ToolRegistry:
    """The pack's tools (those in ``only``, when given) with their handlers imported or
    mocked; :class:`PackError` names every handler that does not load."""
    wanted = None if only is None else set(only)
    registry = ToolRegistry()
    found: list[Problem] = []
    for i, tool in enumerate(pack.tools):
        if wanted is not None and tool.id not in wanted:
            continue
        if tool.mock is not None:
            registry.register(tool.spec, _mock(tool.mock.output))
            continue
        assert tool.handler is not None
        handler = _load(tool.handler, path("tools", i, "handler"), found)
        if handler is not None:
            registry.register(tool.spec, handler)
    if found:
        raise PackError(found)
    return registry


def validate_input(pack: DomainPack, workflow_id: str | None, input: Any) -> None:
    """:class:`PackError` naming every ``$.path`` where ``input`` breaks the workflow's
    task schema (nothing when it has none)."""
    contract = _contract(pack, workflow_id, "task_schema")
    issues = contract.issues(input) if contract is not None else []
    if issues:
        raise PackError(issues)


def output_issues(pack: DomainPack, workflow_id: str | None, output: Any) -> list[Problem]:
    """``($.path, message)`` for every way ``output`` breaks the workflow's output
    contract (empty when it has none)."""
    contract = _contract(pack, workflow_id, "output_contract")
    return contract.issues(output) if contract is not None else []


# -- building -----------------------------------------------------------------------------
def _check(pack: DomainPack) -> None:
    found = [*problems(pack), *session_graph_problems(pack)]
    if found:
        raise PackError(found)


def _compile(pack: DomainPack, wf: PackWorkflow, **graph_options: Any) -> Graph:
    """The graph of ``wf`` (``pack`` already checked; ``graph_id=`` for a session
    profile's variant)."""
    policy = workflow_policy(pack, wf)
    nodes = _nodes(pack, wf, policy)
    fsm = Fsm(wf, nodes, policy=transition_policy(policy))
    return workflow_graph(fsm, nodes, **graph_options)


def _workflow(pack: DomainPack, workflow_id: str | None) -> PackWorkflow:
    try:
        return pack.workflow(workflow_id)
    except KeyError as exc:
        raise PackError([("", str(exc.args[0]))]) from None


def _contract(pack: DomainPack, workflow_id: str | None, ref: str) -> OutputContract | None:
    wf = _workflow(pack, workflow_id)
    name = getattr(wf, ref)
    if name is None:
        return None
    schemas = pack.task_schemas if ref == "task_schema" else pack.output_contracts
    return OutputContract(name, schemas[name])


def _nodes(pack: DomainPack, wf: PackWorkflow, policy: ToolPolicy) -> dict[str, NodeFn | Node]:
    bound = list(dict.fromkeys(s.node for s in wf.states if s.node is not None))
    tools = [decl.tool for name in bound if (decl := pack.nodes[name]).tool is not None]
    found: list[Problem] = []
    try:
        registry = tool_registry(pack, tools)
    except PackError as exc:
        found += exc.problems
        registry = None
    nodes: dict[str, NodeFn | Node] = {}
    for name in bound:
        decl, where = pack.nodes[name], path("nodes", name)
        if decl.code is not None:
            nodes[name] = _load(decl.code, f"{where}.code", found)
        elif decl.set_ is not None:
            nodes[name] = _set_node(decl.set_)
        elif registry is not None and decl.tool is not None:
            binding = _binding(pack, wf, name, policy, found)
            if binding is not None:
                nodes[name] = tool_node(registry, decl.tool, policy=binding[1],
                                        input_from=decl.input_from,
                                        output_to=decl.output_to or "tool_result",
                                        scope_allow=binding[0])
    if found:
        raise PackError(found)
    return nodes


def _binding(pack: DomainPack, wf: PackWorkflow, node: str, policy: ToolPolicy,
             found: list[Problem]) -> tuple[list[str] | None, ToolPolicy] | None:
    """The execution scope and policy of the tool node ``node`` (the same in every state
    that binds it)."""
    bindings = [_state_binding(pack, wf, state, policy)
                for state in wf.states if state.node == node]
    if any(b != bindings[0] for b in bindings[1:]):
        found.append((path("nodes", node), f"states of workflow {wf.id} bind tool node "
                                           f"{node!r} with different tools or policies"))
        return None
    return bindings[0]


def _state_binding(pack: DomainPack, wf: PackWorkflow, state: StateSpec, policy: ToolPolicy
                   ) -> tuple[list[str] | None, ToolPolicy]:
    scope: list[str] | None = None
    if state.tools is not None:
        scope = list(state.tools)
    elif state.tool_profiles:
        scope = [t for p in state.tool_profiles for t in pack.tool_profiles[p]]
    elif wf.tool_profile is not None:
        scope = list(pack.tool_profiles[wf.tool_profile])
    own = pack.policy(state.policies[0]) if state.policies else None
    chosen = own or policy
    if state.denied_tools:
        chosen = chosen.model_copy(update={"deny": [*chosen.deny, *state.denied_tools]})
    return scope, chosen


def _load(ref: str, where: str, found: list[Problem]) -> Any:
    """The object ``ref`` names (a function or a :class:`Node`), or None with a problem."""
    try:
        obj = load_object(ref, option=where)
    except HyphaError as exc:
        found.append((where, str(exc)))
        return None
    if not (isinstance(obj, Node) or callable(obj)):
        found.append((where, f"{ref} is a {type(obj).__name__}, not a function"))
        return None
    return obj


def _set_node(values: JsonObject) -> Callable[[dict[str, object], JsonValue], JsonObject]:
    def set_values(state: dict[str, object], input: JsonValue) -> JsonObject:
        return copy.deepcopy(values)
    return set_values


def _mock(output: Any) -> Callable[[Any], Any]:
    def mock(args: Any) -> Any:
        return copy.deepcopy(output)
    return mock
