"""The middleware list: a base class with no-op hooks, and the stack that calls them.

In the style of dramatiq's ``Middleware``: ``before_*`` hooks run in list order,
``after_*`` hooks in reverse, so the first middleware wraps all the others. A hook that
raises is logged (its exception type only) and never breaks a run or a turn. Only the
hooks a middleware overrides are called: an empty stack costs one tuple check."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from hypha_celery.middleware.hooks import (
    Attempt,
    AttemptEnd,
    Call,
    CallEnd,
    RunEnd,
    RunStart,
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
    def after_retry_scheduled(self, attempt: Attempt, delay: float) -> None: ...
    def after_dead_letter(self, attempt: Attempt, reason: str) -> None: ...
    def after_late_result(self, attempt: Attempt, reason: str) -> None: ...

    # model and tool calls a node makes through its context (in the node's thread)
    def before_call(self, call: Call) -> None: ...
    def after_call(self, call: Call, end: CallEnd) -> None: ...

    # agent turns
    def before_turn(self, turn: Turn) -> None: ...
    def after_turn(self, turn: Turn, end: TurnEnd) -> None: ...
    # a request refused (overloaded, draining, pre_turn...) or cancelled before it ran
    def after_turn_rejected(self, turn: Turn, reason: str) -> None: ...
    def after_turn_cancelled(self, turn: Turn, reason: str) -> None: ...

    # the recovery supervisor
    def after_sweep(self, sweep: Sweep) -> None: ...


HOOKS: tuple[str, ...] = tuple(
    name for name in vars(Middleware) if name.startswith(("before_", "after_")))
_REVERSED = frozenset(name for name in HOOKS if name.startswith("after_"))


class MiddlewareStack:
    """Calls one hook on every middleware that overrides it."""

    def __init__(self, middleware: Iterable[Middleware] = ()) -> None:
        self.middleware: tuple[Middleware, ...] = tuple(middleware)
        self._by_hook: dict[str, tuple[Any, ...]] = {
            hook: self._bound(hook) for hook in HOOKS}

    def _bound(self, hook: str) -> tuple[Any, ...]:
        base = getattr(Middleware, hook)
        found = [getattr(m, hook) for m in self.middleware
                 if getattr(type(m), hook, base) is not base]
        return tuple(reversed(found)) if hook in _REVERSED else tuple(found)

    def wants(self, hook: str) -> bool:
        """Whether any middleware overrides ``hook`` (lets a caller skip building its
        arguments on the hot path)."""
        return bool(self._by_hook[hook])

    def call(self, hook: str, *args: Any) -> None:
        for bound in self._by_hook[hook]:
            try:
                bound(*args)
            except Exception as exc:  # a middleware never breaks a run or a turn
                log.warning("middleware %s.%s raised %s", type(bound.__self__).__name__,
                            hook, type(exc).__name__)

    def added(self, *middleware: Middleware) -> MiddlewareStack:
        """A new stack with ``middleware`` appended (stacks are immutable)."""
        return MiddlewareStack((*self.middleware, *middleware))

    def __len__(self) -> int:
        return len(self.middleware)


EMPTY = MiddlewareStack()
