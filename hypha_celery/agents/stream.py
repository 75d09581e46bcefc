"""One attempt of a turn: the backend's stream consumed, watched for the watchdog and, by
the process's watch thread (:mod:`.watch`), for an interrupt or a stop.

The consumer runs ``backend.prompt`` and :func:`~hypha_celery.backends.collect`, calling
``handle_stream_event`` for every event (the state is threaded through) and relaying it
to ``stream_to``. When the watchdog fires, or an interrupt or a stop arrives, the attempt
ends at once (nothing is relayed any more) and ``backend.cancel()`` is called from
another thread: it closes the HTTP stream (a request still waiting for the provider
included) or kills the CLI's process group, so the consumer ends too.

Where it runs: a backend whose ``cancel`` unblocks it and whose dispatch is not durable
(``cancel_unblocks``, ``durable_dispatch = False``: the hosted backends) is consumed on
the task's own thread, and the watch thread also fires its watchdog (a
:class:`~.watch.Deadline`, at most ``watch.POLL_S`` late): no thread per turn, and no
hand-over between two threads at its end (about 0.9 ms of worker CPU per turn in
``bench/agents_io.py``'s burst). Any other backend is consumed on a thread of its own
while the task waits for it with the watchdog as its timeout: a backend without a
cancellation that does not end leaves that thread to finish alone (its late result is
ignored) and the turn moves on.

**Mid-turn checkpoint.** ``prompt`` gets a ``checkpoint(session_id)`` callable. The first
id the backend acknowledges is applied to the session (``checkpoint_session``) and
written to the agent's row in a store transaction fenced by the owner's token and the
turn before ``checkpoint`` returns: a worker killed after that keeps it. A repeat of the
same id is a no-op; an id that is not a short token (``invalid_session_id``), another id
in the same turn (``conflicting_session_id``), a turn that already ended or lost its
agent (``stale_checkpoint``) or a failed write (``checkpoint_failed``, retryable) raise a
:class:`~hypha_celery.backends.BackendError` there, and the turn fails with it whatever
the stream says next.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from hypha_celery.agents.behaviour import Agent, acting_as
from hypha_celery.agents.context import TurnContext
from hypha_celery.agents.options import Limits
from hypha_celery.agents.watch import Deadline
from hypha_celery.backends import (
    Backend,
    BackendError,
    BackendEvent,
    Response,
    Session,
    TurnError,
    collect,
)
from hypha_celery.backends.event import monotonic_ms
from hypha_celery.errors import ContextError, GovernedMemoryError

log = logging.getLogger(__name__)

#: A stream running longer than this has its dispatch-time session saved at once.
SAVE_AFTER_S = 0.005
# Why a turn could end, and whether the task-local (stream-callback) state survives it.
_KEEPS_STREAM_STATE = frozenset({"ok", "error_event", "no_terminal_event",
                                 "event_capture_overflow"})
#: The turn error of a context build that failed (nothing was sent to the backend).
CONTEXT_BUILD_FAILED = "context_build_failed"
#: What a provider session id may look like (a UUID, a ``thread_...`` id).
SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,199}")
#: Writes a session to the agent's row for the running turn; raises BackendError.
Persist = Callable[[Session], None]


@dataclass
class Attempt:
    """Inputs of one attempt and what it produced."""

    agent: Agent
    backend: Backend
    name: str
    session: Session
    prompt: str
    state: Any
    limits: Limits
    relay: Callable[[BackendEvent], None]
    #: Writes an acknowledged session id's session durably (fenced; raises BackendError).
    persist: Persist | None = None
    #: The session ``prompt`` returned, before the stream was consumed.
    dispatched: Session | None = None
    outcome: Response | TurnError | None = None
    stream_state: Any = None
    keeps_state: bool = False
    duration_ms: float = 0.0
    #: The provider session id acknowledged mid-turn, once stored.
    acked: str | None = None
    #: A refused checkpoint: the turn fails with it.
    failure: BackendError | None = None
    #: Characters of thinking the stream's ``reasoning`` events reported (a count; the
    #: agent's log gets ``thinking.*`` with it, never the text).
    reasoning_chars: int = 0
    #: The agent's context build (``Agent.context``), run before ``backend.prompt``.
    context: TurnContext | None = None
    _stopped: threading.Event = field(default_factory=threading.Event)
    _relay_lock: threading.Lock = field(default_factory=threading.Lock)
    #: Serializes the session's writes (the dispatch-time save and checkpoints).
    _session_lock: threading.Lock = field(default_factory=threading.Lock)
    _persisted: Session | None = None

    def run(self) -> None:
        """The consumer thread's body."""
        with acting_as(self.name):
            self.stream_state = self.state
            try:
                session, prompt = self.session, self.prompt
                if self.context is not None:
                    session, prompt = self.context.prepare(self.backend, session, prompt)
                events, session = self.backend.prompt(session, prompt, self.checkpoint)
                if self._stopped.is_set():  # aborted before prompt started the turn: its
                    self.backend.cancel()   # cancel found nothing to cancel then
                if self.context is not None:
                    session = self.context.sent(session)
                self._dispatched(session)
            except (ContextError, GovernedMemoryError) as exc:
                self._set(_context_failed(exc), True)
                return
            except BackendError as exc:
                self._set(_backend_failed(self.failure or exc), True)
                return
            except Exception as exc:
                self._set(TurnError("task_crashed", {"exception": type(exc).__name__}), False)
                return
            outcome = collect(self.prompt, events, max_events=self.limits.max_events_per_turn,
                              max_bytes=self.limits.max_event_bytes_per_turn,
                              retention=self.limits.event_retention,  # type: ignore[arg-type]
                              on_event=self._on_event)
            keeps = not (isinstance(outcome, TurnError) and outcome.reason == "task_crashed")
            if self.failure is not None:  # whatever the stream made of it
                outcome = _backend_failed(self.failure)
            if isinstance(outcome, Response):
                self.session = self._update_session(outcome)
            self._set(outcome, keeps)

    def _dispatched(self, session: Session) -> None:
        with self._session_lock:
            if self.acked is not None:  # acknowledged before prompt returned
                session = self.backend.checkpoint_session(session, self.acked)
            self.session = self.dispatched = session

    # -- the mid-turn checkpoint ---------------------------------------------------------
    def checkpoint(self, session_id: str) -> None:
        """What ``prompt`` gets as ``checkpoint``: see the module docstring."""
        with self._session_lock:
            if self.acked is not None and session_id == self.acked:
                return
            if not isinstance(session_id, str) or SESSION_ID.fullmatch(session_id) is None:
                raise self._refuse("invalid_session_id", "a session id is a short token")
            if self.acked is not None:
                raise self._refuse("conflicting_session_id", "the backend acknowledged "
                                   "another session id in the same turn")
            if self._stopped.is_set():
                raise self._refuse("stale_checkpoint", "the turn already ended")
            base = self.dispatched if self.dispatched is not None else self.session
            try:
                session = self.backend.checkpoint_session(base, session_id)
                if self.persist is not None:
                    self.persist(session)
            except BackendError as exc:
                self.failure = self.failure or exc
                raise
            except Exception as exc:
                raise self._refuse("checkpoint_failed", type(exc).__name__, True) from None
            self.acked = session_id
            self.session = session
            if self.dispatched is not None:
                self.dispatched = self._persisted = session

    def _refuse(self, kind: str, message: str, retryable: bool = False) -> BackendError:
        exc = BackendError(self.backend.provider, kind, retryable, message=message)
        self.failure = self.failure or exc
        return exc

    def session_now(self) -> Session:
        """The session to store with the outcome: a checkpoint being written is waited
        for, so an acknowledged id is never overwritten by the session before it (and,
        once the attempt ended, a checkpoint is refused ``stale_checkpoint``). Lock
        order: the attempt's lock, then the agent's row; never the other way."""
        with self._session_lock:
            return self.session

    def save_dispatched(self, save: Callable[[Session], None]) -> bool:
        """Save the dispatched session once (unless a checkpoint did); False when
        ``prompt`` has not returned yet."""
        with self._session_lock:
            if self.dispatched is None:
                return False
            if self._persisted is not self.dispatched:
                save(self.dispatched)
                self._persisted = self.dispatched
            return True

    # -- the stream ------------------------------------------------------------------------
    def _update_session(self, response: Response) -> Session:
        try:
            return self.backend.update_session(self.session, response.terminal.data)
        except Exception:
            return self.session

    def _on_event(self, event: BackendEvent) -> None:
        chars = event.data.get("chars") if event.kind == "reasoning" else None
        if isinstance(chars, int) and not isinstance(chars, bool) and chars > 0:
            self.reasoning_chars += chars
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

    def interrupt(self) -> None:
        """:meth:`abort` as an interrupt or a stop ends it."""
        self.abort(TurnError("interrupted"))

    def time_out(self) -> None:
        """:meth:`abort` as its watchdog ends it."""
        self.abort(TurnError("timeout", {"watchdog_ms": self.limits.watchdog_ms}))

    def abort(self, outcome: TurnError) -> bool:
        """:meth:`stop`, then cancel the provider's request (the backend's ``cancel``,
        from this thread)."""
        if not self.stop(outcome):
            return False
        try:
            self.backend.cancel()
        except Exception as exc:  # the contract says it must not raise
            log.warning("agent backend cancel raised %s", type(exc).__name__)
        return True

    def wait(self, timeout: float) -> bool:
        return self._stopped.wait(timeout)


