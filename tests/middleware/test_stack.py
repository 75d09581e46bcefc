"""The middleware list itself: order, only overridden hooks, failures contained."""

from __future__ import annotations

import inspect
import logging
from pathlib import Path

import pytest
from mypy import api as mypy_api

from hypha_celery.errors import MiddlewareSignatureError
from hypha_celery.middleware import (
    EMPTY,
    HOOKS,
    Attempt,
    AttemptEnd,
    Middleware,
    MiddlewareStack,
    RunEnd,
    Step,
)

ATTEMPT = Attempt("r", "r.1", "a", 1)


class Recorder(Middleware):
    def __init__(self, name: str, calls: list[str]) -> None:
        self.name, self.calls = name, calls

    def before_attempt(self, attempt: Attempt) -> None:
        self.calls.append(f"{self.name}.before")

    def after_attempt(self, attempt: Attempt, end: AttemptEnd) -> None:
        self.calls.append(f"{self.name}.after")


class Broken(Middleware):
    def before_attempt(self, attempt: Attempt) -> None:
        raise RuntimeError("secret text")

    def after_run_end(self, run: RunEnd) -> None:
        raise ValueError("boom")


def test_before_hooks_run_in_order_and_after_hooks_in_reverse() -> None:
    calls: list[str] = []
    stack = MiddlewareStack([Recorder("a", calls), Recorder("b", calls), Recorder("c", calls)])
    stack.before_attempt(ATTEMPT)
    stack.after_attempt(ATTEMPT, AttemptEnd(True))
    assert calls == ["a.before", "b.before", "c.before", "c.after", "b.after", "a.after"]


def test_only_overridden_hooks_are_wanted() -> None:
    stack = MiddlewareStack([Recorder("a", [])])
    assert stack.wants("before_attempt") and stack.wants("after_attempt")
    assert not stack.wants("before_step") and not stack.wants("after_run_start")
    assert not any(EMPTY.wants(hook) for hook in HOOKS)
    assert len(EMPTY) == 0


def test_a_raising_hook_is_logged_by_type_and_the_others_still_run(
        caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []
    stack = MiddlewareStack([Broken(), Recorder("a", calls)])
    with caplog.at_level(logging.WARNING, "hypha_celery.middleware._stack"):
        stack.before_attempt(ATTEMPT)
        stack.after_run_end(RunEnd("r", "completed"))
    assert calls == ["a.before"]
    assert "Broken.before_attempt raised RuntimeError" in caplog.text
    assert "Broken.after_run_end raised ValueError" in caplog.text
    assert "secret text" not in caplog.text  # never the exception's message


def test_added_returns_a_new_stack() -> None:
    calls: list[str] = []
    first = MiddlewareStack([Recorder("a", calls)])
    both = first.added(Recorder("b", calls))
    assert len(first) == 1 and len(both) == 2
    both.after_attempt(ATTEMPT, AttemptEnd(True))
    assert calls == ["b.after", "a.after"]


def test_every_hook_has_a_no_op_default() -> None:
    base = Middleware()
    assert set(HOOKS) >= {
        "after_run_start", "after_run_end", "before_step", "after_step", "before_attempt",
        "after_attempt", "after_retry_scheduled", "after_dead_letter", "after_late_result",
        "before_turn", "after_turn"}
    base.before_step(Step("r", "r.0"))  # does nothing


class WrongArity(Middleware):
    def after_attempt(self, attempt: Attempt) -> None:  # type: ignore[override]
        pass


class Flexible(Middleware):
    def after_attempt(self, *args: object) -> None:
        pass


def test_a_hook_overridden_with_a_wrong_signature_is_refused_when_the_stack_is_built() -> None:
    with pytest.raises(MiddlewareSignatureError, match=r"WrongArity\.after_attempt"):
        MiddlewareStack([WrongArity()])
    assert MiddlewareStack([Flexible()]).wants("after_attempt")  # it takes the arguments


def test_every_hook_is_a_stack_method_with_the_hooks_signature() -> None:
    for hook in HOOKS:
        assert inspect.signature(getattr(MiddlewareStack, hook)) == \
            inspect.signature(getattr(Middleware, hook)), hook


def test_mypy_reports_a_wrong_override_and_a_wrong_hook_argument(
        cache: pytest.Cache, tmp_path: Path) -> None:
    snippet = tmp_path / "snippet.py"
    snippet.write_text(
        "from hypha_celery.middleware import Attempt, Middleware, MiddlewareStack\n\n\n"
        "class Wrong(Middleware):\n"
        "    def after_attempt(self, attempt: Attempt) -> None: ...\n\n\n"
        "MiddlewareStack([]).before_step('not a step')\n")
    out, _, status = mypy_api.run(["--strict", "--follow-imports", "silent", "--cache-dir",
                                   str(cache.mkdir("mypy")), str(snippet)])
    assert status == 1
    assert 'snippet.py:5: error: Signature of "after_attempt" incompatible' in out
    assert 'snippet.py:8: error: Argument 1 to "before_step" of "MiddlewareStack" has ' \
           'incompatible type "str"; expected "Step"' in out
