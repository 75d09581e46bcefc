"""Properties: any text gives a Guard or a GuardError (nothing else); generated
well-formed guards evaluate to a bool over generated JSON scopes and obey ``!``,
``else:``, ``&&`` and ``||``; any regex text in ``matches`` is compiled or refused."""

from __future__ import annotations

import re
import warnings
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hypha_celery.errors import GuardError, UnsafeGuardPattern
from hypha_celery.guards import MAX_EXPRESSION_CHARS, Guard, parse
from hypha_celery.guards._nodes import Matches

FUZZ = settings(max_examples=400, deadline=None, database=None)

# -- (a) arbitrary text ---------------------------------------------------------------
GRAMMAR_CHARS = "abx01.-_ ()!&|=<>,'\"\\:$etruflsnmhcxi"
SNIPPETS = st.sampled_from([
    "exists(", "matches(", "else:", "&&", "||", "==", "!==", ">=", "true", "null",
    "input.", "variables.", "metadata.", "constructor", "__proto__", "'", '"', "(", ")",
    ", '", "a+)+", "x", " ", "!", "3", "-1.5e3"])
TEXT = st.one_of(
    st.text(max_size=200),
    st.text(alphabet=GRAMMAR_CHARS, max_size=200),
    st.lists(SNIPPETS, max_size=40).map("".join),
)
SCOPE = {"input": {"a": 1, "x": "ship"}, "variables": {"a": [1, "b"], "x": None},
         "metadata": {"x": "xx"}}


def _parsed(text: str) -> Guard | GuardError:
    try:
        return parse(text)
    except GuardError as error:
        return error


@FUZZ
@given(TEXT)
def test_any_text_is_a_guard_or_a_guard_error(text: str) -> None:
    outcome = _parsed(text)
    if isinstance(outcome, GuardError):
        assert outcome.position is not None
        assert 0 <= outcome.position <= len(text)
        assert outcome.expression == text
    else:
        assert outcome.expression == text
        assert isinstance(outcome.evaluate(SCOPE), bool)
        assert isinstance(outcome.evaluate({}), bool)


# -- (b) well-formed guards over JSON scopes -------------------------------------------
KEYS = ["a", "b", "x", "0", "1"]
SEGMENT = st.sampled_from(KEYS)
PATH = st.builds(
    lambda root, first, rest: root + ".".join([first, *rest]),
    st.sampled_from(["", "input.", "variables.", "metadata."]),
    st.sampled_from(["a", "b", "x"]), st.lists(SEGMENT, max_size=2))


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


LITERAL = st.one_of(
    st.sampled_from(["true", "false", "null", "ship", "a.b"]),
    st.integers(-1000, 1000).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.text(max_size=8).map(_quote),
)
OP = st.sampled_from(["===", "==", "!==", "!=", ">=", "<=", ">", "<"])
SAFE_PATTERNS = st.sampled_from(["^s", "a+", "(ab)+", "[0-9]{2,}", "x$", "(?i)SHIP", ""])
LEAF = st.one_of(
    st.sampled_from(["true", "false", "always", "never", "default"]),
    PATH,
    PATH.map("exists({})".format),
    st.builds("matches({}, {})".format, PATH, SAFE_PATTERNS.map(_quote)),
    st.builds("{} {} {}".format, PATH, OP, LITERAL),
)
GUARD = st.recursive(LEAF, lambda inner: st.one_of(
    inner.map("!{}".format),
    inner.map("({})".format),
    st.builds("{} && {}".format, inner, inner),
    st.builds("{} || {}".format, inner, inner),
), max_leaves=12)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(SEGMENT, inner, max_size=3),
    max_leaves=10)
ROOT = st.dictionaries(SEGMENT, JSON, max_size=4)
SCOPES = st.fixed_dictionaries({"input": ROOT, "variables": ROOT, "metadata": ROOT})


def _fits(*expressions: str) -> bool:
    text = "".join(expressions)
    return len(text) + 16 <= MAX_EXPRESSION_CHARS and text.count("(") + text.count("!") < 60


@settings(max_examples=300, deadline=None, database=None)
@given(GUARD, SCOPES)
def test_well_formed_guards_evaluate_to_a_bool(expression: str, scope: dict[str, Any]) -> None:
    assume(_fits(expression))
    guard = parse(expression)
    value = guard.evaluate(scope)
    assert isinstance(value, bool)
    assert parse(f"!({expression})").evaluate(scope) is (not value)
    assert parse(f"else:{expression}").evaluate(scope) is (not value)
    assert all(path.split(".")[0] in ("input", "variables", "metadata") for path in guard.paths)


@settings(max_examples=300, deadline=None, database=None)
@given(GUARD, GUARD, SCOPES)
def test_and_or_agree_with_python(left: str, right: str, scope: dict[str, Any]) -> None:
    assume(_fits(left, right))
    a, b = parse(left).evaluate(scope), parse(right).evaluate(scope)
    assert parse(f"({left}) && ({right})").evaluate(scope) is (a and b)
    assert parse(f"({left}) || ({right})").evaluate(scope) is (a or b)


@FUZZ
@given(st.text(max_size=30), st.sampled_from(["==", "!="]))
def test_quoted_strings_round_trip(text: str, op: str) -> None:
    guard = parse(f"x {op} {_quote(text)}")
    assert guard.evaluate({"variables": {"x": text}}) is (op == "==")


# -- (c) arbitrary regex text -----------------------------------------------------------
REGEX_CHARS = "ab.()[]{}*+?|\\^$-,0123456789:=!<>P#xi&~"
PATTERN = st.one_of(st.text(max_size=40), st.text(alphabet=REGEX_CHARS, max_size=40))


@FUZZ
@given(PATTERN, st.text(alphabet="ab(){}[]-0 ", max_size=16))
def test_any_pattern_is_compiled_or_refused(pattern: str, subject: str) -> None:
    expression = f"matches(x, {_quote(pattern)})"
    try:
        guard = parse(expression)
    except UnsafeGuardPattern as error:
        assert error.position == 11
        return
    assert isinstance(guard.root, Matches) and guard.root.pattern.pattern == pattern
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        re.compile(pattern)  # compiles, and without a warning
    assert guard.evaluate({"variables": {"x": subject}}) is (
        re.search(pattern, subject) is not None)
