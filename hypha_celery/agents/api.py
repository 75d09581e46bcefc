"""``hypha.agents``: start conversational agents and talk to them by name.

Every call addresses an agent by its name and works from any process that has the app:
the agent is a row in the store, not a process. Calls that GenAgent answers with
``{:error, reason}`` raise a typed error (:class:`~hypha_celery.errors.AgentNotFound`,
:class:`~hypha_celery.errors.Overloaded` with GenAgent's ``info``,
:class:`~hypha_celery.errors.AgentError` with ``reason`` ``draining`` / ``halted`` /
``busy`` / ``self_stop`` / ...); calls whose answers are all ordinary outcomes return them
(``poll``, ``interrupt_request``, ``cancel_request``). Casts (``notify``, ``halt``,
``resume``, ``interrupt``) never raise for the agent's state and are no-ops for a name
nobody has.
"""

from __future__ import annotations

import copy
import sys
import time
import uuid
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Literal

from celery.canvas import Signature

from hypha_celery.agents import effects, machine, rows, telemetry
from hypha_celery.agents.behaviour import Agent, acting_as, current_name
from hypha_celery.agents.callers import CallerLease
from hypha_celery.agents.channels import Channel, ChannelMessage, target
from hypha_celery.agents.context import context_scope
from hypha_celery.agents.doc import (
    AgentDoc,
    Answered,
    Failed,
    OnHalt,
    Origin,
    Request,
    outcome_from,
)
from hypha_celery.agents.options import RESERVED, Limits
from hypha_celery.agents.rows import AgentTx
from hypha_celery.agents.runtime import AgentRuntime, class_path, ref_channel
from hypha_celery.agents.tools import AgentTools
from hypha_celery.backends import Backend, BackendError, Response
from hypha_celery.errors import (
    AgentAlreadyStarted,
    AgentError,
    AgentNotFound,
    AgentSpecError,
    AgentStartFailed,
    Overloaded,
    TooLarge,
    TurnFailed,
    WaitTimeout,
)
from hypha_celery.events import payloads as ev
from hypha_celery.graph.jsonsafe import is_json, json_size_or_none
from hypha_celery.lanes import Bound
from hypha_celery.live import LiveStream, agent_topic
from hypha_celery.memory import MemoryScope
from hypha_celery.store import agents as table

OnHaltOption = Literal["queue", "fail"]
MAX_NAME = 200


@dataclass(frozen=True, slots=True)
class AgentInfo:
    """What ``whereis`` finds: the live incarnation of a name (a restart under the same
    name is a new incarnation; its refs never match the old one's)."""

    name: str
    incarnation: str
    kind: str
    phase: str


@dataclass(frozen=True, slots=True)
class Poll:
    """``status`` is ``pending``, ``completed`` (``response``) or ``error`` (``reason``,
    ``info``); an unknown, pruned or ask ref is ``error`` / ``not_found``."""

    status: Literal["pending", "completed", "error"]
    response: Response | None = None
    reason: str | None = None
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AgentStatus:
    """GenAgent's status map. ``agent_state`` is the stored callback state; ``repr`` (and
    so logs and tracebacks) never shows it."""

    state: Literal["idle", "processing"]
    name: str
    queued: int
    current_request: str | None
    halted: bool
    halt_pending: bool
    draining: bool
    agent_state: Any = field(repr=False)


