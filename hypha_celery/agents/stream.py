"""One attempt of a turn: the backend's stream consumed in a thread, watched by the owning
task for the watchdog and for an interrupt request.

The consumer thread runs ``backend.prompt`` and :func:`~hypha_celery.backends.collect`,
calling ``handle_stream_event`` for every event (the state is threaded through) and
relaying it to ``stream_to``. The owning task waits on it in slices of ``POLL_S``, polling
the agent row's ``control`` column; when the watchdog fires or an interrupt arrives it
stops relaying and abandons the thread (a backend owns the cancellation of its provider's
request: stopping the consumer does not stop it)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypha_celery.agents.behaviour import Agent, acting_as
from hypha_celery.agents.options import Limits
from hypha_celery.backends import Backend, BackendError, Event, Response, TurnError, collect
from hypha_celery.backends.event import monotonic_ms

POLL_S = 0.02
#: A stream running longer than this has its dispatch-time session saved at once.
SAVE_AFTER_S = 0.005
# Why a turn could end, and whether the task-local (stream-callback) state survives it.
_KEEPS_STREAM_STATE = frozenset({"ok", "error_event", "no_terminal_event",
                                 "event_capture_overflow"})


@dataclass
class Attempt:
    """Inputs of one attempt and what it produced."""

    agent: Agent
    backend: Backend
    name: str
    session: dict[str, Any]
    prompt: str
    state: Any
    limits: Limits
    relay: Callable[[Event], None]
    #: The session ``prompt`` returned, before the stream was consumed.
    dispatched: dict[str, Any] | None = None
    outcome: Response | TurnError | None = None
    stream_state: Any = None
    keeps_state: bool = False
    duration_ms: float = 0.0
    _stopped: threading.Event = field(default_factory=threading.Event)
    _relay_lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self) -> None:
        """The consumer thread's body."""
        with acting_as(self.name):
            self.stream_state = self.state
            try:
                events, self.session = self.backend.prompt(self.session, self.prompt)
            except BackendError as exc:
                self._set(TurnError(exc.kind, {"backend_error": exc.to_json()}), True)
                return
            except Exception as exc:
                self._set(TurnError("task_crashed", {"exception": type(exc).__name__}), False)
                return
            self.dispatched = self.session
            outcome = collect(self.prompt, events, max_events=self.limits.max_events_per_turn,
                              max_bytes=self.limits.max_event_bytes_per_turn,
                              retention=self.limits.event_retention,  # type: ignore[arg-type]
                              on_event=self._on_event)
            keeps = not (isinstance(outcome, TurnError) and outcome.reason == "task_crashed")
            if isinstance(outcome, Response):
                self.session = self._update_session(outcome)
            self._set(outcome, keeps)

    def _update_session(self, response: Response) -> dict[str, Any]:
        try:
            return self.backend.update_session(self.session, response.terminal.data)
        except Exception:
            return self.session

    def _on_event(self, event: Event) -> None:
        self.stream_state = self.agent.handle_stream_event(event, self.stream_state)
        with self._relay_lock:
            if not self._stopped.is_set():
                self.relay(event)

    def _set(self, outcome: Response | TurnError, keeps: bool) -> None:
        with self._relay_lock:
            if self._stopped.is_set():
                return
            self.outcome, self.keeps_state = outcome, keeps
            self._stopped.set()

    def stop(self, outcome: TurnError) -> bool:
        """End the attempt from outside (watchdog, interrupt) unless it already ended.
        After this returns no event is relayed any more."""
        with self._relay_lock:
            if self._stopped.is_set():
                return False
            self.outcome, self.keeps_state = outcome, False
            self._stopped.set()
            return True

    def wait(self, timeout: float) -> bool:
        return self._stopped.wait(timeout)


def run_attempt(attempt: Attempt, interrupted: Callable[[], bool],
                save: Callable[[dict[str, Any]], None]) -> Attempt:
    """Consume one attempt; returns when it ended, timed out or was interrupted. A stream
    still running ``SAVE_AFTER_S`` after its start has the session ``prompt`` returned
    saved through ``save`` (so a crash mid-stream does not undo what the dispatch changed;
    a turn that ends sooner saves it once, with its outcome: a crash inside that window
    ends the turn ``task_crashed`` with the session as it was before the dispatch)."""
    started = monotonic_ms()
    deadline = time.monotonic() + attempt.limits.watchdog_ms / 1000.0
    thread = threading.Thread(target=attempt.run, name=f"hypha-agent-{attempt.name}",
                              daemon=True)
    thread.start()
    save_at, saved = time.monotonic() + SAVE_AFTER_S, False
    polled = time.monotonic()
    while not attempt.wait(_next_wait(saved, save_at, polled, deadline)):
        now = time.monotonic()
        if not saved and now >= save_at and attempt.dispatched is not None:
            save(attempt.dispatched)
            saved = True
        if now >= deadline:
            attempt.stop(TurnError("timeout", {"watchdog_ms": attempt.limits.watchdog_ms}))
            break
        if now - polled >= POLL_S:
            polled = now
            if interrupted():
                attempt.stop(TurnError("interrupted"))
                break
    attempt.duration_ms = monotonic_ms() - started
    return attempt


def _next_wait(saved: bool, save_at: float, polled: float, deadline: float) -> float:
    """Until the next thing to do: the session save, the interrupt poll or the watchdog."""
    now = time.monotonic()
    until = min(polled + POLL_S, deadline)
    if not saved:
        until = min(until, max(save_at, now + SAVE_AFTER_S / 2))
    return max(0.0, until - now)
