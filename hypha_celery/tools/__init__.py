"""Governed tools, as a library: hypha's ``ToolSpec``, policy engine and
``GovernedToolRunner``.

A :class:`ToolSpec` declares a tool (JSON Schemas, side-effect level, source, human
review); a :class:`ToolPolicy` decides whether a call may run (:meth:`ToolPolicy.default`
denies ``external_effect`` and ``irreversible``); a :class:`GovernedRunner` takes every
call through scope, idempotency key, input schema, policy and human review before the
handler, checks the output, records ``tool.*`` / ``human.review.requested`` events
through a :class:`Recorder`, and serves a repeated invocation id from its stored result.
Nothing here needs a service: :class:`MemoryApprovals` keeps reviews and results in
memory.
"""

from hypha_celery.tools._approvals import ApprovalStore, MemoryApprovals, ReviewStatus
from hypha_celery.tools._node import run_governed, summary, tool_node
from hypha_celery.tools._policy import (
    DEFAULT_POLICY_ID,
    Effect,
    PolicyDecision,
    PolicyRule,
    ToolPolicy,
)
from hypha_celery.tools._registry import Handler, Tool, ToolRegistry
from hypha_celery.tools._result import Phase, ToolResult, ToolStatus
from hypha_celery.tools._runner import GovernedRunner, Recorder, ToolEventType
from hypha_celery.tools._spec import SideEffect, ToolSource, ToolSpec

__all__ = [
    # specs and registry
    "Handler",
    "SideEffect",
    "Tool",
    "ToolRegistry",
    "ToolSource",
    "ToolSpec",
    # policy
    "DEFAULT_POLICY_ID",
    "Effect",
    "PolicyDecision",
    "PolicyRule",
    "ToolPolicy",
    # running
    "ApprovalStore",
    "GovernedRunner",
    "MemoryApprovals",
    "Phase",
    "Recorder",
    "ReviewStatus",
    "ToolEventType",
    "ToolResult",
    "ToolStatus",
    # in a graph
    "run_governed",
    "summary",
    "tool_node",
]