class Agents:
    def __init__(self, rt: AgentRuntime, ensure_worker: Any = None) -> None:
        self._rt = rt
        self._ensure_worker = ensure_worker or (lambda: None)
        self._caller = CallerLease(rt.store, rt.lease_interval)

    def use_tools(self, tools: AgentTools | None) -> None:
        """Let this process's agent turns run ``tools`` themselves, governed (see
        :mod:`hypha_celery.agents.tools`; a hosted-model agent opts in with
        ``run_tools=True``); None: tool calls end the turn again. Workers need the same
        call (in the app module) to run them."""
        if tools is not None and not isinstance(tools, AgentTools):
            raise AgentSpecError(f"use_tools() takes AgentTools, got {type(tools).__name__}")
        self._rt.tools = tools

    # -- lifecycle ----------------------------------------------------------------------
    def start(self, agent: type[Agent], *, name: str, backend: type[Backend],
              memory_scope: MemoryScope | None = None, **options: Any) -> AgentInfo:
        """Start ``agent`` under ``name``: ``init_agent`` runs here with the options hypha
        does not consume (the limits of :class:`~hypha_celery.agents.Limits` are its
        own), then ``backend().start_session(backend_opts)``; ``pre_run`` runs on a worker
        before the first turn. ``memory_scope``: whose memory the turns of an agent whose
        ``context`` reads memory search (required for one: ``MemoryScopeRequired``)."""
        _check_name(name)
        scope = context_scope(agent, memory_scope)
        kind, path = self._rt.register(agent, backend)
        if not _in_process(self._rt):
            _check_importable("agent", agent)
            _check_importable("backend", backend)
        instance = self._rt.new_backend(path)
        limits = Limits.from_options(options)
        opts = {k: v for k, v in options.items() if k not in RESERVED}
        backend_opts, state = _init(agent, name, opts)
        try:
            session = instance.start_session(backend_opts)
        except BackendError as exc:
            raise AgentStartFailed("backend_start_failed", f"backend start failed: {exc.kind}",
                                   {"backend_error": exc.to_json()}) from None
        runs_pre_run = agent.pre_run is not Agent.pre_run  # the default needs no worker
        doc = machine.new_doc(name, uuid.uuid4().hex, kind, path, limits, state, session,
                              runs_pre_run)
        doc.memory_scope = scope
        if not rows.create(self._rt.store, doc):
            _quietly(lambda: instance.terminate_session(session))
            raise AgentAlreadyStarted(name)
        if doc.pump is not None:
            self._publish(name, doc.incarnation, doc.pump)
        return AgentInfo(name, doc.incarnation, kind, doc.phase.value)

    def stop(self, name: str) -> None:
        """Terminate now: the active and queued asks end ``agent_terminated``, tells get
        no completion; ``terminate_agent`` and the backend's ``terminate_session`` run
        here. From the agent's own callbacks: ``AgentError("self_stop")``."""
        if current_name() == name:
            raise AgentError("self_stop", "an agent cannot stop itself from its callbacks")
        with rows.locked(self._rt.store, name) as atx:
            doc = atx.doc
            if doc.current is not None:
                active = doc.current.ref
                atx.after_commit(lambda: self._rt.transport.fence(active))
            effects.terminate(atx, self._rt, "shutdown")
        effects.cleanup(self._rt, doc, "shutdown")

    def drain(self, name: str, timeout: float | None = None) -> None:
        """Refuse new input (``draining``), fail queued requests with ``draining``, drop
        queued notifications and any self-chain, let the active turn finish, then stop.
        Returns once the agent is gone; a timeout raises ``AgentError("timeout")`` and
        leaves the drain running."""
        with rows.locked(self._rt.store, name) as atx:
            incarnation = atx.incarnation
            if not atx.doc.draining:
                for request in machine.drain(atx.doc, atx.take_queued()):
                    effects.finish(atx, self._rt, request, Failed("draining"))
                atx.clear_notifications()
                atx.emit(ev.AgentDraining())
                self._wake(atx)
        self._ensure_worker()
        end = None if timeout is None else time.monotonic() + timeout
        while table.control(self._rt.store, name, incarnation)[0]:  # alive: a cheap read
            if end is not None and time.monotonic() > end:
                raise AgentError("timeout", "the drain goes on; the agent has not exited yet")
            time.sleep(0.02)

    # -- requests -----------------------------------------------------------------------
    def ask(self, name: str, prompt: str, timeout: float | None = None) -> Response:
        """Send ``prompt`` and wait for the request's end (including caller-owned
        retries). Raises :class:`TurnFailed` for an error outcome and
        :class:`WaitTimeout` when ``timeout`` passes (the ask stays queued or running)."""
        request = _new_request(prompt, Origin.ASK)
        ref = request.ref
        end = None if timeout is None else time.monotonic() + timeout
        # listening before the prompt is admitted: its end cannot be missed, so the store
        # is first read once the wake-up came (or half a second passed)
        with self._rt.notifier.listen(ref_channel(ref)) as listener:
            self._admit(name, request)
            while True:
                left = None if end is None else end - time.monotonic()
                listener.wait(0.5 if left is None else max(0.0, min(0.5, left)))
                if (found := table.take_result(self._rt.store, ref)) is not None:
                    break
                if end is not None and time.monotonic() >= end:
                    raise WaitTimeout(f"ask {ref} to agent {name!r} did not end within "
                                      f"{timeout}s; it stays queued or running")
        outcome = outcome_from(found)
        if isinstance(outcome, Answered):
            return outcome.decode()
        raise TurnFailed(outcome.reason, f"ask to agent {name!r} failed: {outcome.reason}",
                         outcome.info)

    def tell(self, name: str, prompt: str) -> str:
        """Queue ``prompt``; returns its ref at once. The result is kept for ``poll``."""
        return self._admit(name, _new_request(prompt, Origin.TELL))

    def tell_with_completion(self, name: str, prompt: str, recipient: Channel | Signature,
                             *, on_halt: OnHaltOption = "queue",
                             stream_to: Channel | None = None) -> str:
        """Like ``tell``, plus exactly one completion message to ``recipient`` (a
        :class:`Channel` read with :meth:`receive`, or a Celery signature called with
        ``(name, ref, outcome)``), sent after the decision and ``post_turn``.
        ``on_halt="fail"``: refused with ``AgentError("halted")`` while halted, and
        completed ``halted`` if the agent halts while it waits. ``stream_to`` receives
        every streamed event of the request, in order, before the completion."""
        if on_halt not in ("queue", "fail"):
            raise AgentSpecError(f"on_halt must be 'queue' or 'fail', got {on_halt!r}")
        if stream_to is not None and not isinstance(stream_to, Channel):
            raise AgentSpecError("stream_to must be a Channel or None")
        request = _new_request(prompt, Origin.TELL, completion=target(recipient),
                               stream_to=target(stream_to), on_halt=OnHalt(on_halt))
        return self._admit(name, request)

    def poll(self, name: str, ref: str) -> Poll:
        with rows.locked(self._rt.store, name) as atx:
            if _pending(atx, ref):
                return Poll("pending")
            found = table.result(atx.tx, ref, atx.doc.incarnation)
        if found is None or found.get("internal"):
            return Poll("error", reason="not_found")
        outcome = outcome_from(found)
        if isinstance(outcome, Answered):
            return Poll("completed", outcome.decode())
        return Poll("error", reason=outcome.reason, info=outcome.info)

    def notify(self, name: str, event: Any) -> None:
        """Deliver ``event`` to ``handle_event`` (deferred while a turn runs). Never
        raises for overload or draining: a refusal is ``("input", "rejected")``
        telemetry."""
        try:
            self.notify_ack(name, event)
        except (Overloaded, AgentError) as exc:
            telemetry.rich(("input", "rejected"), name, reason=exc.reason)

    def notify_ack(self, name: str, event: Any) -> None:
        """``notify`` that confirms admission (not delivery); raises
        :class:`Overloaded`, ``AgentError("draining")`` or :class:`AgentNotFound`."""
        size = json_size_or_none(event)
        if size is None:
            raise AgentSpecError("a notification must be JSON-serializable")
        with rows.locked(self._rt.store, name) as atx:
            _fits("agent notification", size, atx.doc.limits.notifications, "notification")
            machine.accepting(atx.doc)
            refused = atx.queue_event(event)
            if refused is not None:
                raise refused
            self._wake(atx)
        self._ensure_worker()

    # -- control ------------------------------------------------------------------------
    def halt(self, name: str) -> None:
        """Halt (``halt_pending``): a worker applies it once the running turn's callbacks,
        or the notifications it is handling, are done — at once when idle — and runs
        ``post_run``; a ``resume`` before that cancels it. Idempotent; ignored while
        draining."""
        with _cast(self._rt, name) as atx:
            if atx is None or not machine.request_halt(atx.doc):
                return
            self._wake(atx)
        self._ensure_worker()

    def resume(self, name: str) -> None:
        """Clear ``halted`` and dispatch queued work; during a turn, cancel a pending
        external halt."""
        with _cast(self._rt, name) as atx:
            if atx is None:
                return
            if machine.resume(atx.doc):
                atx.emit(ev.AgentResumed())
                if atx.queued_count() or atx.doc.self_chain is not None:
                    self._wake(atx)
        self._ensure_worker()

    def interrupt(self, name: str) -> None:
        """Interrupt the active turn, whatever it is (a no-op when idle)."""
        with _cast(self._rt, name) as atx:
            if atx is not None and machine.interruptible(atx.doc) == "accepted":
                self._interrupt(atx)

    def interrupt_request(self, name: str, ref: str) -> Literal["accepted", "not_current",
                                                                 "idle"]:
        """Interrupt ``ref`` only if it is the active turn: ``accepted`` (it ends
        ``interrupted``), ``not_current`` (another turn is active) or ``idle``."""
        with rows.locked(self._rt.store, name) as atx:
            verdict = machine.interruptible(atx.doc, ref)
            if verdict == "accepted":
                self._interrupt(atx)
        return verdict

    def cancel_request(self, name: str, ref: str) -> Literal[
            "cancelled", "current", "already_finished", "not_found"]:
        """Remove a queued tell or a pending caller-owned retry: ``cancelled`` (also on a
        repeat, while the tombstone is cached), ``current``, ``already_finished`` or
        ``not_found`` (unknown, pruned, ask or event refs). The completion recipient gets
        one ``cancelled``; no turn callback runs."""
        with rows.locked(self._rt.store, name) as atx:
            cur = atx.doc.current
            if cur is not None and cur.ref == ref:
                return "current"
            request = machine.take_chained_tell(atx.doc, ref) or _take_queued(atx, ref)
            if request is None:
                found = table.result(atx.tx, ref, atx.doc.incarnation)
                if found is None or found.get("internal"):
                    return "not_found"
                return "cancelled" if found.get("error") == "cancelled" else "already_finished"
            effects.finish(atx, self._rt, request, Failed("cancelled"))
            atx.emit(ev.AgentRequestCancelled(ref=ref))
        self._rt.middleware.after_turn_cancelled(effects.turn(name, request),
                                                 "caller_cancelled")
        return "cancelled"

    def reset_session(self, name: str) -> None:
        """Idle only: the backend's ``reset_session``; state and queue are kept."""
        with rows.locked(self._rt.store, name) as atx:
            doc = atx.doc
            machine.reset_check(doc)
            backend = self._rt.new_backend(doc.backend)
            try:
                # a copy: a backend that changed the stored dict in place would
                # leave nothing to write (rows write the session only when it changed)
                session = backend.reset_session(copy.deepcopy(doc.session))
            except BackendError as exc:
                reason = "unsupported" if exc.kind == "unsupported" else "backend_reset_failed"
                raise AgentError(reason, f"reset_session: {exc.kind}") from None
            if not isinstance(session, dict) or not is_json(session):
                raise AgentError("invalid_reset_result", "reset_session returned no session")
            doc.session = session

    # -- reading ------------------------------------------------------------------------
    def status(self, name: str) -> AgentStatus:
        doc, (queued, _) = self._read(name)
        cur = doc.current
        return AgentStatus("processing" if cur is not None else "idle", name, queued,
                           None if cur is None else cur.ref, doc.halted, doc.halt_pending,
                           doc.draining, doc.state)

    def runtime_snapshot(self, name: str) -> dict[str, Any]:
        """Content free: phase, flags, queue depths, the current request's ids and
        timings. Never prompts, state, sessions or payloads."""
        doc, (prompts, notes) = self._read(name)
        cur = doc.current
        current = None
        if cur is not None:
            started = cur.started_at
            current = {"ref": cur.ref, "origin": cur.origin.value, "attempt": cur.attempt,
                       "elapsed_ms": 0.0 if started is None else (time.time() - started) * 1e3,
                       "watchdog_ms": doc.limits.watchdog_ms}
        return {"phase": "processing" if cur is not None else "idle",
                "halted": doc.halted, "halt_pending": doc.halt_pending,
                "draining": doc.draining, "pending_prompts": prompts,
                "pending_notifications": notes,
                "self_chain_pending": doc.self_chain is not None,
                "current_request": current}

    def list(self, prefix: str = "") -> list[str]:
        """Names of the live agents (point in time, unordered), those starting with
        ``prefix`` only when given."""
        return table.names(self._rt.store, prefix)

    def whereis(self, name: str) -> AgentInfo | None:
        doc = rows.read(self._rt.store, name)
        if doc is None:
            return None
        return AgentInfo(name, doc.incarnation, doc.kind, doc.phase.value)

    @staticmethod
    def channel() -> Channel:
        """A fresh channel for completions and streamed events."""
        return Channel.new()

    def receive(self, channel: Channel, timeout: float = 5.0) -> ChannelMessage | None:
        """The next message on ``channel`` (see :mod:`.channels`), or None after
        ``timeout`` seconds."""
        return self._rt.transport.receive(channel, timeout)

    def close(self) -> None:
        """Close the transport; this client's queued asks lose their caller (they are
        dropped ``caller_down`` when their turn comes)."""
        self._caller.close()
        self._rt.transport.close()

    # -- internals ----------------------------------------------------------------------
    def _admit(self, name: str, request: Request) -> str:
        caller = self._caller.ensure() if request.origin is Origin.ASK else None
        size = len(request.prompt.encode())
        try:
            with rows.locked(self._rt.store, name) as atx:
                _fits("agent prompt", size, atx.doc.limits.prompts, "prompt")
                if machine.admit(atx.doc, request):
                    self._wake(atx)
                    atx.after_commit(lambda: telemetry.rich(("state", "changed"), name,
                                                            **{"from": "idle",
                                                               "to": "processing"}))
                else:
                    self._queue(atx, request, caller)
        except (Overloaded, AgentError) as exc:
            if not isinstance(exc, AgentNotFound):
                self._rt.middleware.after_turn_rejected(effects.turn(name, request),
                                                        exc.reason)
            raise
        self._ensure_worker()
        return request.ref

    def _queue(self, atx: AgentTx, request: Request, caller: str | None) -> None:
        """Queue a caller's prompt on the lane (a queued ask carries its caller)."""
        request.caller = caller
        refused = atx.queue(request, atx.doc.limits.prompts)
        if refused is not None:
            raise refused
        depth = atx.queued_count()
        atx.after_commit(lambda: telemetry.rich(("mailbox", "queued"), atx.name, depth=depth))

    def _wake(self, atx: AgentTx) -> None:
        """Hand an idle agent to a worker: on PostgreSQL the pump message is published
        right before the commit, the agent's row still locked, so the worker that takes
        it waits on that lock for this commit and the message travels while the commit
        flushes (a commit that then fails leaves a wake whose token the row does not
        hold: the worker drops it); elsewhere after the commit (SQLite's busy wait
        sleeps a millisecond or more)."""
        token = machine.wake(atx.doc)
        if token is not None:
            name, incarnation = atx.name, atx.incarnation
            publish = atx.before_commit if atx.tx.dialect == "postgresql" else atx.after_commit
            publish(lambda: self._publish(name, incarnation, token))

    def _interrupt(self, atx: AgentTx) -> None:
        """Ask the owner to end the active turn ``interrupted``; fence its stream."""
        cur = atx.doc.current
        assert cur is not None
        ref = cur.ref
        atx.write_control(ref)
        atx.after_commit(lambda: self._rt.transport.fence(ref))

    def _publish(self, name: str, incarnation: str, token: str) -> None:
        self._ensure_worker()
        self._rt.publish(name, incarnation, token)

    def _read(self, name: str) -> tuple[AgentDoc, tuple[int, int]]:
        with rows.locked(self._rt.store, name) as atx:
            return atx.doc, atx.pending()

    # -- live tokens --------------------------------------------------------------------
    def stream(self, name: str, timeout: float | None = None) -> LiveStream:
        """``name``'s live items from now on (``text`` deltas, ``tool_use`` notices,
        ``usage`` of the turn it is streaming or streams next; see
        :mod:`hypha_celery.live`), never stored: nothing emitted before this call comes
        back. Subscribed when this returns. Ends with that turn's ``end`` item
        (``{"kind": "end", "ref", ...}``, published by the turn's relay when its outcome
        is known), or without it once ``timeout`` seconds have passed.
        :class:`AgentNotFound` for a name nobody has."""
        sub = self._rt.live.subscribe(agent_topic(name))
        if self.whereis(name) is None:
            sub.close()
            raise AgentNotFound(name)
        return sub.until_end(timeout)