def _context_failed(exc: ContextError | GovernedMemoryError) -> TurnError:
    """A build that failed before the backend was called: ``context_build_failed`` with
    the error's type and its message (ids, counts and reasons: hypha's messages carry no
    content), or a memory error's code."""
    if isinstance(exc, GovernedMemoryError):
        return TurnError(CONTEXT_BUILD_FAILED, {"error": type(exc).__name__,
                                                "code": exc.code})
    return TurnError(CONTEXT_BUILD_FAILED, {"error": type(exc).__name__, "message": str(exc)})


def _backend_failed(exc: BackendError) -> TurnError:
    return TurnError(exc.kind, {"backend_error": exc.to_json()})


#: ``watching(on_stop, deadline)``: registers the turn with the process's watch thread.
Watching = Callable[[Callable[[], None], Deadline | None], AbstractContextManager[None]]


def run_attempt(attempt: Attempt, watching: Watching,
                save: Callable[[Session], None]) -> Attempt:
    """Consume one attempt; returns when it ended, timed out or was interrupted
    (``watching(on_interrupt)`` registers it with the process's watch thread). A stream
    still running ``SAVE_AFTER_S`` after its start has the session ``prompt`` returned
    saved through ``save`` (so a crash mid-stream does not undo what the dispatch changed;
    a turn that ends sooner saves it once, with its outcome: a crash inside that window
    ends the turn ``task_crashed`` with the session as it was before the dispatch). A
    backend whose dispatch changes nothing held elsewhere (``durable_dispatch = False``,
    the HTTP backends) is not saved mid-stream; with ``cancel_unblocks`` it is consumed on
    this thread (see the module)."""
    started = monotonic_ms()
    deadline = time.monotonic() + attempt.limits.watchdog_ms / 1000.0
    backend = attempt.backend
    if backend.cancel_unblocks and not backend.durable_dispatch:
        _run_here(attempt, watching, deadline)
        attempt.duration_ms = monotonic_ms() - started
        return attempt
    thread = threading.Thread(target=attempt.run, name=f"hypha-agent-{attempt.name}",
                              daemon=True)
    with watching(attempt.interrupt, None):
        thread.start()
        wait, saved = SAVE_AFTER_S, not attempt.backend.durable_dispatch
        while not attempt.wait(_until(deadline, None if saved else wait)):
            if time.monotonic() >= deadline:
                attempt.time_out()
                break
            if not saved:
                try:
                    saved = attempt.save_dispatched(save)
                except BaseException:  # the agent is gone (stopped, replaced): end it here
                    attempt.interrupt()
                    raise
                wait = min(wait * 2, 0.1)  # prompt has not returned: look again later
    attempt.duration_ms = monotonic_ms() - started
    return attempt


def _run_here(attempt: Attempt, watching: Watching, deadline: float) -> None:
    """Consume ``attempt`` on this thread; the watch thread aborts it at an interrupt, a
    stop or ``deadline`` (the backend's ``cancel`` ends the stream)."""
    with watching(attempt.interrupt, Deadline(deadline, attempt.time_out)):
        try:
            attempt.run()
        except Exception as exc:  # as a consumer thread's death: the turn crashed
            attempt.stop(TurnError("task_crashed", {"exception": type(exc).__name__}))


def _until(deadline: float, save_in: float | None) -> float:
    left = max(0.0, deadline - time.monotonic())
    return left if save_in is None else min(left, save_in)
