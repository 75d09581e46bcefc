"""The event taxonomy: every event type (:data:`EventType`) and the families of them.

Event types follow hypha's ``<area>.<noun>.<past-tense>`` taxonomy (run lifecycle events
keep hypha's own two-part names: ``run.created`` ... ``run.cancelled``). Each type has one
payload model (:mod:`hypha_celery.events.payloads`).
"""

from __future__ import annotations

from typing import Literal, cast

from hypha_celery.errors import UnknownEventKind

__all__ = ["AGENT_KINDS", "KINDS", "META_PREFIXES", "TERMINAL_KINDS", "EventType", "Kind",
           "as_kind"]

EventType = Literal[
    "run.created",
    "run.queued",
    "run.started",
    "decision.policy.recorded",
    "node.execution.scheduled",
    "node.fanout.scheduled",
    "node.execution.started",
    "node.execution.completed",
    "node.execution.failed",
    "node.execution.late_result",
    "node.reducer.completed",
    "node.reducer.failed",
    "node.execution.retrying",
    "node.execution.redelivered",
    "node.execution.dead_lettered",
    "recovery.run.redriven",
    "recovery.node.timed_out",
    "recovery.outcome.reconciled",
    "recovery.redrive.exhausted",
    "recovery.circuit.opened",
    "recovery.dead_letter.redriven",
    # recovery cases of a workflow state (hypha_celery.fsm): recorded with its decisions
    "recovery.case.opened",
    "recovery.case.attempted",
    "recovery.case.compensation_started",
    "recovery.case.compensated",
    "recovery.case.quarantined",
    "recovery.case.resolved",
    "recovery.case.escalated",
    "run.quarantined",
    "run.suspended",
    "run.released",
    "run.parked",
    "run.redriven",
    "run.cancel.requested",
    "run.completed",
    "run.failed",
    "run.cancelled",
    # sessions: written by the lifecycle writer, in the log of the run that opened the
    # session (created once per (user_id, session_id); updated: metadata merged, caller
    # wins; closed once: no run starts in it after)
    "session.created",
    "session.updated",
    "session.closed",
    # model and tool calls made through a node's context (recorded, replayable)
    "model.call.started",
    "model.call.completed",
    "model.call.failed",
    "tool.call.started",
    "tool.call.completed",
    "tool.call.failed",
    "tool.call.rejected",
    "tool.policy.checked",
    # governed tools (hypha_celery.tools): request, approval, output contract
    "tool.call.requested",
    "tool.call.approved",
    "tool.output.validated",
    "tool.output.invalid",
    # the MCP gateway (hypha_celery.mcp): a server's capabilities discovered, judged and
    # normalized; its tool calls (with the governed runner's tool.call.* events)
    "mcp.capability.discovered",
    "mcp.capability.trust.evaluated",
    "mcp.capability.drift.detected",
    "mcp.capability.quarantined",
    "mcp.capability.approved",
    "mcp.tool.normalized",
    "mcp.call.started",
    "mcp.call.completed",
    "mcp.call.failed",
    # workflows compiled to an FSM (hypha_celery.fsm); the snapshot is projected from these
    "fsm.state.entered",
    "fsm.transition.accepted",
    "fsm.transition.rejected",
    # human review, messages, evaluation
    "human.review.requested",
    "human.review.approved",
    "human.review.rejected",
    "human.review.expired",
    "human.review.cancelled",
    "run.waiting_human",
    # the message bus (hypha_celery.bus): written to the log of the message's run
    "message.enqueued",
    "message.delivered",
    "message.retrying",
    "message.acknowledged",
    "message.failed",
    "message.dead_lettered",
    # what the model sees (hypha_celery.context, .skills, .memory): counts, budgets,
    # hashes and references, never content
    "context.build.started",
    "context.build.completed",
    "context.build.failed",
    "context.compacted",
    "skill.selected",
    "skill.loaded",
    "skill.completed",
    "skill.failed",
    "memory.read.requested",
    "memory.read.completed",
    "memory.read.failed",
    "memory.write.requested",
    "memory.write.validated",
    "memory.write.committed",
    "memory.write.rejected",
    "memory.delete.requested",
    "memory.delete.completed",
    "memory.delete.failed",
    # reasoning (hypha_celery.react and any node or agent): summaries and decisions only,
    # never a provider's raw thinking
    "thinking.started",
    "thinking.completed",
    "agent.deliberation.started",
    "agent.deliberation.completed",
    "reasoning.decision.recorded",
    "agent.action.selected",
    "inference.completed",
    "react.step.completed",
    "eval.started",
    "eval.completed",
    "eval.failed",
    "replay.started",
    "replay.completed",
    "replay.failed",
    "regression.started",
    "regression.completed",
    "regression.failed",
    # conversational agents (hypha_celery.agents): the stream of one incarnation, whose id
    # is the ``run_id``; content free (ids, origins, reasons; never prompts or state)
    "agent.started",
    "agent.turn.started",
    "agent.turn.completed",
    "agent.turn.failed",
    "agent.turn.late_result",
    "agent.request.cancelled",
    "agent.halted",
    "agent.resumed",
    "agent.draining",
    "agent.stopped",
]

Kind = EventType
KINDS: frozenset[str] = frozenset(EventType.__args__)  # type: ignore[attr-defined]
#: The lifecycle of a conversational agent's incarnation (``agent.deliberation.*`` and
#: ``agent.action.selected`` are reasoning facts, not part of it).
AGENT_KINDS: frozenset[str] = frozenset(
    k for k in KINDS if k.startswith("agent.")
    and not k.startswith(("agent.deliberation.", "agent.action.")))
TERMINAL_KINDS: frozenset[str] = frozenset({"run.completed", "run.failed", "run.cancelled"})


def as_kind(kind: str) -> EventType:
    """``kind`` as an :data:`EventType` (a kind known only at run time: a fact a node
    or a policy recorded); :class:`~hypha_celery.errors.UnknownEventKind` if it is none."""
    if kind not in KINDS:
        raise UnknownEventKind(f"{kind!r} is not an event type of the taxonomy")
    return cast(EventType, kind)


#: Families whose events never count as the run's own trace (replay excludes them).
META_PREFIXES = ("eval.", "replay.", "regression.")
