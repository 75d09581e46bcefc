"""The compiled form of a guard: a tree of small frozen nodes, each ``evaluate(scope)``.

Values are read from the scope by dict key and list index only, never by attribute. A
path that cannot be followed resolves to :data:`MISSING` (JavaScript's ``undefined``);
a JSON ``null`` is ``None`` and is present.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from hypha_celery.guards._limits import MAX_MATCH_INPUT_CHARS

#: A literal after an operator: ``true``/``false``, ``null``, a number or a string.
Literal = bool | int | float | str | None
Test = Callable[[Any], bool]


class _Missing:
    """The type of :data:`MISSING`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


#: What a path resolves to when it is not there (hypha's ``undefined``).
MISSING: Final = _Missing()

_PLAIN = frozenset({bool, int, float, str, list, dict, tuple})
_ORDER: dict[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt}


class Node(Protocol):
    def evaluate(self, scope: Mapping[str, object]) -> bool: ...


@dataclass(frozen=True, slots=True)
class Path:
    """A dotted path, already prefixed (``variables.score``). ``steps`` are (dict key,
    list index or ``None``); a ``blocked`` path (a ``__`` segment, ``__proto__``,
    ``prototype``, ``constructor``) always resolves to :data:`MISSING`."""

    text: str
    steps: tuple[tuple[str, int | None], ...] = field(repr=False, compare=False)
    blocked: bool = field(repr=False, compare=False)

    def resolve(self, scope: Mapping[str, object]) -> object:
        if self.blocked:
            return MISSING
        value: Any = scope
        for key, index in self.steps:
            kind = type(value)
            if kind is dict:
                value = value.get(key, MISSING)
            elif kind is list or kind is tuple:
                value = value[index] if index is not None and index < len(value) else MISSING
            elif isinstance(value, Mapping):
                value = value.get(key, MISSING)
            else:
                return MISSING
        return value


@dataclass(frozen=True, slots=True)
class Constant:
    value: bool

    def evaluate(self, scope: Mapping[str, object]) -> bool:
        return self.value


TRUE: Final = Constant(True)
FALSE: Final = Constant(False)


@dataclass(frozen=True, slots=True)
class Not:
    operand: Node

    def evaluate(self, scope: Mapping[str, object]) -> bool:
        return not self.operand.evaluate(scope)


@dataclass(frozen=True, slots=True)
class AllOf:
    """``a && b && ...``: false at the first false operand."""

    operands: tuple[Node, ...]

    def evaluate(self, scope: Mapping[str, object]) -> bool:
        return all(operand.evaluate(scope) for operand in self.operands)


@dataclass(frozen=True, slots=True)
class AnyOf:
    """``a || b || ...``: true at the first true operand."""

    operands: tuple[Node, ...]

    def evaluate(self, scope: Mapping[str, object]) -> bool:
        return any(operand.evaluate(scope) for operand in self.operands)


@dataclass(frozen=True, slots=True)
class Exists:
    """``exists(path)``: the path resolves to a value (``null`` included)."""

    path: Path

    def evaluate(self, scope: Mapping[str, object]) -> bool:
        return self.path.resolve(scope) is not MISSING


@dataclass(frozen=True, slots=True)
class Matches:
    """``matches(path, 'regex')``: ``re.search`` on a string of at most
    :data:`MAX_MATCH_INPUT_CHARS`; anything else is false."""

    path: Path
    pattern: re.Pattern[str]

    def evaluate(self, scope: Mapping[str, object]) -> bool:
        value = self.path.resolve(scope)
        return (isinstance(value, str) and len(value) <= MAX_MATCH_INPUT_CHARS
                and self.pattern.search(value) is not None)


@dataclass(frozen=True, slots=True)
class Truthy:
    """A bare path: missing, ``None``, ``False``, ``0``, ``''``, ``[]`` and ``{}`` are false;
    another mapping is true when not empty; a value of any other type is true."""

    path: Path

    def evaluate(self, scope: Mapping[str, object]) -> bool:
        value = self.path.resolve(scope)
        if type(value) in _PLAIN:
            return bool(value)
        if value is None or value is MISSING:
            return False
        return len(value) > 0 if isinstance(value, Mapping) else True


@dataclass(frozen=True, slots=True)
class Compare:
    """``path OP literal``; ``test`` is the comparison, chosen once for the literal."""

    path: Path
    op: str
    literal: Literal
    test: Test = field(repr=False, compare=False)

    def evaluate(self, scope: Mapping[str, object]) -> bool:
        return self.test(self.path.resolve(scope))


def is_number(value: object) -> bool:
    """An ``int`` or ``float``, and not a ``bool``."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def comparison(op: str, literal: Literal) -> Test:
    """The test of ``value OP literal``. Equality is strict (no coercion; a bool is not a
    number; ``1 == 1.0``); ordering is false unless both sides are numbers."""
    if op in _ORDER:
        return _ordering(_ORDER[op], literal)
    equal = _equality(literal)
    if op in ("!=", "!=="):
        return lambda value: not equal(value)
    return equal


def _equality(literal: Literal) -> Test:
    if literal is None:
        return lambda value: value is None
    if isinstance(literal, bool):
        return lambda value: value is literal
    if isinstance(literal, str):
        return lambda value: isinstance(value, str) and value == literal
    return lambda value: is_number(value) and value == literal


def _ordering(compare: Callable[[Any, Any], bool], literal: Literal) -> Test:
    if not is_number(literal):
        return lambda value: False
    return lambda value: is_number(value) and compare(value, literal)
