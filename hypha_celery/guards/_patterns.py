"""``matches`` patterns: compiled once, and only when they cannot backtrack badly.

A pattern is refused (:class:`~hypha_celery.errors.UnsafeGuardPattern`) when it is longer
than :data:`MAX_PATTERN_CHARS`, when it does not compile (the message says *invalid*), or
when it uses a construct this module will not run on untrusted input:

* a backreference: ``\\1`` .. ``\\9``, ``(?P=name)``, a conditional ``(?(1)...)``;
* a lookaround: ``(?=``, ``(?!``, ``(?<=``, ``(?<!``;
* a nested quantifier: a quantified group that contains a quantifier, at any depth
  (``(a+)+``, ``(a*)*``, ``(a|b+){2,}``, ``((a)+)?``);
* the verbose flag ``x`` (comments would hide the structure from this check), and a
  character class that Python reads as a possible nested set or set operation (``[[``,
  ``--``, ``&&``, ``~~``, ``||`` inside ``[...]``);
* beyond hypha (its rules still let polynomial and exponential backtracking through:
  ``.*.*=`` took 16 s and ``(a|aa)+$`` grows exponentially on a 4,096-character input):
  more than one unbounded quantifier (``*``, ``+``, ``{n,}``), and a quantified group
  holding an alternation.

The first checks scan the pattern text before :func:`re.compile`; the last two read the
parsed pattern (the standard library's regex parser) after it compiled.
"""

from __future__ import annotations

import re

from hypha_celery.errors import UnsafeGuardPattern
from hypha_celery.guards._limits import MAX_PATTERN_CHARS

_BRACE = re.compile(r"\{\d*,?\d*\}")  # {n} {n,} {,m} {n,m} {,}; ``{}`` is a literal
_FLAGS = re.compile(r"[aiLmsux]*(?:-[imsx]*)?")
_LOOKAROUNDS = ("?=", "?!", "?<=", "?<!")
_SET_OPERATORS = frozenset("-&~|")
_GROUP_DIGITS = frozenset("123456789")


def compile_pattern(text: str, expression: str, position: int) -> re.Pattern[str]:
    """``text`` compiled, or :class:`UnsafeGuardPattern` at ``position`` of ``expression``."""
    if len(text) > MAX_PATTERN_CHARS:
        raise UnsafeGuardPattern(f"pattern is longer than {MAX_PATTERN_CHARS} characters",
                                 expression, position)
    problem = _problem(text)
    if problem:
        raise UnsafeGuardPattern(f"unsafe pattern {text!r}: {problem}", expression, position)
    try:
        compiled = re.compile(text)
    except (re.error, OverflowError, ValueError, RecursionError) as exc:
        raise UnsafeGuardPattern(f"invalid regular expression {text!r}: {exc}",
                                 expression, position) from None
    problem = _backtracking(text)
    if problem:
        raise UnsafeGuardPattern(f"unsafe pattern {text!r}: {problem}", expression, position)
    return compiled


def _backtracking(text: str) -> str | None:
    """More than one unbounded quantifier, or a quantified alternation (parsed tree)."""
    from re import _constants as c  # type: ignore[attr-defined]
    from re import _parser  # type: ignore[attr-defined]

    repeats = (c.MAX_REPEAT, c.MIN_REPEAT, getattr(c, "POSSESSIVE_REPEAT", c.MAX_REPEAT))
    unbounded = 0

    def walk(items: object, repeated: bool) -> str | None:
        nonlocal unbounded
        for op, av in items:  # type: ignore[attr-defined]
            if op in repeats:
                low, high, body = av
                unbounded += high == c.MAXREPEAT
                found = walk(body, repeated or high > 1)
            elif op is c.BRANCH:
                if repeated:
                    return "a quantified group holding an alternation"
                found = next((p for b in av[1] if (p := walk(b, repeated))), None)
            elif op is c.SUBPATTERN:
                found = walk(av[-1], repeated)
            else:
                found = None
            if found:
                return found
        return None

    problem = walk(_parser.parse(text), False)
    if problem is None and unbounded > 1:
        problem = "more than one unbounded quantifier (*, +, {n,})"
    return problem


def _problem(text: str) -> str | None:
    """Why ``text`` is unsafe, or ``None``. Tolerates patterns that do not compile."""
    groups = [False]  # per open group: does it contain a quantifier?
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char == "(":
            groups.append(False)
            i, problem = _group_prefix(text, i + 1)
            if problem:
                return problem
            continue
        if char == ")" and len(groups) > 1:
            inner = groups.pop()
            end = _quantifier_end(text, i + 1)
            if end > i + 1 and inner:
                return "nested quantifier (a quantified group that contains a quantifier)"
            groups[-1] = groups[-1] or inner or end > i + 1
            i = end
            continue
        if char == "\\" and text[i + 1:i + 2] in _GROUP_DIGITS:
            return "backreference"
        i, problem = _atom_end(text, i)
        if problem:
            return problem
        end = _quantifier_end(text, i)
        groups[-1] = groups[-1] or end > i
        i = end
    return None


def _atom_end(text: str, i: int) -> tuple[int, str | None]:
    """Index after the atom at ``i`` (an escape, a class, one character)."""
    if text[i] == "\\":
        return i + 2, None
    if text[i] == "[":
        return _class_end(text, i)
    return i + 1, None


def _class_end(text: str, i: int) -> tuple[int, str | None]:
    """Index after the ``[...]`` class opening at ``i``; a leading ``]`` is literal."""
    ambiguous = "ambiguous character class (possible nested set or set operation)"
    j, n = i + 1, len(text)
    if text[j:j + 1] == "[":
        return j, ambiguous
    if text[j:j + 1] == "^":
        j += 1
    if text[j:j + 1] == "]":
        j += 1
    while j < n:
        char = text[j]
        if char == "\\":
            j += 2
            continue
        if char == "]":
            return j + 1, None
        if char == "[" or (char in _SET_OPERATORS and text[j + 1:j + 2] == char):
            return j, ambiguous
        j += 1
    return n, None


def _group_prefix(text: str, i: int) -> tuple[int, str | None]:
    """Index after a group's ``(?...`` prefix (``i`` is just after the ``(``)."""
    if text[i:i + 1] != "?":
        return i, None
    if text.startswith(_LOOKAROUNDS, i):
        return i, "lookaround"
    if text.startswith(("?P=", "?("), i):
        return i, "backreference"
    if text.startswith(("?P<", "?<"), i):
        close = text.find(">", i)
        return (close + 1 if close >= 0 else len(text)), None
    if text.startswith("?#", i):  # a comment: it ends at the first ")"
        close = text.find(")", i)
        return (close if close >= 0 else len(text)), None
    if text.startswith(("?:", "?>"), i):
        return i + 2, None
    match = _FLAGS.match(text, i + 1)
    assert match is not None  # the expression accepts the empty string
    if "x" in match.group():
        return i, "the verbose flag (?x)"
    end = match.end()
    return (end + 1 if text[end:end + 1] == ":" else end), None


def _quantifier_end(text: str, i: int) -> int:
    """Index after the quantifier at ``i`` (with a lazy ``?`` or possessive ``+``), or
    ``i`` when there is none."""
    char = text[i:i + 1]
    if char and char in "*+?":
        end = i + 1
    elif char == "{" and (match := _BRACE.match(text, i)) and match.group() != "{}":
        end = match.end()
    else:
        return i
    return end + 1 if text[end:end + 1] in ("?", "+") else end
