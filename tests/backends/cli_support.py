"""What the Claude Code and Codex backend tests share: a turn as the agents runtime runs
it (with a checkpoint callback), the texts the fake server was sent, leak checks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from hypha_celery.backends import Backend, Response, Session, TurnError, collect
from tests.fakes.llm_server import FakeLLM


@dataclass
class Checkpoints:
    """A checkpoint callback that records the ids (and can refuse them)."""

    ids: list[str] = field(default_factory=list)
    refuse: Exception | None = None

    def __call__(self, session_id: str) -> None:
        self.ids.append(session_id)
        if self.refuse is not None:
            raise self.refuse


def turn(backend: Backend, session: Session, prompt: str,
         checkpoint: Checkpoints | None = None) -> tuple[Response | TurnError, Session]:
    """One turn: prompt, collect, checkpoint_session on an acknowledged id,
    update_session on success."""
    checkpoint = checkpoint if checkpoint is not None else Checkpoints()
    events, session = backend.prompt(session, prompt, checkpoint)
    outcome = collect(prompt, events)
    for sid in checkpoint.ids[:1]:
        session = backend.checkpoint_session(session, sid)
    if isinstance(outcome, Response):
        session = backend.update_session(session, outcome.terminal.data)
    return outcome, session


def kinds(outcome: Response | TurnError) -> list[str]:
    events = outcome.events if isinstance(outcome, Response) else ()
    return [e.kind for e in events]


def user_texts(fake: FakeLLM) -> Iterator[str]:
    """Every text block or string content of the last request's messages / input."""
    body = fake.requests[-1].body
    for item in body.get("messages") or body.get("input") or []:
        content = item.get("content", "")
        if isinstance(content, str):
            yield content
            continue
        for block in content or []:
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                yield block["text"]


def dumps(*things: Any) -> str:
    return " ".join(json.dumps(t, default=repr) if not isinstance(t, str) else t
                    for t in things)


def drain(backend: Backend, session: Session, prompt: str,
          checkpoint: Checkpoints | None = None) -> list[Any]:
    """Every event of one turn, in order (for failed turns, whose outcome keeps none)."""
    events, _ = backend.prompt(session, prompt, checkpoint)
    return list(events)
