"""The middleware list: a base class with no-op hooks, and the stack that calls them.

In the style of dramatiq's ``Middleware``: ``before_*`` hooks run in list order,
``after_*`` hooks in reverse, so the first middleware wraps all the others (the process
hooks ``process_boot`` in order, ``process_shutdown`` in reverse). A hook that raises is
logged (its exception type only) and never breaks a run or a turn.

The stack has one typed method per hook (``stack.before_step(step)``): mypy checks every
call site, and a middleware overriding a hook with an incompatible signature is a mypy
error (the override of a base method) and, at run time, :class:`MiddlewareSignatureError`
when the stack is built. Each method runs over a tuple, made once, of the middleware
that override that hook: a hook nobody overrides costs a lookup and an empty loop, and
:meth:`MiddlewareStack.wants` lets a caller skip building the hook's argument."""

from __future__ import annotations

import inspect
import logging
import weakref
from collections.abc import Callable, Iterable
from typing import Any, Literal, get_args

from hypha_celery.errors import MiddlewareSignatureError
from hypha_celery.middleware._hooks import (
    Attempt,
    AttemptEnd,
    Call,
    CallEnd,
    Process,
    Publish,
    RunEnd,
    RunStart,
    Settling,
    Step,
    Sweep,
    Turn,
    TurnEnd,
)

log = logging.getLogger(__name__)


class Middleware:
    """Override the hooks you need; every hook has a default that does nothing."""

    # runs
    def after_run_start(self, run: RunStart) -> None: ...
    def after_run_end(self, run: RunEnd) -> None: ...

    # coordinator steps
    def before_step(self, step: Step) -> None: ...
    def after_step(self, step: Step, error: BaseException | None) -> None: ...

    # node executions
    def before_attempt(self, attempt: Attempt) -> None: ...
    def after_attempt(self, attempt: Attempt, end: AttemptEnd) -> None: ...
    # what becomes of a finished attempt: a middleware may retry or dead-letter it
    def after_attempt_outcome(self, outcome: Settling) -> None: ...
    def after_retry_scheduled(self, attempt: Attempt, delay: float) -> None: ...
    def after_dead_letter(self, attempt: Attempt, reason: str) -> None: ...
    def after_late_result(self, attempt: Attempt, reason: str) -> None: ...

    # model and tool calls a node makes through its context (in the node's thread)
    def before_call(self, call: Call) -> None: ...
    def after_call(self, call: Call, end: CallEnd) -> None: ...

    # task messages the app's processes publish (``before_publish`` may add headers)
    def before_publish(self, message: Publish) -> None: ...
    def after_publish(self, message: Publish) -> None: ...

    # worker processes
    def process_boot(self, process: Process) -> None: ...
    def after_fork(self) -> None: ...
    def process_shutdown(self, process: Process) -> None: ...

    # agent turns
    def before_turn(self, turn: Turn) -> None: ...
    def after_turn(self, turn: Turn, end: TurnEnd) -> None: ...
    # a request refused (overloaded, draining, pre_turn...) or cancelled before it ran
    def after_turn_rejected(self, turn: Turn, reason: str) -> None: ...
    def after_turn_cancelled(self, turn: Turn, reason: str) -> None: ...

    # the recovery supervisor
    def after_sweep(self, sweep: Sweep) -> None: ...


#: A hook's name (what :meth:`MiddlewareStack.wants` takes).
Hook = Literal[
    "after_run_start", "after_run_end", "before_step", "after_step", "before_attempt",
    "after_attempt", "after_attempt_outcome", "after_retry_scheduled", "after_dead_letter",
    "after_late_result", "before_call", "after_call", "before_publish", "after_publish",
    "process_boot", "after_fork", "process_shutdown", "before_turn", "after_turn",
    "after_turn_rejected", "after_turn_cancelled", "after_sweep"]
HOOKS: tuple[Hook, ...] = get_args(Hook)
#: Hooks called in reverse list order (the first middleware wraps the others).
_REVERSED = frozenset(h for h in HOOKS if h.startswith("after_") or h == "process_shutdown")


def _positional(fn: Callable[..., Any]) -> int:
    """How many arguments the base hook ``fn`` (unbound) is called with."""
    return len(inspect.signature(fn).parameters) - 1  # self


_ARITY: dict[str, int] = {hook: _positional(getattr(Middleware, hook)) for hook in HOOKS}


def check_signatures(middleware: Middleware) -> None:
    """Raise :class:`MiddlewareSignatureError` when a hook ``middleware`` overrides
    cannot be called as the stack calls it (mypy says so too: an incompatible override)."""
    for hook in HOOKS:
        bound = getattr(middleware, hook)
        if getattr(type(middleware), hook, None) is getattr(Middleware, hook):
            continue
        try:
            signature = inspect.signature(bound)
        except (TypeError, ValueError):  # a callable without a readable signature
            continue
        try:
            signature.bind(*range(_ARITY[hook]))
        except TypeError:
            base = inspect.signature(getattr(Middleware, hook))
            raise MiddlewareSignatureError(
                f"{type(middleware).__name__}.{hook}{signature} cannot take the hook's "
                f"arguments: Middleware.{hook}{base}") from None


