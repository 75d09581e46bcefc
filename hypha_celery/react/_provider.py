"""Inference providers: ``provider(request) -> output``, JSON in and JSON out.

The ``reason`` node calls one through ``ctx.model(name, provider, request)``, so the call
is recorded (``model.call.*``: the output kept, the request only as a hash) and a replay
serves the recorded output instead of calling.

:class:`MockProvider` is a scripted one on :class:`~hypha_celery.backends.MockBackend`:
each call is one backend turn. The request goes in as the prompt (canonical JSON: the
backend's history is the list of requests), each script item becomes that turn's
``result`` event, and :func:`~hypha_celery.backends.collect` reads the reply back.
:meth:`MockProvider.thinking` scripts a reply that comes after some thinking: the turn
reports it as a ``reasoning`` event with its character count, as the real providers do
(the text goes nowhere).

A provider that can say what a call cost has ``reason(request) ->`` :class:`Reasoned`
(:class:`ReasoningProvider`): the ``reason`` node then writes ``thinking.*`` and the
token counts of ``inference.completed`` from it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from hypha_celery.backends import BackendError, BackendEvent, MockBackend, TurnError, collect

__all__ = ["MockProvider", "Provider", "Reasoned", "ReasoningProvider", "ScriptedError",
           "ScriptedThought"]

#: ``provider(request) -> output``: what the ``reason`` node calls (JSON in, JSON out).
Provider = Callable[[Any], Any]


@dataclass(frozen=True)
class ScriptedError:
    """A script item: the call raises ``BackendError(kind=reason)``."""

    reason: str


@dataclass(frozen=True)
class ScriptedThought:
    """A script item: ``reply`` (JSON or ``callable(request) -> reply``) after ``chars``
    characters of thinking (reported as a count, as a provider's stream does)."""

    reply: Any
    chars: int


@dataclass(frozen=True)
class Reasoned:
    """One provider call's reply and what it cost: the characters of thinking the
    provider reported (a count; the text is never kept) and its tokens when known."""

    output: Any
    thinking_chars: int = 0
    thinking_tokens: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None


@runtime_checkable
class ReasoningProvider(Protocol):
    """A provider that says what a call cost (:class:`MockProvider` is one)."""

    def reason(self, request: Any) -> Reasoned: ...


class MockProvider:
    """A provider whose replies are scripted, one item per call, consumed in order::

        MockProvider([{"action": "tool", "tool": "kb.search", "input": {"q": "x"}},
                      lambda request: {"action": "finish", "output": request["memory"]},
                      MockProvider.error("rate_limit")])

    An item is the reply itself (JSON), ``callable(request) -> reply``, or
    :meth:`error`. A call past the end of the script raises ``BackendError`` ``no_script``.
    Calls are serialized (one backend session); :attr:`requests` are the requests seen.
    Callable items run only in this process (as :class:`MockBackend`'s).
    """

    name: ClassVar[str] = "mock"

    def __init__(self, script: Iterable[Any]) -> None:
        self._backend = MockBackend()
        self._lock = threading.Lock()
        self._session = self._backend.start_session({"scripts": [_turn(i) for i in script]})

    @staticmethod
    def error(reason: str) -> ScriptedError:
        return ScriptedError(reason)

    @staticmethod
    def thinking(reply: Any, thought: str) -> ScriptedThought:
        """A script item: ``reply`` after thinking ``thought`` (only its length is
        reported: the text goes nowhere)."""
        return ScriptedThought(reply, len(thought))

    def __call__(self, request: Any) -> Any:
        return self.reason(request).output

    def reason(self, request: Any) -> Reasoned:
        """One scripted call: the reply and the thinking it reported (a count)."""
        prompt = json.dumps(request, sort_keys=True, separators=(",", ":"))
        chars: list[int] = []

        def seen(event: BackendEvent) -> None:
            count = event.data.get("chars")
            if event.kind == "reasoning" and isinstance(count, int):
                chars.append(count)
        with self._lock:
            events, _ = self._backend.prompt(self._session, prompt)
            turn = collect(prompt, events, retention="lossless", on_event=seen)
        if isinstance(turn, TurnError):
            raise BackendError(MockBackend.provider, turn.reason, False)
        return Reasoned(json.loads(turn.text), sum(chars))

    @property
    def requests(self) -> list[Any]:
        """Every request so far, in order."""
        with self._lock:
            return [json.loads(p) for p in MockBackend.history(self._session)]

    @property
    def remaining(self) -> int:
        """Script items not consumed yet."""
        with self._lock:
            return MockBackend.remaining(self._session)

    def close(self) -> None:
        """Forget the callable items (they are kept in a process-local registry)."""
        self._backend.terminate_session(self._session)


def _turn(item: Any) -> Any:
    """A script item as a :class:`MockBackend` script."""
    if isinstance(item, ScriptedError):
        return MockBackend.error(item.reason)
    thought = [BackendEvent.new("reasoning", {"chars": item.chars})] \
        if isinstance(item, ScriptedThought) else []
    if isinstance(item, ScriptedThought):
        item = item.reply
    if callable(item):
        reply: Callable[[Any], Any] = item

        def play(prompt: str) -> Iterator[BackendEvent]:
            yield from thought
            yield _result(reply(json.loads(prompt)))
        return play
    return [*thought, _result(item)]


def _result(reply: Any) -> BackendEvent:
    return BackendEvent.new("result", {"text": json.dumps(reply)})
