"""The agents' part of a recovery-supervisor sweep (:func:`hypha_celery.beat.supervisor.sweep`).

* A busy agent whose owner stopped beating for ``grace`` seconds (its worker died with the
  whole process group, so no broker redelivery is coming soon): the pump message is
  published again with the same token. The delivery that takes it sees the dead owner's
  turn still streaming and ends it ``task_crashed``. A busy agent nobody ever took (the
  message was lost between commit and publish) is re-published after ``kickoff_lease``.
* Completions left in the outbox for ``grace`` seconds (the worker died between the commit
  that decided them and their delivery) are sent; a receiver may see a completion twice
  only if a worker died between sending and deleting it (signature targets carry a task
  id derived from the ref, so the duplicate is recognizable).
"""

from __future__ import annotations

import logging

from hypha_celery.agents import rows
from hypha_celery.agents.channels import Completion, target_from
from hypha_celery.agents.effects import send
from hypha_celery.agents.runtime import AgentRuntime
from hypha_celery.runtime.core import AgentSweepDecision
from hypha_celery.store import agents as table

log = logging.getLogger(__name__)


def sweep(rt: AgentRuntime, now: float, grace: float, kickoff_lease: float,
          limit: int) -> list[AgentSweepDecision]:
    decisions: list[AgentSweepDecision] = []
    for name, doc, beat in rows.stale(rt.store, now - min(grace, kickoff_lease), limit):
        taken = doc.owner is not None
        if now - beat < (grace if taken else kickoff_lease) or doc.pump is None:
            continue
        try:
            rt.publish(name, doc.incarnation, doc.pump)
        except Exception as exc:
            log.warning("hypha recovery: re-driving agent failed: %s", type(exc).__name__)
            continue
        decisions.append({"agent": name, "action": "agent_redriven",
                          "why": "owner_lost" if taken else "never_taken"})
    for box in table.unsent(rt.store, now - grace, limit):
        target, message = target_from(box.target), Completion.from_json(box.message)
        if target is None:
            continue
        send(rt, box.id, target, message)
        decisions.append({"agent": message.agent, "action": "completion_resent",
                          "ref": box.ref})
    return decisions