def _overriding(middleware: tuple[Middleware, ...], hook: str) -> tuple[Any, ...]:
    base = getattr(Middleware, hook)
    found = [getattr(m, hook) for m in middleware if getattr(type(m), hook, base) is not base]
    return tuple(reversed(found)) if hook in _REVERSED else tuple(found)


def _failed(bound: Any, hook: str, exc: Exception) -> None:
    """A middleware never breaks a run or a turn: its failure is logged by type."""
    log.warning("middleware %s.%s raised %s", type(bound.__self__).__name__, hook,
                type(exc).__name__)


class MiddlewareStack:
    """Calls each hook on every middleware that overrides it (one typed method a hook)."""

    def __init__(self, middleware: Iterable[Middleware] = ()) -> None:
        self.middleware: tuple[Middleware, ...] = tuple(middleware)
        for m in self.middleware:
            check_signatures(m)
        self._by_hook: dict[str, tuple[Any, ...]] = {
            hook: _overriding(self.middleware, hook) for hook in HOOKS}
        if self._by_hook["after_fork"]:
            _FORKED.add(self)

    def wants(self, hook: Hook) -> bool:
        """Whether any middleware overrides ``hook`` (lets a caller skip building its
        arguments on the hot path)."""
        return bool(self._by_hook[hook])

    def _each(self, hook: str, *args: Any) -> None:
        for bound in self._by_hook[hook]:
            try:
                bound(*args)
            except Exception as exc:
                _failed(bound, hook, exc)

    # runs
    def after_run_start(self, run: RunStart) -> None:
        self._each("after_run_start", run)

    def after_run_end(self, run: RunEnd) -> None:
        self._each("after_run_end", run)

    # coordinator steps
    def before_step(self, step: Step) -> None:
        self._each("before_step", step)

    def after_step(self, step: Step, error: BaseException | None) -> None:
        self._each("after_step", step, error)

    # node executions
    def before_attempt(self, attempt: Attempt) -> None:
        self._each("before_attempt", attempt)

    def after_attempt(self, attempt: Attempt, end: AttemptEnd) -> None:
        self._each("after_attempt", attempt, end)

    def after_attempt_outcome(self, outcome: Settling) -> None:
        self._each("after_attempt_outcome", outcome)

    def after_retry_scheduled(self, attempt: Attempt, delay: float) -> None:
        self._each("after_retry_scheduled", attempt, delay)

    def after_dead_letter(self, attempt: Attempt, reason: str) -> None:
        self._each("after_dead_letter", attempt, reason)

    def after_late_result(self, attempt: Attempt, reason: str) -> None:
        self._each("after_late_result", attempt, reason)

    # model and tool calls
    def before_call(self, call: Call) -> None:
        self._each("before_call", call)

    def after_call(self, call: Call, end: CallEnd) -> None:
        self._each("after_call", call, end)

    # task messages
    def before_publish(self, message: Publish) -> None:
        self._each("before_publish", message)

    def after_publish(self, message: Publish) -> None:
        self._each("after_publish", message)

    # worker processes
    def process_boot(self, process: Process) -> None:
        self._each("process_boot", process)

    def after_fork(self) -> None:
        self._each("after_fork")

    def process_shutdown(self, process: Process) -> None:
        self._each("process_shutdown", process)

    # agent turns
    def before_turn(self, turn: Turn) -> None:
        self._each("before_turn", turn)

    def after_turn(self, turn: Turn, end: TurnEnd) -> None:
        self._each("after_turn", turn, end)

    def after_turn_rejected(self, turn: Turn, reason: str) -> None:
        self._each("after_turn_rejected", turn, reason)

    def after_turn_cancelled(self, turn: Turn, reason: str) -> None:
        self._each("after_turn_cancelled", turn, reason)

    # the recovery supervisor
    def after_sweep(self, sweep: Sweep) -> None:
        self._each("after_sweep", sweep)

    def added(self, *middleware: Middleware) -> MiddlewareStack:
        """A new stack with ``middleware`` appended (stacks are immutable)."""
        return MiddlewareStack((*self.middleware, *middleware))

    def __len__(self) -> int:
        return len(self.middleware)


#: The stacks of this process with an ``after_fork`` hook (see
#: :mod:`~hypha_celery.middleware._process`, which tells them after a fork).
_FORKED: weakref.WeakSet[MiddlewareStack] = weakref.WeakSet()

EMPTY = MiddlewareStack()
