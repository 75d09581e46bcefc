"""Switchboard: a fleet of named sessions driven from outside (a human, a chat UI, an MCP
server).

When to reach for this
    You want long-lived conversations you address by name, and the *caller* decides what
    happens next: the agent never self-chains.

The pattern
    ``Session.handle_response`` always returns ``NoReply``: it only files the answer in
    an inbox on its state. ``handle_event`` files operator notes the same way. A small
    facade (:class:`Switchboard`) wraps ``tell`` / ``poll`` / ``notify`` / ``interrupt`` /
    ``resume`` / ``stop`` so the front end never touches refs or agents directly; the
    inbox cursor lives with the caller, the inbox on the agent's state.

Using it
    ``board = Switchboard(hypha.agents)``; ``board.open("alice", scripts)``;
    ``ref = board.send("alice", "hi")``; ``board.read("alice", ref)``;
    ``board.inbox("alice", since=0)``; ``board.close("alice")``.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from examples.agents import _app
from hypha_celery import Hypha
from hypha_celery.agents import Agent, Agents, NoReply, Response, TurnError
from hypha_celery.backends import MockBackend


class Session(Agent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts.get("scripts", [])}, {"inbox": []}

    def handle_response(self, ref: str, response: Response, state: Any) -> NoReply:
        return NoReply(_file(state, {"ref": ref, "kind": "answer", "text": response.text}))

    def handle_error(self, ref: str, error: TurnError, state: Any) -> NoReply:
        return NoReply(_file(state, {"ref": ref, "kind": "error", "text": error.reason}))

    def handle_event(self, event: Any, state: Any) -> NoReply:
        return NoReply(_file(state, {"ref": None, "kind": "note", "text": event["note"]}))


def _file(state: Any, entry: dict[str, Any]) -> Any:
    return {**state, "inbox": [*state["inbox"], entry]}


class Switchboard:
    """The front end's whole view of the fleet."""

    def __init__(self, agents: Agents) -> None:
        self.agents = agents

    def open(self, name: str, scripts: list[Any]) -> None:
        self.agents.start(Session, name=name, backend=MockBackend, scripts=scripts)

    def send(self, name: str, text: str) -> str:
        return self.agents.tell(name, text)

    def read(self, name: str, ref: str) -> str | None:
        """The answer to ``ref``, or None while it is pending."""
        found = self.agents.poll(name, ref)
        if found.status == "pending":
            return None
        return found.response.text if found.response else f"error: {found.reason}"

    def note(self, name: str, text: str) -> None:
        self.agents.notify(name, {"note": text})

    def inbox(self, name: str, since: int = 0) -> list[dict[str, Any]]:
        """Inbox entries after the caller's cursor ``since``."""
        return list(self.agents.status(name).agent_state["inbox"][since:])

    def interrupt(self, name: str) -> None:
        self.agents.interrupt(name)

    def resume(self, name: str) -> None:
        self.agents.resume(name)

    def sessions(self) -> list[str]:
        return sorted(self.agents.list())

    def close(self, name: str) -> None:
        self.agents.stop(name)


def run(hypha: Hypha) -> dict[str, Any]:
    _app.use(hypha)
    board = Switchboard(hypha.agents)
    board.open("alice", [_app.result("hello alice")])
    board.open("bob", [_app.result("hello bob")])
    refs = {name: board.send(name, "hi") for name in ("alice", "bob")}
    answers = {name: _app.wait_for(partial(board.read, name, ref)) for name, ref in refs.items()}
    board.note("alice", "escalated to a human")
    _app.wait_for(lambda: len(board.inbox("alice")) == 2)
    out = {"sessions": board.sessions(), "answers": answers, "inbox": board.inbox("alice")}
    for name in refs:
        board.close(name)
    out["after_close"] = board.sessions()
    return out


def main() -> None:
    with _app.demo() as hypha:
        print(run(hypha))


if __name__ == "__main__":
    main()
