"""The run page's bus messages: what went to and from a run (hypha_celery.bus), one row
each, in queue order. The payload is shown only when the console shows content."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

from hypha_celery.bus import Bus, Message
from hypha_celery.store import EventStore

#: Messages one run page shows at most (the first ones, in queue order).
MESSAGES_SHOWN: Final = 200
#: Characters of a payload shown (content on).
PAYLOAD_CHARS: Final = 2_000


@dataclass(frozen=True, slots=True)
class MessageRow:
    id: str
    type: str
    sender: str
    recipient: str
    status: str
    attempts: int
    reason: str
    fsm_state: str
    created_at: float
    payload: str


def message_rows(store: EventStore, run_id: str, *, content: bool) -> list[MessageRow]:
    """The messages of ``run_id`` (a run the caller may see: the page checked it)."""
    return [_row(m, content) for m in Bus(store).messages(run_id=run_id,
                                                          limit=MESSAGES_SHOWN)]


def _row(msg: Message, content: bool) -> MessageRow:
    payload = json.dumps(msg.payload, ensure_ascii=False)[:PAYLOAD_CHARS] if content else ""
    return MessageRow(msg.id, msg.type, str(msg.from_), str(msg.to), msg.status.value,
                      msg.attempt_count, msg.reason or "", msg.fsm_state or "",
                      msg.created_at, payload)
