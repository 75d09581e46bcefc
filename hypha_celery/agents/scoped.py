"""One user's agents: the :class:`~hypha_celery.agents.api.Agents` calls, on the names
that user owns.

A user's agent ``helper`` is stored as ``<user id>/helper`` (a principal id has no
``/``), so two users' names never meet and a name of another user's is, to this API,
a name nobody has: :class:`AgentNotFound`, as for one that never existed. Operators (an
unscoped client, an admin principal) see the stored names. Agents per user are bounded
(``Settings.max_agents_per_owner``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, Literal, TypeVar

from celery.canvas import Signature

from hypha_celery.agents.api import (
    MAX_NAME,
    AgentInfo,
    Agents,
    AgentStatus,
    OnHaltOption,
    Poll,
)
from hypha_celery.agents.behaviour import Agent
from hypha_celery.agents.channels import Channel, ChannelMessage
from hypha_celery.agents.context import context_of
from hypha_celery.backends import Backend, Response
from hypha_celery.errors import AgentNotFound, AgentSpecError, NotPermitted, Overloaded
from hypha_celery.live import LiveStream
from hypha_celery.memory import MemoryScope

__all__ = ["ScopedAgents"]

_T = TypeVar("_T")


class ScopedAgents:
    """``hypha.as_user(user_id).agents``: every call of :class:`Agents`, on this user's
    agents only."""

    def __init__(self, agents: Agents, owner: str, max_agents: int) -> None:
        self._agents = agents
        self._prefix = owner + "/"
        self._max = max_agents

    # -- names ----------------------------------------------------------------------------
    def _name(self, name: Any) -> str:
        if not isinstance(name, str) or not name or len(self._prefix) + len(name) > MAX_NAME:
            raise AgentSpecError(
                f"an agent name is a string of 1..{MAX_NAME - len(self._prefix)} characters")
        return self._prefix + name

    def _call(self, name: str, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        try:
            return fn(self._name(name), *args, **kwargs)
        except AgentNotFound:
            raise AgentNotFound(name) from None

    # -- lifecycle ------------------------------------------------------------------------
    def start(self, agent: type[Agent], *, name: str, backend: type[Backend],
              memory_scope: MemoryScope | None = None, **options: Any) -> AgentInfo:
        """:meth:`Agents.start` under this user's ``name``; :class:`Overloaded` when the
        user has ``Settings.max_agents_per_owner`` live agents already (checked before
        the start: two starts at the same moment may pass it by one). An agent whose
        ``context`` reads memory reads this user's (``memory_scope`` may narrow it; one
        of another user is :class:`NotPermitted`)."""
        qualified = self._name(name)
        config = context_of(agent)
        if config is not None and config.memory:
            owner = self._prefix[:-1]
            if memory_scope is None:
                memory_scope = MemoryScope(owner)
            elif isinstance(memory_scope, MemoryScope) and memory_scope.user_id != owner:
                raise NotPermitted("an agent of a user's client reads that user's memory "
                                   "only")
        if memory_scope is not None:
            options["memory_scope"] = memory_scope
        live = len(self._agents.list(self._prefix))
        if live >= self._max:
            raise Overloaded({"queue": "agents", "limit": "count", "pending_count": live,
                              "max_count": self._max, "pending_bytes": 0, "max_bytes": 0,
                              "incoming_bytes": 0})
        info = self._agents.start(agent, name=qualified, backend=backend, **options)
        return replace(info, name=name)

    def stop(self, name: str) -> None:
        self._call(name, self._agents.stop)

    def drain(self, name: str, timeout: float | None = None) -> None:
        self._call(name, self._agents.drain, timeout)

    def halt(self, name: str) -> None:
        self._call(name, self._agents.halt)

    def resume(self, name: str) -> None:
        self._call(name, self._agents.resume)

    def interrupt(self, name: str) -> None:
        self._call(name, self._agents.interrupt)

    def reset_session(self, name: str) -> None:
        self._call(name, self._agents.reset_session)

    # -- requests -------------------------------------------------------------------------
    def ask(self, name: str, prompt: str, timeout: float | None = None) -> Response:
        return self._call(name, self._agents.ask, prompt, timeout)

    def tell(self, name: str, prompt: str) -> str:
        return self._call(name, self._agents.tell, prompt)

    def tell_with_completion(self, name: str, prompt: str, recipient: Channel | Signature,
                             *, on_halt: OnHaltOption = "queue",
                             stream_to: Channel | None = None) -> str:
        return self._call(name, self._agents.tell_with_completion, prompt, recipient,
                          on_halt=on_halt, stream_to=stream_to)

    def poll(self, name: str, ref: str) -> Poll:
        return self._call(name, self._agents.poll, ref)

    def notify(self, name: str, event: Any) -> None:
        self._call(name, self._agents.notify, event)

    def notify_ack(self, name: str, event: Any) -> None:
        self._call(name, self._agents.notify_ack, event)

    def interrupt_request(self, name: str, ref: str) -> Literal["accepted", "not_current",
                                                                  "idle"]:
        return self._call(name, self._agents.interrupt_request, ref)

    def cancel_request(self, name: str, ref: str) -> Literal[
            "cancelled", "current", "already_finished", "not_found"]:
        return self._call(name, self._agents.cancel_request, ref)

    # -- reading --------------------------------------------------------------------------
    def status(self, name: str) -> AgentStatus:
        return replace(self._call(name, self._agents.status), name=name)

    def runtime_snapshot(self, name: str) -> dict[str, Any]:
        return self._call(name, self._agents.runtime_snapshot)

    def list(self) -> list[str]:
        """This user's live agents (point in time, unordered)."""
        cut = len(self._prefix)
        return [n[cut:] for n in self._agents.list(self._prefix)]

    def whereis(self, name: str) -> AgentInfo | None:
        info = self._agents.whereis(self._name(name))
        return None if info is None else replace(info, name=name)

    def stream(self, name: str, timeout: float | None = None) -> LiveStream:
        return self._call(name, self._agents.stream, timeout)

    @staticmethod
    def channel() -> Channel:
        return Channel.new()

    def receive(self, channel: Channel, timeout: float = 5.0) -> ChannelMessage | None:
        """The next message on ``channel``: a channel is a capability (its name is a
        random token), so whoever holds it reads it."""
        return self._agents.receive(channel, timeout)
