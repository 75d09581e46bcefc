"""Inference providers: ``provider(request) -> output``, JSON in and JSON out.

The ``reason`` node calls one through ``ctx.model(name, provider, request)``, so the call
is recorded (``model.call.*``: the output kept, the request only as a hash) and a replay
serves the recorded output instead of calling.

:class:`MockProvider` is a scripted one on :class:`~hypha_celery.backends.MockBackend`:
each call is one backend turn. The request goes in as the prompt (canonical JSON: the
backend's history is the list of requests), each script item becomes that turn's
``result`` event, and :func:`~hypha_celery.backends.collect` reads the reply back.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from hypha_celery.backends import BackendError, BackendEvent, MockBackend, TurnError, collect

__all__ = ["MockProvider", "Provider", "ScriptedError"]

#: ``provider(request) -> output``: what the ``reason`` node calls (JSON in, JSON out).
Provider = Callable[[Any], Any]


@dataclass(frozen=True)
class ScriptedError:
    """A script item: the call raises ``BackendError(kind=reason)``."""

    reason: str


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

    def __call__(self, request: Any) -> Any:
        prompt = json.dumps(request, sort_keys=True, separators=(",", ":"))
        with self._lock:
            events, _ = self._backend.prompt(self._session, prompt)
            turn = collect(prompt, events, retention="lossless")
        if isinstance(turn, TurnError):
            raise BackendError(MockBackend.provider, turn.reason, False)
        return json.loads(turn.text)

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
    if callable(item):
        reply: Callable[[Any], Any] = item

        def play(prompt: str) -> Iterator[BackendEvent]:
            yield _result(reply(json.loads(prompt)))
        return play
    return [_result(item)]


def _result(reply: Any) -> BackendEvent:
    return BackendEvent.new("result", {"text": json.dumps(reply)})
