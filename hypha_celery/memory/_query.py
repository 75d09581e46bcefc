"""The retrieval query language, parsed here and compiled by the store for its backend.

A query is a list of clauses, all of which must match:

* ``word`` — a word; ``"a phrase"`` — words adjacent and in order;
* ``a OR b`` — either (``OR`` in capitals, between two included terms);
* ``-word`` / ``-"a phrase"`` — must not match.

Matching is by token: a run of letters and digits, case-insensitive, no stemming
(``e-mail`` is the phrase ``"e mail"``). A query needs at least one included term.
"""

from __future__ import annotations

import hashlib
import re

from hypha_celery.errors import InvalidMemoryQuery
from hypha_celery.memory._types import DEFAULT_LIMITS, MemoryLimits
from hypha_celery.store.memory import ParsedQuery, QueryTerm, index_tokens

__all__ = ["parse_query", "query_hash", "words_query"]

#: a phrase (the quotes are balanced by then), or a run of anything else but blanks and quotes
_LEX = re.compile(r'(-?)"([^"]*)"|(-?)([^\s"]+)')


def query_hash(query: str) -> str:
    """What events carry of a query: its SHA-256 (hex)."""
    return hashlib.sha256(query.encode()).hexdigest()


class _Builder:
    """Clauses as they are read: groups of included terms, excluded terms."""

    def __init__(self) -> None:
        self.groups: list[list[QueryTerm]] = []
        self.excluded: list[QueryTerm] = []
        self.join = False  # the previous item was OR

    def or_(self) -> None:
        if self.join or not self.groups:
            raise InvalidMemoryQuery("OR must stand between two included terms")
        self.join = True

    def term(self, raw: str, negated: bool) -> None:
        tokens = tuple(index_tokens(raw))
        if self.join and (negated or not tokens):
            raise InvalidMemoryQuery("OR must stand between two included terms")
        if negated and not raw:
            raise InvalidMemoryQuery("'-' must be followed by a word or a phrase")
        if not tokens:  # punctuation only: no token to match
            return
        if negated:
            self.excluded.append(QueryTerm(tokens))
        elif self.join:
            self.groups[-1].append(QueryTerm(tokens))
            self.join = False
        else:
            self.groups.append([QueryTerm(tokens)])

    def done(self, limits: MemoryLimits) -> ParsedQuery:
        if self.join:
            raise InvalidMemoryQuery("OR must stand between two included terms")
        if not self.groups:
            raise InvalidMemoryQuery("the query has no word to search for (only operators, "
                                     "exclusions or punctuation)")
        terms = sum(len(g) for g in self.groups) + len(self.excluded)
        if terms > limits.max_query_terms:
            raise InvalidMemoryQuery(f"the query has {terms} terms, more than the bound of "
                                     f"{limits.max_query_terms} (MemoryLimits.max_query_terms)")
        return ParsedQuery(tuple(tuple(g) for g in self.groups), tuple(self.excluded))


def parse_query(text: str, limits: MemoryLimits = DEFAULT_LIMITS) -> ParsedQuery:
    """``text`` parsed, or :class:`InvalidMemoryQuery` naming what is wrong."""
    if not isinstance(text, str):
        raise InvalidMemoryQuery("a memory query is text")
    if len(text) > limits.max_query_chars:
        raise InvalidMemoryQuery(f"the query is {len(text)} characters, more than the bound "
                                 f"of {limits.max_query_chars} (MemoryLimits.max_query_chars)")
    if text.count('"') % 2:
        raise InvalidMemoryQuery('the query has an unbalanced quote (")')
    built = _Builder()
    for m in _LEX.finditer(text):
        if m.group(4) == "OR" and not m.group(3):
            built.or_()
        elif m.group(2) is not None:  # a phrase
            built.term(m.group(2), bool(m.group(1)))
        else:
            built.term(m.group(4), bool(m.group(3)))
    return built.done(limits)


_WORD = re.compile(r"[^\W_]+")


def words_query(text: str, *, min_chars: int = 1, limits: MemoryLimits | None = None
                ) -> str | None:
    """A query of ``text``'s distinct words (letters and digits, lower case, in order) of
    at least ``min_chars`` characters, joined by ``OR`` (any of them matches; the ranking
    does the rest), as many as the query bounds allow (``max_query_terms``,
    ``max_query_chars``); None when it has none. What ReAct and agent turns recall by
    when no query is given."""
    bounds = limits or DEFAULT_LIMITS
    words: list[str] = []
    size = 0
    for word in dict.fromkeys(w.lower() for w in _WORD.findall(text)):
        if len(word) < min_chars:
            continue
        grown = size + len(word) + (4 if words else 0)  # " OR "
        if len(words) >= bounds.max_query_terms or grown > bounds.max_query_chars:
            break
        words.append(word)
        size = grown
    return " OR ".join(words) or None
