"""What the loop writes about its reasoning: summaries and decisions, never a provider's
raw thinking.

Per iteration (``step``, the model call's number), in this order:

* ``reason``: the context (:mod:`hypha_celery.react._context`: ``skill.selected`` /
  ``skill.loaded`` per active skill, ``memory.read.*`` when memory is recalled,
  ``context.build.started``, ``context.compacted`` per compacted source,
  ``context.build.completed``), ``agent.deliberation.started`` (``options``: the tools
  offered plus ``finish``), the model call (``model.call.*``), ``thinking.started`` /
  ``thinking.completed`` when the provider reported thinking (its characters, a
  count), ``inference.completed`` (the model, its tokens when known, the latency seen
  by the node, the built context's hash), ``skill.completed`` per active skill,
  ``agent.deliberation.completed`` (``chosen``: the action kind) and
  ``reasoning.decision.recorded`` (``decision``: ``tool:<id>``, ``finish`` or
  ``human_review``; ``reason``: the reply's own ``rationale``, see
  :func:`rationale_of`, else None);
* ``select_action``: ``agent.action.selected`` (``action``, ``tool``);
* ``verify``: ``react.step.completed`` (``phase``: ``complete`` when the loop is done,
  ``reason`` when it goes on; ``action``: the action kind).

They are node facts (``ctx.emit``): written with the node's outcome, in the call order,
and left out of a replay (the recording has them; :mod:`hypha_celery.rerun` compares
calls and decisions, not facts).
"""

from __future__ import annotations

from collections.abc import Mapping

from hypha_celery.events import payloads as ev
from hypha_celery.graph import NodeContext
from hypha_celery.jsontypes import JsonValue
from hypha_celery.react._actions import Action

__all__ = ["MAX_RATIONALE_CHARS", "RATIONALE", "decided", "decision_of", "rationale_of"]

#: The reply key a model may give a short reason for its action in (its structured
#: output, not its thinking): kept on ``reasoning.decision.recorded``.
RATIONALE = "rationale"
#: Characters of a rationale kept (longer ones are cut).
MAX_RATIONALE_CHARS = 200


def rationale_of(reply: JsonValue) -> str | None:
    """The reply's ``rationale`` (a non-empty string), cut at :data:`MAX_RATIONALE_CHARS`."""
    if not isinstance(reply, Mapping):
        return None
    text = reply.get(RATIONALE)
    if not isinstance(text, str) or not text.strip():
        return None
    return text.strip()[:MAX_RATIONALE_CHARS]


def decision_of(action: Action) -> str:
    """``tool:<id>`` for a tool call, else the action kind."""
    kind = action["action"]
    return f"tool:{action.get('tool') or ''}" if kind == "tool" else kind


def decided(ctx: NodeContext, step: int, options: int, action: Action,
            reply: JsonValue) -> None:
    """``agent.deliberation.completed`` and ``reasoning.decision.recorded``."""
    node = ctx.node_id
    ctx.emit(ev.AgentDeliberationCompleted(step=step, node=node, options=options,
                                           chosen=action["action"]))
    ctx.emit(ev.ReasoningDecisionRecorded(step=step, node=node, decision=decision_of(action),
                                          reason=rationale_of(reply)))