class _cast:
    """``with _cast(rt, name) as atx``: the locked agent, or None when there is none."""

    def __init__(self, rt: AgentRuntime, name: str) -> None:
        self._cm: AbstractContextManager[AgentTx] | None = rows.locked(rt.store, name)

    def __enter__(self) -> AgentTx | None:
        assert self._cm is not None
        try:
            return self._cm.__enter__()
        except AgentNotFound:
            self._cm = None
            return None

    def __exit__(self, *exc: Any) -> bool | None:
        if self._cm is None:
            return None
        return self._cm.__exit__(*exc)


def _new_request(prompt: str, origin: Origin, **options: Any) -> Request:
    if not isinstance(prompt, str):
        raise AgentSpecError(f"a prompt is a string, got {type(prompt).__name__}")
    return machine.new_request(prompt, origin, **options)


def _pending(atx: AgentTx, ref: str) -> bool:
    """A tell still queued, active or between retry attempts."""
    found = machine.pending_tell(atx.doc, ref)
    if found is not None:
        return found
    for request in atx.queued():
        if request.ref == ref:
            return request.origin is Origin.TELL
    return False


def _take_queued(atx: AgentTx, ref: str) -> Request | None:
    """Remove a queued tell and return it."""
    for request in atx.queued():
        if request.ref == ref and request.origin is Origin.TELL:
            atx.remove_queued(ref)
            return request
    return None


