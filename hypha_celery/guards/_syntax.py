"""Tokenizer and recursive-descent parser: guard text to a tree of :mod:`._nodes`.

Grammar (``||`` binds loosest)::

    guard      := 'else:' [disjunct] | [disjunct]       (empty: true)
    disjunct   := conjunct ('||' conjunct)*
    conjunct   := operand ('&&' operand)*
    operand    := '!' operand | '(' disjunct ')' | call | comparison | keyword | path
    call       := 'exists' '(' path ')' | 'matches' '(' path ',' string ')'
    comparison := path OP literal          OP: === == !== != >= <= > <
    keyword    := true | always | default | false | never
    literal    := true | false | null | number | string | word

Every error is a :class:`~hypha_celery.errors.GuardError` with the 0-based character
position of the problem.
"""

from __future__ import annotations

import re
from typing import NamedTuple, NoReturn

from hypha_celery.errors import GuardError
from hypha_celery.guards import _nodes as n
from hypha_celery.guards._limits import MAX_DEPTH, MAX_EXPRESSION_CHARS
from hypha_celery.guards._patterns import compile_pattern

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<and>&&) | (?P<or>\|\|)
  | (?P<op>===|!==|==|!=|>=|<=|>|<)
  | (?P<not>!) | (?P<open>\() | (?P<close>\)) | (?P<comma>,)
  | (?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
  | (?P<word>[^\s()!,&|=<>'"]+)
""", re.VERBOSE | re.DOTALL)
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?P<fraction>(?:\.\d+)?(?:[eE][+-]?\d+)?)")
_PATH = re.compile(r"[A-Za-z_$][\w$-]*(?:\.[\w$-]+)*", re.ASCII)
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t", "r": "\r"}

_SCOPES = frozenset({"input", "variables", "metadata"})
_BLOCKED = frozenset({"__proto__", "prototype", "constructor"})
_KEYWORDS = {"true": n.TRUE, "always": n.TRUE, "default": n.TRUE,
             "false": n.FALSE, "never": n.FALSE}
_LITERALS: dict[str, n.Literal] = {"true": True, "false": False, "null": None}
_FUNCTIONS = frozenset({"exists", "matches"})
_END = "end"


class _Token(NamedTuple):
    kind: str
    text: str
    pos: int


def compile_tree(expression: str) -> tuple[n.Node, tuple[str, ...]]:
    """The root node of ``expression`` and the paths it reads (in order, no repeats)."""
    if not isinstance(expression, str):
        raise GuardError(f"a guard is a string, not {type(expression).__name__}",
                         repr(expression), 0)
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise GuardError(f"guard is longer than {MAX_EXPRESSION_CHARS} characters",
                         expression, MAX_EXPRESSION_CHARS)
    start = len(expression) - len(expression.lstrip())
    negate = expression.startswith("else:", start)
    parser = _Parser(expression, start + 5 if negate else start)
    root = parser.guard()
    return (n.Not(root) if negate else root), tuple(parser.paths)


def unescape(quoted: str) -> str:
    """The text of a quoted string: ``\\\\``, ``\\'``, ``\\"``, ``\\n``, ``\\t``, ``\\r``
    are escapes; any other backslash is kept (so ``'\\d+'`` is the regex ``\\d+``)."""
    return _ESCAPE.sub(lambda m: _ESCAPES.get(m.group(1), m.group()), quoted[1:-1])


def _tokenize(expression: str, start: int) -> list[_Token]:
    tokens: list[_Token] = []
    pos = start
    while pos < len(expression):
        match = _TOKEN.match(expression, pos)
        if match is None:
            char = expression[pos]
            problem = "unterminated string" if char in "'\"" else f"unexpected {char!r}"
            raise GuardError(problem, expression, pos)
        kind = match.lastgroup
        assert kind is not None
        if kind != "space":
            tokens.append(_Token(kind, match.group(), pos))
        pos = match.end()
    tokens.append(_Token(_END, "", len(expression)))
    return tokens


def _describe(token: _Token) -> str:
    return "end of guard" if token.kind == _END else repr(token.text)


class _Parser:
    def __init__(self, expression: str, start: int) -> None:
        self.expression = expression
        self.tokens = _tokenize(expression, start)
        self.index = 0
        self.depth = 0
        self.paths: dict[str, None] = {}  # an ordered set

    # -- tokens ------------------------------------------------------------
    def fail(self, message: str, pos: int) -> NoReturn:
        raise GuardError(message, self.expression, pos)

    def peek(self) -> _Token:
        return self.tokens[self.index]

    def take(self) -> _Token:
        token = self.tokens[self.index]
        if token.kind != _END:
            self.index += 1
        return token

    def expect(self, kind: str, what: str) -> _Token:
        token = self.take()
        if token.kind != kind:
            self.fail(f"expected {what}, found {_describe(token)}", token.pos)
        return token

    # -- grammar -----------------------------------------------------------
    def guard(self) -> n.Node:
        if self.peek().kind == _END:
            return n.TRUE
        node = self.disjunct()
        token = self.peek()
        if token.kind != _END:
            self.fail(f"unexpected {_describe(token)}", token.pos)
        return node

    def disjunct(self) -> n.Node:
        operands = [self.conjunct()]
        while self.peek().kind == "or":
            self.take()
            operands.append(self.conjunct())
        return operands[0] if len(operands) == 1 else n.AnyOf(tuple(operands))

    def conjunct(self) -> n.Node:
        operands = [self.operand()]
        while self.peek().kind == "and":
            self.take()
            operands.append(self.operand())
        return operands[0] if len(operands) == 1 else n.AllOf(tuple(operands))

    def operand(self) -> n.Node:
        token = self.peek()
        node = self.nested(token) if token.kind in ("not", "open") else self.primary()
        after = self.peek()
        if after.kind == "op":
            self.fail(f"the left side of {after.text!r} must be a path", after.pos)
        return node

    def nested(self, token: _Token) -> n.Node:
        """``!operand`` or ``(disjunct)``, at most :data:`MAX_DEPTH` deep."""
        if self.depth >= MAX_DEPTH:
            self.fail(f"guard is nested deeper than {MAX_DEPTH} levels", token.pos)
        self.depth += 1
        self.take()
        if token.kind == "not":
            node: n.Node = n.Not(self.operand())
        else:
            node = self.disjunct()
            self.expect("close", "')'")
        self.depth -= 1
        return node

    def primary(self) -> n.Node:
        token = self.take()
        following = self.peek().kind
        if following == "op" and token.kind in ("word", "string"):
            return self.comparison(token)
        if token.kind != "word":
            self.fail(f"expected a condition, found {_describe(token)}", token.pos)
        if following == "open":
            return self.call(token)
        if token.text in _KEYWORDS:
            return _KEYWORDS[token.text]
        if token.text.startswith("else:"):
            self.fail("'else:' is only allowed at the start of a guard", token.pos)
        return n.Truthy(self.path(token))

    def call(self, name: _Token) -> n.Node:
        if name.text not in _FUNCTIONS:
            self.fail(f"unknown function {name.text!r} (exists, matches)", name.pos)
        self.take()
        path = self.path(self.take())
        if name.text == "exists":
            self.expect("close", "')'")
            return n.Exists(path)
        self.expect("comma", "','")
        quoted = self.expect("string", "a quoted pattern")
        self.expect("close", "')'")
        pattern = compile_pattern(unescape(quoted.text), self.expression, quoted.pos)
        return n.Matches(path, pattern)

    def comparison(self, left: _Token) -> n.Node:
        path = self.path(left, f"the left side of {self.peek().text!r}")
        op = self.take().text
        right = self.take()
        if right.kind == "string":
            literal: n.Literal = unescape(right.text)
        elif right.kind == "word":
            literal = _literal(right.text)
        else:
            self.fail(f"expected a value after {op!r}, found {_describe(right)}", right.pos)
        return n.Compare(path, op, literal, n.comparison(op, literal))

    def path(self, token: _Token, role: str = "") -> n.Path:
        """The path ``token`` names, ``variables.``-prefixed unless its first segment is
        ``input``, ``variables`` or ``metadata``; recorded in :attr:`paths`."""
        if token.kind != "word" or not _PATH.fullmatch(token.text):
            found = _describe(token)
            self.fail(f"{role} must be a path, found {found}" if role
                      else f"expected a path, found {found}", token.pos)
        segments = token.text.split(".")
        if segments[0] not in _SCOPES:
            segments.insert(0, "variables")
        text = ".".join(segments)
        self.paths[text] = None
        blocked = any(s.startswith("__") or s in _BLOCKED for s in segments)
        steps = tuple((s, _index(s)) for s in segments)
        return n.Path(text, steps, blocked)


def _literal(word: str) -> n.Literal:
    if word in _LITERALS:
        return _LITERALS[word]
    number = _NUMBER.fullmatch(word)
    if number is None:
        return word
    return float(word) if number.group("fraction") else int(word)


def _index(segment: str) -> int | None:
    """A list index: ``0`` or digits without a leading zero."""
    if segment.isdigit() and (segment == "0" or segment[0] != "0"):
        return int(segment)
    return None
