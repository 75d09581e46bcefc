"""The tool side of the loop: ``policy_check`` (PolicyChecked) and ``act`` (Acting, or
ActingEffect for a tool that must run at most once).

``policy_check`` decides with the tool policy, before anything runs, whether the
selected tool may run and whether a person must approve it first; the workflow routes on
that (``variables.policy``). A call it stops is recorded as the governed runner would
(``tool.call.requested``, ``tool.policy.checked``, ``tool.call.rejected``), and the
denial is the observation. A call it lets through is recorded by the runner in ``act``,
which checks the same policy again, takes the workflow's review as its approval, and
calls the handler through ``ctx.tool``; an MCP tool's handler records its
``mcp.call.*`` events in the run's log too (``ctx.record``: :func:`hypha_celery.mcp.recording`).
"""

from __future__ import annotations

from hypha_celery.errors import GraphSpecError
from hypha_celery.events import payloads as ev
from hypha_celery.graph import AT_MOST_ONCE, Node, NodeContext
from hypha_celery.graph.calls import request_hash
from hypha_celery.jsontypes import JsonValue
from hypha_celery.mcp import recording
from hypha_celery.react._actions import Action
from hypha_celery.react._state import ReactState, Verdict
from hypha_celery.tools import (
    PolicyDecision,
    ToolPolicy,
    ToolRegistry,
    ToolSpec,
    run_governed,
    summary,
)

__all__ = ["act_node", "policy_check_node", "verdict"]


def verdict(spec: ToolSpec, decision: PolicyDecision) -> Verdict:
    """``variables.policy``: may it run, must a person approve it first (the policy's
    ``require_review`` or the spec's ``human_review``), must it run at most once."""
    return {"allowed": decision.allowed,
            "requires_review": decision.allowed and (decision.requires_review
                                                     or spec.human_review),
            "reason": decision.reason, "at_most_once": spec.side_effect in AT_MOST_ONCE,
            "code": None if decision.allowed else "TOOL_POLICY_DENIED"}


def policy_check_node(tools: ToolRegistry, policy: ToolPolicy) -> Node:
    """``variables.policy`` for the selected tool (an unknown tool is not allowed)."""
    def policy_check(state: ReactState, inp: JsonValue, ctx: NodeContext) -> ReactState:
        action: Action = state.get("action") or {}
        tool_id = str(action.get("tool") or "")
        checked: Verdict
        if tool_id not in tools:
            checked = {"allowed": False, "requires_review": False, "at_most_once": False,
                       "reason": f"no tool {tool_id!r}", "code": "TOOL_NOT_FOUND"}
            ctx.emit(ev.ToolCallRejected(call_id=ctx.execution_id, tool=tool_id,
                                         code=checked["code"], phase="policy",
                                         message=checked["reason"]))
        else:
            spec = tools.resolve(tool_id).spec
            decision = policy.decide(spec)
            checked = verdict(spec, decision)
            if not decision.allowed:
                _record_denial(ctx, spec, action.get("input"), decision)
        return {"policy": checked, "observation": None if checked["allowed"] else {
            "source": "policy", "tool": tool_id, "status": "denied", "code": checked["code"],
            "message": checked["reason"]}}
    return Node(policy_check)


def _record_denial(ctx: NodeContext, spec: ToolSpec, args: JsonValue,
                   decision: PolicyDecision) -> None:
    """The runner's events for a call its policy step denies."""
    call_id, tool, source, effect = ctx.execution_id, spec.id, spec.source, spec.side_effect
    ctx.emit(ev.ToolCallRequested(call_id=call_id, tool=tool, source=source,
                                  side_effect=effect, input_hash=request_hash(args),
                                  permission_scope=None))
    ctx.emit(ev.ToolPolicyChecked(call_id=call_id, tool=tool, source=source,
                                  side_effect=effect, decision=decision.to_json(),
                                  permission_scope=None))
    ctx.emit(ev.ToolCallRejected(call_id=call_id, tool=tool, source=source,
                                 side_effect=effect, code="TOOL_POLICY_DENIED",
                                 phase="policy", message=decision.reason))


def act_node(tools: ToolRegistry, policy: ToolPolicy, *, at_most_once: bool) -> Node:
    """Run the selected tool through the governed runner (invocation id: the execution
    id; approval: the workflow's review) into ``variables.tool_result``.
    ``at_most_once``: the node is ``external_effect`` (early ack, never re-executed) and
    runs only such tools; otherwise it refuses them."""
    def act(state: ReactState, inp: JsonValue, ctx: NodeContext) -> ReactState:
        action: Action = state.get("action") or {}
        tool = tools.resolve(str(action.get("tool") or ""))
        spec = tool.spec
        if (spec.side_effect in AT_MOST_ONCE) != at_most_once:
            raise GraphSpecError(f"tool {spec.id} ({spec.side_effect}) cannot run in "
                                 f"{'act_effect' if at_most_once else 'act'}")
        args = action.get("input")
        result = run_governed(ctx, recording(tools, ctx.record), spec.id,
                              {} if args is None else args, policy=policy)
        return {"tool_result": summary(result)}
    return Node(act, side_effect="external_effect" if at_most_once else "none")

