"""Guard expressions: hypha's scenario 1, every grammar feature, paths, limits, errors."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType, SimpleNamespace
from typing import Any

import pytest

from hypha_celery import guards
from hypha_celery.errors import GuardError, SpecError, UnsafeGuardPattern
from hypha_celery.guards import (
    MAX_EXPRESSION_CHARS,
    MAX_MATCH_INPUT_CHARS,
    MAX_PATTERN_CHARS,
    Guard,
    evaluate,
    parse,
)


def scope(input: Any = None, variables: Any = None, metadata: Any = None) -> dict[str, Any]:
    return {"input": input or {}, "variables": variables or {}, "metadata": metadata or {}}


SHIP = scope({"ready": True, "override": False}, {"score": 3, "owner": "ana"},
             {"intent": "ship it"})


def test_the_public_surface() -> None:
    assert guards.__all__ == ["Guard", "parse", "evaluate", "MAX_EXPRESSION_CHARS",
                              "MAX_MATCH_INPUT_CHARS", "MAX_PATTERN_CHARS"]
    assert (MAX_EXPRESSION_CHARS, MAX_PATTERN_CHARS, MAX_MATCH_INPUT_CHARS) == (1024, 128, 4096)
    assert issubclass(UnsafeGuardPattern, GuardError)
    assert issubclass(GuardError, SpecError) and issubclass(GuardError, ValueError)


# -- hypha's scenario 1 ---------------------------------------------------------------
@pytest.mark.parametrize(("expression", "value"), [
    ("variables.score == 3", True),
    ("input.ready == true && variables.score >= 3 && matches(metadata.intent, '^ship')", True),
    ("exists(variables.owner) || input.override == true", True),
])
def test_scenario_1_true_guards(expression: str, value: bool) -> None:
    assert parse(expression).evaluate(SHIP) is value


def test_scenario_1_or_takes_the_other_side() -> None:
    guard = parse("exists(variables.owner) || input.override == true")
    assert guard.evaluate(scope({"override": True})) is True
    assert guard.evaluate(scope({"override": False})) is False


def test_scenario_1_not_exists_with_empty_variables() -> None:
    assert parse("!exists(variables.blocked)").evaluate(scope()) is True


def test_scenario_1_constructor_does_not_exist() -> None:
    assert parse("exists(variables.constructor)").evaluate(scope()) is False
    assert parse("exists(variables.constructor)").evaluate(
        scope(variables={"constructor": 1})) is False


def test_scenario_1_nested_quantifier_is_refused() -> None:
    with pytest.raises(UnsafeGuardPattern, match="nested quantifier") as caught:
        parse("matches(metadata.intent, '(a+)+$')")
    assert caught.value.position == 25


def test_scenario_1_invalid_regex_is_refused() -> None:
    with pytest.raises(UnsafeGuardPattern, match="invalid regular expression") as caught:
        parse("matches(x, '[')")
    assert caught.value.position == 11


def test_scenario_1_a_guard_over_1024_characters_is_refused() -> None:
    long = "score == 3 && " * 80
    with pytest.raises(GuardError, match="longer than 1024") as caught:
        parse(long[:MAX_EXPRESSION_CHARS + 1])
    assert caught.value.position == MAX_EXPRESSION_CHARS
    fits = "x == '" + "a" * (MAX_EXPRESSION_CHARS - 7) + "'"
    assert len(fits) == MAX_EXPRESSION_CHARS
    assert parse(fits).evaluate(scope()) is False


# -- constants, else:, operators ------------------------------------------------------
@pytest.mark.parametrize(("expression", "value"), [
    ("", True), ("   ", True), ("true", True), ("always", True), ("default", True),
    (" true ", True), ("false", False), ("never", False),
    ("else:true", False), ("else:false", True), ("else:", False), ("  else:never", True),
    ("else:score == 3", False), ("else:score == 4", True),
])
def test_constants_and_else(expression: str, value: bool) -> None:
    assert parse(expression).evaluate(SHIP) is value


@pytest.mark.parametrize(("expression", "value"), [
    ("true || false && false", True),    # && binds tighter than ||
    ("(true || false) && false", False),
    ("false && false || true", True),
    ("!false && false", False),          # ! binds tighter than &&
    ("!(false && false)", True),
    ("!!true", True),
    ("! true", False),
    ("((score == 3))", True),             # parentheses are unwrapped
    ("(input.ready == true && score >= 3)", True),
    ("(score == 4 || score == 3) && (owner == ana)", True),
    ("!score == 4", True),                # ! applies to the whole comparison
    ("score==3&&owner=='ana'", True),     # no spaces needed
])
def test_boolean_operators(expression: str, value: bool) -> None:
    assert parse(expression).evaluate(SHIP) is value


# -- exists / matches -----------------------------------------------------------------
@pytest.mark.parametrize(("variables", "value"), [
    ({"x": None}, True),     # a JSON null is present
    ({"x": False}, True),
    ({"x": 0}, True),
    ({}, False),
    ({"y": 1}, False),
])
def test_exists(variables: dict[str, Any], value: bool) -> None:
    assert parse("exists(x)").evaluate(scope(variables=variables)) is value


@pytest.mark.parametrize(("intent", "pattern", "value"), [
    ("ship it", "'^ship'", True),
    ("we ship", "'^ship'", False),
    ("we ship", "'ship'", True),           # re.search, not match
    ("we ship", '"ship$"', True),          # double quotes
    ("order 42", r"'\d+'", True),          # an unknown escape keeps its backslash
    ("order", r"'\d+'", False),
    ("a\\b", r"'a\\\\b'", True),           # \\ is one backslash: the regex a\\b
    ("it's", r"'it\'s'", True),
    (42, "'42'", False),                   # not a string
    (None, "'.*'", False),
    (["ship"], "'ship'", False),
])
def test_matches(intent: Any, pattern: str, value: bool) -> None:
    guard = parse(f"matches(metadata.intent, {pattern})")
    assert guard.evaluate(scope(metadata={"intent": intent})) is value


def test_matches_missing_path_is_false() -> None:
    assert parse("matches(metadata.intent, '.*')").evaluate(scope()) is False


def test_matches_skips_inputs_over_the_limit() -> None:
    guard = parse("matches(text, 'a$')")
    assert guard.evaluate(scope(variables={"text": "a" * MAX_MATCH_INPUT_CHARS})) is True
    assert guard.evaluate(scope(variables={"text": "a" * (MAX_MATCH_INPUT_CHARS + 1)})) is False


# -- comparisons ----------------------------------------------------------------------
MISSING = object()


@pytest.mark.parametrize(("expression", "x", "value"), [
    ("x == 3", 3, True), ("x === 3", 3, True), ("x == 3", 3.0, True), ("x == 3.0", 3, True),
    ("x == 3", "3", False), ("x == '3'", 3, False), ("x == '3'", "3", True),
    ("x == true", True, True), ("x == true", 1, False), ("x == 1", True, False),
    ("x == false", 0, False), ("x == 0", False, False), ("x == false", False, True),
    ("x == null", None, True), ("x == null", MISSING, False), ("x == null", 0, False),
    ("x == ship", "ship", True), ("x == 'ship'", "ship", True), ('x == "ship"', "ship", True),
    ("x == 'ship it'", "ship it", True), ("x == a.b", "a.b", True),
    ("x == 'true'", True, False), ("x == 'true'", "true", True),
    ("x == -1", -1, True), ("x == -0.5", -0.5, True), ("x == 1e3", 1000, True),
    ("x == 007", "007", True),             # not a number: the bare word
    ("x == 3", [3], False), ("x == 3", {"a": 3}, False), ("x == 3", MISSING, False),
    ("x != 3", 3, False), ("x !== 3", 4, True), ("x != 3", MISSING, True),
    ("x != null", None, False), ("x !== 'a'", "b", True), ("x != true", 1, True),
    ("x >= 3", 3, True), ("x >= 3", 2.5, False), ("x > 2", 3, True), ("x > 3", 3, False),
    ("x <= 3", 3, True), ("x < 3", 2, True), ("x < 3", 3, False), ("x < 2.5", 2, True),
    ("x >= -1", -1, True), ("x > 1e3", 1001, True), ("x < 1.5e-3", 0.001, True),
    ("x >= 3", "3", False), ("x >= '3'", 3, False), ("x >= 3", True, False),
    ("x > 0", True, False), ("x >= true", 1, False), ("x < abc", 1, False),
    ("x >= 3", None, False), ("x >= 3", MISSING, False), ("x >= 3", [4], False),
    ("x > 1", float("nan"), False), ("x < 1", float("-inf"), True),
])
def test_comparisons(expression: str, x: Any, value: bool) -> None:
    variables = {} if x is MISSING else {"x": x}
    assert parse(expression).evaluate(scope(variables=variables)) is value


@pytest.mark.parametrize(("quoted", "text"), [
    (r"'it\'s'", "it's"), (r'"it\"s"', 'it"s'), (r"'say \"hi\"'", 'say "hi"'),
    (r"'a\\b'", "a\\b"), (r"'tab\there'", "tab\there"), (r"'line\nbreak'", "line\nbreak"),
    (r"'cr\r'", "cr\r"), (r"'keep\qthis'", "keep\\qthis"), ("''", ""), ('"it\'s"', "it's"),
    ("'&& || ( ) ! == ,'", "&& || ( ) ! == ,"),
])
def test_string_literals(quoted: str, text: str) -> None:
    assert parse(f"x == {quoted}").evaluate(scope(variables={"x": text})) is True
    assert parse(f"x != {quoted}").evaluate(scope(variables={"x": text})) is False


# -- truthiness -----------------------------------------------------------------------
@pytest.mark.parametrize(("x", "value"), [
    (None, False), (False, False), (0, False), (0.0, False), ("", False), ([], False),
    ({}, False), (MISSING, False), (MappingProxyType({}), False),
    (True, True), (1, True), (-1, True), ("a", True), ("0", True), ([0], True),
    ({"a": None}, True), (MappingProxyType({"a": 1}), True), (SimpleNamespace(), True),
])
def test_truthiness_of_a_bare_path(x: Any, value: bool) -> None:
    variables = {} if x is MISSING else {"x": x}
    assert parse("x").evaluate(scope(variables=variables)) is value
    assert parse("!x").evaluate(scope(variables=variables)) is not value


# -- paths ----------------------------------------------------------------------------
def test_a_path_outside_the_three_roots_reads_variables() -> None:
    s = scope({"score": 1}, {"score": 2, "a": {"b": 3}}, {"score": 4})
    assert parse("score == 2").evaluate(s)
    assert parse("input.score == 1").evaluate(s)
    assert parse("metadata.score == 4").evaluate(s)
    assert parse("a.b == 3").evaluate(s)
    assert parse("variables.a.b == 3").evaluate(s)
    assert parse("input").evaluate(s) and not parse("input").evaluate(scope())


def test_paths_are_reported_prefixed_in_order_without_repeats() -> None:
    guard = parse("score >= 3 && (input.ready || exists(a.b)) && !matches(metadata.intent, 'x')"
                  " && variables.score < 9")
    assert guard.paths == ("variables.score", "input.ready", "variables.a.b",
                           "metadata.intent")
    assert parse("true").paths == ()


@pytest.mark.parametrize(("expression", "value"), [
    ("items.0 == 'a'", True), ("items.1.name == 'b'", True), ("items.2 == 'a'", False),
    ("exists(items.5)", False), ("exists(items.01)", False), ("exists(pair.1)", True),
    ("table.0 == 'zero'", True),           # a numeric key of a dict
    ("exists(word.0)", False),             # strings are not indexed
    ("exists(n.x)", False),                # nor numbers
    ("exists(items.0.x)", False),
    ("exists(input.ready.x)", False),
    ("kebab-key == 1", True), ("$dollar == 2", True),
])
def test_path_resolution(expression: str, value: bool) -> None:
    s = scope({"ready": True}, {
        "items": ["a", {"name": "b"}], "pair": ("x", "y"), "table": {"0": "zero"},
        "word": "abc", "n": 5, "kebab-key": 1, "$dollar": 2})
    assert parse(expression).evaluate(s) is value


def test_only_keys_are_read_never_attributes() -> None:
    s = {"input": SimpleNamespace(ready=True), "variables": {"obj": SimpleNamespace(x=1)},
         "metadata": {}}
    assert parse("exists(input.ready)").evaluate(s) is False
    assert parse("exists(obj.x)").evaluate(s) is False
    assert parse("exists(x.__class__)").evaluate(scope(variables={"x": 1})) is False


def test_any_mapping_is_read() -> None:
    s = MappingProxyType({"variables": MappingProxyType({"a": MappingProxyType({"b": 1})})})
    assert parse("a.b == 1").evaluate(s) is True
    assert parse("exists(input)").evaluate(s) is False


@pytest.mark.parametrize("path", [
    "constructor", "variables.constructor", "x.constructor", "x.prototype", "__proto__",
    "x.__proto__", "input.__class__", "__dict__", "x.__init__.y", "x.__", "__x",
])
def test_dunder_and_prototype_segments_are_missing(path: str) -> None:
    poisoned = {"constructor": 1, "prototype": 1, "__proto__": 1, "__class__": 1,
                "__dict__": 1, "__": 1, "__x": 1, "__init__": {"y": 1}}
    s = {"input": poisoned, "variables": {**poisoned, "x": poisoned}, "metadata": {}}
    assert parse(f"exists({path})").evaluate(s) is False
    assert parse(path).evaluate(s) is False
    assert parse(f"{path} == 1").evaluate(s) is False
    assert parse(f"{path} != 1").evaluate(s) is True


def test_a_single_underscore_is_an_ordinary_key() -> None:
    assert parse("_x.y_ == 1").evaluate(scope(variables={"_x": {"y_": 1}})) is True


# -- the Guard object and evaluate() --------------------------------------------------
def test_a_guard_is_frozen_and_compares_by_text() -> None:
    guard = parse("score == 3")
    assert isinstance(guard, Guard)
    assert guard.expression == "score == 3"
    assert guard == parse("score == 3") and guard != parse("score == 4")
    assert hash(guard) == hash(parse("score == 3"))
    assert "score == 3" in repr(guard)
    with pytest.raises(dataclasses.FrozenInstanceError):
        guard.expression = "true"  # type: ignore[misc]


def test_one_guard_many_scopes() -> None:
    guard = parse("score >= 3")
    assert [guard.evaluate(scope(variables={"score": n})) for n in range(5)] == [
        False, False, False, True, True]


def test_evaluate_parses_once_per_expression() -> None:
    from hypha_celery.guards import _guard

    expression = "score == 3 && owner == ana  "
    before = _guard._parse_cached.cache_info()
    assert evaluate(expression, SHIP) is True
    assert evaluate(expression, scope()) is False
    after = _guard._parse_cached.cache_info()
    assert (after.misses - before.misses, after.hits - before.hits) == (1, 1)


def test_evaluate_raises_the_parse_error() -> None:
    with pytest.raises(GuardError):
        evaluate("a &&", SHIP)
    with pytest.raises(GuardError, match="string"):
        evaluate(["a"], SHIP)  # type: ignore[arg-type]


# -- errors ---------------------------------------------------------------------------
@pytest.mark.parametrize(("expression", "position", "message"), [
    ("a &", 2, "unexpected '&'"),
    ("a & b", 2, "unexpected '&'"),
    ("a | b", 2, "unexpected '|'"),
    ("a = 1", 2, "unexpected '='"),
    ("a &&", 4, "expected a condition, found end of guard"),
    ("|| a", 0, "expected a condition, found '||'"),
    ("a && || b", 5, "expected a condition, found '||'"),
    ("!", 1, "expected a condition"),
    ("(a", 2, "expected ')', found end of guard"),
    ("a)", 1, "unexpected ')'"),
    ("()", 1, "expected a condition, found ')'"),
    ("a b", 2, "unexpected 'b'"),
    ("a == 1 b", 7, "unexpected 'b'"),
    ("3 == a", 0, "the left side of '==' must be a path, found '3'"),
    ("'x' == a", 0, "the left side of '==' must be a path, found \"'x'\""),
    ("exists(a) == true", 10, "the left side of '==' must be a path"),
    ("(a) > 1", 4, "the left side of '>' must be a path"),
    ("a.. == 1", 0, "must be a path, found 'a..'"),
    ("a == ", 5, "expected a value after '=='"),
    ("a == (b)", 5, "expected a value after '=='"),
    ("a == !b", 5, "expected a value after '=='"),
    ("a == b == c", 7, "the left side of '==' must be a path"),
    ("3", 0, "expected a path, found '3'"),
    ("-x", 0, "expected a path, found '-x'"),
    ("'x'", 0, "expected a condition, found \"'x'\""),
    ("x == 'open", 5, "unterminated string"),
    ('x == "open\\"', 5, "unterminated string"),
    ("a || else:b", 5, "'else:' is only allowed at the start"),
    ("else:else:a", 5, "'else:' is only allowed at the start"),
    ("foo(a)", 0, "unknown function 'foo'"),
    ("exists('a')", 7, "expected a path, found \"'a'\""),
    ("exists(3)", 7, "expected a path, found '3'"),
    ("exists(a", 8, "expected ')', found end of guard"),
    ("exists(a, b)", 8, "expected ')', found ','"),
    ("exists()", 7, "expected a path, found ')'"),
    ("matches(a)", 9, "expected ',', found ')'"),
    ("matches(a, b)", 11, "expected a quoted pattern, found 'b'"),
    ("matches(a, 'b'", 14, "expected ')', found end of guard"),
    ("a, b", 1, "unexpected ','"),
    ("a == 1 && ; x", 10, "expected a path, found ';'"),
])
def test_errors_name_the_position(expression: str, position: int, message: str) -> None:
    with pytest.raises(GuardError) as caught:
        parse(expression)
    assert type(caught.value) is GuardError
    assert caught.value.position == position, caught.value
    assert caught.value.expression == expression
    assert message in str(caught.value)
    assert str(caught.value).endswith(f"at character {position}")


def test_a_non_string_is_a_guard_error() -> None:
    with pytest.raises(GuardError, match="a guard is a string, not int"):
        parse(3)  # type: ignore[arg-type]


def test_nesting_is_bounded() -> None:
    assert parse("(" * 64 + "true" + ")" * 64).evaluate({}) is True
    assert parse("!" * 64 + "true").evaluate({}) is True
    assert parse("!(" * 32 + "true" + ")" * 32).evaluate({}) is True
    assert parse("!" * 63 + "true").evaluate({}) is False
    for deep in ("(" * 65 + "true" + ")" * 65, "!" * 65 + "true", "!(" * 33 + "x" + ")" * 33,
                 "(" * 1000, "!" * 1000):
        with pytest.raises(GuardError, match="nested deeper than 64 levels") as caught:
            parse(deep)
        assert caught.value.position == 64


def test_long_flat_chains_are_fine() -> None:
    chain = "&&".join(["a"] * 300) + "||!a"
    assert len(chain) <= MAX_EXPRESSION_CHARS
    assert parse(chain).evaluate(scope(variables={"a": 1})) is True


# -- patterns -------------------------------------------------------------------------
@pytest.mark.parametrize(("pattern", "problem"), [
    ("(a+)+", "nested quantifier"),
    ("(a*)*", "nested quantifier"),
    ("(a|b+){2,}", "nested quantifier"),
    ("(a+){2}", "nested quantifier"),
    ("(a?)*", "nested quantifier"),
    ("(a+)?", "nested quantifier"),
    ("(?:a+)+", "nested quantifier"),
    ("((a)+)+", "nested quantifier"),
    ("((a+)b)*", "nested quantifier"),
    ("(\\d+)*$", "nested quantifier"),
    ("([a-z]+)*", "nested quantifier"),
    ("(a{2,3})+", "nested quantifier"),
    ("(a+)+?", "nested quantifier"),
    ("(?P<n>a+)*", "nested quantifier"),
    ("\\1", "backreference"),
    ("(a)\\1", "backreference"),
    ("(?P<x>a)(?P=x)", "backreference"),
    ("(a)?(?(1)b|c)", "backreference"),
    ("(?=a)", "lookaround"),
    ("(?!a)b", "lookaround"),
    ("(?<=a)b", "lookaround"),
    ("(?<!a)b", "lookaround"),
    ("(?x)a", "verbose"),
    ("(?x: a )", "verbose"),
    ("[[a]", "ambiguous character class"),
    ("[a[]", "ambiguous character class"),
    ("[a--b]", "ambiguous character class"),
    ("[a&&b]", "ambiguous character class"),
    ("[a||b]", "ambiguous character class"),
    ("[a~~b]", "ambiguous character class"),
    ("a" * (MAX_PATTERN_CHARS + 1), "longer than 128 characters"),
    # beyond hypha: polynomial / exponential backtracking its rules let through
    (".*.*=", "more than one unbounded quantifier"),
    ("a*a*b", "more than one unbounded quantifier"),
    ("a+b*", "more than one unbounded quantifier"),
    ("\\(a+\\)+", "more than one unbounded quantifier"),
    ("(a|aa)+$", "quantified group holding an alternation"),
    ("(?:ab|cd)*x", "quantified group holding an alternation"),
])
def test_unsafe_patterns_are_refused(pattern: str, problem: str) -> None:
    expression = f"matches(x, '{pattern}')"
    with pytest.raises(UnsafeGuardPattern, match=problem) as caught:
        parse(expression)
    assert caught.value.position == 11
    assert caught.value.expression == expression


@pytest.mark.parametrize("quoted", [
    "'['", "'('", "')'", "'a**'", "'*'", "'a{2}{3}'", "'(?z)'", "'[b-a]'",
    r"'\q'",        # an unknown escape
    r"'\\'",       # one backslash, at the end
])
def test_invalid_patterns_are_refused(quoted: str) -> None:
    with pytest.raises(UnsafeGuardPattern, match="invalid regular expression") as caught:
        parse(f"matches(x, {quoted})")
    assert caught.value.position == 11


@pytest.mark.parametrize(("pattern", "text"), [
    ("^ship", "ship it"), ("(ab)+", "abab"), ("(a|b)+c", "abc"), ("a+b?", "aab"),
    ("[+*]+", "+*"), ("\\(a+\\)", "(aa)"), ("[(]a+[)]", "(a)"), ("(?i)SHIP", "ship"),
    ("(?i:S)hip", "ship"), ("(?P<n>a)b+", "abb"), ("\\d{3}-\\d{4}", "555-1234"),
    ("a{}", "a{}"), ("(?:ab|cd)x", "abx"), ("[]a]+", "]a"), ("[^]a]", "b"),
    ("(?>a+)b", "aab"), ("a++b", "aab"), ("(?#note)a", "a"), ("\\0", "\0"),
    ("[\\[]", "["), ("a|b", "b"), ("a-b", "a-b"), ("(a)(b)?", "a"),
    ("x" * MAX_PATTERN_CHARS, "x" * MAX_PATTERN_CHARS),
])
def test_safe_patterns_compile_once_and_match(pattern: str, text: str) -> None:
    guard = parse(f"matches(x, '{pattern}')")
    assert guard.evaluate(scope(variables={"x": text})) is True
