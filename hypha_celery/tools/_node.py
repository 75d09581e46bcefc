"""A governed tool as a graph node: every step of the governed runner, inside a node
execution, recorded with its outcome.

The handler is called through ``ctx.tool`` (so ``tool.call.started`` / ``completed`` /
``failed`` are the recorded, replayable call), the runner's other steps
(``tool.call.requested``, ``tool.policy.checked``, ``tool.call.approved``,
``tool.call.rejected``, ``tool.output.*``) are facts written in the same commit. The
invocation id is the execution id: a redelivered execution is fenced by the runtime, and a
tool whose level is ``external_effect`` / ``irreversible`` runs on the at-most-once queue
(early ack, never silently re-executed). A review is the workflow's: the state that runs
the node is entered only once a person approved it (``ctx.review``); without one the
result says ``human_review_required`` and the policy decides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypedDict

from hypha_celery.errors import GraphSpecError, ToolCallRejected
from hypha_celery.events.payloads import ToolCallFailed, payload_as
from hypha_celery.graph import AT_MOST_ONCE, Node, NodeContext
from hypha_celery.jsontypes import JsonObject, JsonValue
from hypha_celery.tools._approvals import MemoryApprovals
from hypha_celery.tools._policy import ToolPolicy
from hypha_celery.tools._registry import ToolRegistry
from hypha_celery.tools._result import ToolResult, ToolStatus
from hypha_celery.tools._runner import GovernedRunner, Recorder

#: Runner events the node does not record itself: ``ctx.tool`` writes the call, the
#: workflow requests reviews.
_WRITTEN_ELSEWHERE = frozenset({"tool.call.started", "tool.call.completed",
                                "human.review.requested"})


def tool_node(tools: ToolRegistry, tool_id: str, *, policy: ToolPolicy | None = None,
              input_from: str | None = None, output_to: str = "tool_result",
              scope_allow: Sequence[str] | None = None,
              permission_scope: str | None = None) -> Node:
    """A node that calls ``tool_id`` through the governed runner with its input (or the
    value at ``input_from``, e.g. ``variables.order``) and puts the result's JSON
    (``status``, ``output``, ``code``, ``message``) in the state under ``output_to``."""
    try:
        spec = tools.resolve(tool_id).spec
    except ToolCallRejected:
        raise GraphSpecError(f"tool node: unknown tool {tool_id!r}") from None

    def run(state: JsonObject, inp: JsonValue, ctx: NodeContext) -> dict[str, ToolSummary]:
        args = inp if input_from is None else _value(state, inp, input_from)
        result = run_governed(ctx, tools, tool_id, args, policy=policy,
                              scope_allow=scope_allow, permission_scope=permission_scope)
        return {output_to: summary(result)}

    side_effect = spec.side_effect if spec.side_effect in AT_MOST_ONCE else "none"
    return Node(run, side_effect=side_effect)


def run_governed(ctx: NodeContext, tools: ToolRegistry, tool_id: str, args: JsonValue, *,
                 policy: ToolPolicy | None = None,
                 scope_allow: Sequence[str] | None = None,
                 permission_scope: str | None = None) -> ToolResult:
    """One governed call from inside a node: the handler through ``ctx.tool``, the
    runner's other steps as ``ctx.record`` facts, the execution id as the invocation id,
    the workflow's approval (``ctx.review``) as the approval step's answer."""
    tool = tools.resolve(tool_id)
    spec = tool.spec
    via_ctx = ToolRegistry.of({tool_id: (spec, lambda value: ctx.tool(
        tool_id, tool.handler, value, side_effect=spec.side_effect))})
    runner = GovernedRunner(via_ctx, policy, _recorder(ctx), MemoryApprovals())
    return runner.run(tool_id, args, invocation_id=ctx.execution_id, scope_allow=scope_allow,
                      permission_scope=permission_scope, approval=ctx.review)


class ToolSummary(TypedDict):
    """What a tool node keeps of a result in the run state (:func:`summary`)."""

    tool: str
    status: ToolStatus
    output: JsonValue
    code: str | None
    message: str


def summary(result: ToolResult) -> ToolSummary:
    """What a node keeps of a tool result in the run state."""
    return {"tool": result.tool, "status": result.status, "output": result.output,
            "code": result.code, "message": result.message}


def _recorder(ctx: NodeContext) -> Recorder:
    def record(type_: str, payload: Mapping[str, object], /) -> None:
        if type_ in _WRITTEN_ELSEWHERE:
            return
        if type_ == "tool.call.failed" and \
                payload_as(ToolCallFailed, type_, payload).phase == "execute":
            return  # ctx.tool recorded the failed call
        ctx.record(type_, payload)
    return record


def _value(state: Mapping[str, object], inp: JsonValue, path: str) -> JsonValue:
    from hypha_celery.fsm.policy import resolve

    return resolve({"input": inp, "variables": state, "metadata": {}}, path)
