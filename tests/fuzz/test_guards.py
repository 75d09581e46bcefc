"""Fuzzing the guard language (:mod:`hypha_celery.guards`): any text, deep nesting, huge
numbers, unicode, every grammar token in any order: a :class:`Guard` that evaluates to a
bool over any JSON scope, or a :class:`GuardError` with a position inside the text.
(tests/guards/test_fuzz.py checks the semantics of well-formed guards.)"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from hypha_celery.errors import GuardError
from hypha_celery.guards import MAX_EXPRESSION_CHARS, Guard, evaluate, parse
from tests.fuzz._mutate import JSON
from tests.fuzz.conftest import budget

TOKENS = st.sampled_from([
    "(", ")", "!", "&&", "||", "==", "===", "!=", "!==", ">=", "<=", ">", "<", ",", " ",
    "exists", "matches", "else:", "true", "false", "null", "always", "never", "default",
    "input.", "variables.", "metadata.", "a", "b.0", "__proto__", "constructor", "'", '"',
    "\\", "'a+'", "'(a+)+'", "'[[a]'", "'\\d{1,99999}'", "'(?x)a'", "'(?P<n>a)(?P=n)'",
    "1e999", "-0", "9" * 400, "1.5e-400", "0x10", "\u0130", "\u00df", "\ufeff", "\u2028",
    "\ud800", "\x00", "\t", "$", "-", "_"])
EXPRESSIONS = st.one_of(
    st.text(max_size=MAX_EXPRESSION_CHARS + 8),
    st.lists(TOKENS, max_size=120).map("".join),
    st.integers(1, 600).flatmap(lambda n: st.sampled_from(
        ["(" * n + "a" + ")" * n, "!" * n + "a", "(!" * n + "a" + ")" * n,
         "(" * n, ")" * n, "a && " * n + "a", "a || " * n + "a",
         "matches(a, '" + "(" * n + "a" + ")" * n + "')"])),
)
SCOPE_VALUES = st.recursive(
    JSON | st.tuples(JSON) | st.sets(st.integers(), max_size=3) | st.binary(max_size=4)
    | st.complex_numbers(allow_nan=False) | st.just(float("nan")) | st.just(float("inf")),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["a", "b", "0", "1", "input", "__proto__"]) | st.integers(0, 2),
        inner, max_size=3),
    max_leaves=12)
SCOPES = st.fixed_dictionaries({}, optional={"input": SCOPE_VALUES, "variables": SCOPE_VALUES,
                                             "metadata": SCOPE_VALUES})


def compiled(text: str) -> Guard | None:
    try:
        guard = parse(text)
    except GuardError as exc:
        assert exc.expression == text
        assert exc.position is None or 0 <= exc.position <= max(len(text),
                                                                 MAX_EXPRESSION_CHARS)
        return None
    assert guard.expression == text
    return guard


@budget(800)
@given(EXPRESSIONS, SCOPES)
def test_any_text_parses_or_is_a_guard_error(text: str, scope: dict[str, Any]) -> None:
    guard = compiled(text)
    if guard is not None:
        assert isinstance(guard.evaluate(scope), bool)
        assert guard.evaluate(scope) is evaluate(text, scope)  # the cached one-shot agrees


@budget(300)
@given(st.none() | st.integers() | st.binary(max_size=8) | st.lists(st.text(max_size=3))
       | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), SCOPES)
def test_a_guard_that_is_not_text_is_a_guard_error(value: Any, scope: dict[str, Any]) -> None:
    for call in (lambda: parse(value), lambda: evaluate(value, scope)):
        try:
            call()
        except GuardError:
            continue
        raise AssertionError(f"{value!r} was taken as a guard")