def _init(agent: type[Agent], name: str, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    try:
        with acting_as(name):
            result = agent().init_agent(opts)
        backend_opts, state = result
    except Exception as exc:
        raise AgentStartFailed("init_agent_failed",
                               f"init_agent failed: {type(exc).__name__}") from None
    if not isinstance(backend_opts, dict):
        raise AgentStartFailed("init_agent_failed", "init_agent must return (dict, state)")
    if not is_json(state):
        raise AgentStartFailed("init_agent_failed", "the agent state must be JSON")
    return backend_opts, state


def _fits(what: str, size: int, bound: Bound, option: str) -> None:
    """:class:`TooLarge` for one item larger than its whole queue's byte bound: it could
    never be queued, so it is refused even when the agent is idle."""
    if size > bound.max_bytes:
        raise TooLarge(what, size, bound.max_bytes, f"agent option max_pending_{option}_bytes")


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or not name or len(name) > MAX_NAME:
        raise AgentSpecError(f"an agent name is a string of 1..{MAX_NAME} characters")


def _in_process(rt: AgentRuntime) -> bool:
    """Whether every worker runs in this process (a ``memory://`` broker: the embedded
    runtime, tests), so it finds a class by its registration here."""
    return str(rt.app.conf.broker_url or "").startswith("memory://")


def _check_importable(what: str, cls: type) -> None:
    """:class:`AgentSpecError` unless a worker in another process, which imports an
    agent's classes by ``module:Qualname``, finds ``cls`` by it."""
    path = class_path(cls)
    where = _unreachable(cls)
    if where is not None:
        raise AgentSpecError(
            f"{what} class {path} is defined {where}, so workers in other processes cannot "
            "import it: define it in a module workers import it from (your app module, "
            "say; see docs/testing.md, \"Make your app buildable\")")


def _unreachable(cls: type) -> str | None:
    """Why ``module:Qualname`` does not name ``cls`` from another process, or None."""
    if cls.__module__ == "__main__":
        return "in __main__ (the script being run)"
    if "<locals>" in cls.__qualname__:
        return "in a function"
    obj: Any = sys.modules.get(cls.__module__)
    for part in cls.__qualname__.split("."):
        obj = getattr(obj, part, None)
    return None if obj is cls else f"in module {cls.__module__} under another name"


def _quietly(fn: Any) -> None:
    try:
        fn()
    except Exception:
        return


__all__ = ["AgentInfo", "AgentStatus", "Agents", "Poll"]
