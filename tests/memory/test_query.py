"""The query language: what parses, what is refused (naming the problem), and that any
string either searches or raises InvalidMemoryQuery on both backends, never a DB error."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hypha_celery.errors import InvalidMemoryQuery
from hypha_celery.memory import MemoryLimits, MemoryManager, MemoryScope, parse_query
from hypha_celery.store.memory import ParsedQuery, QueryTerm, fts5_match, tsquery


def terms(*words: str) -> tuple[QueryTerm, ...]:
    return tuple(QueryTerm(tuple(w.split())) for w in words)


def test_the_grammar() -> None:
    q = parse_query('Cat "big dog" OR fox -bird -"red fish" e-mail')
    assert q == ParsedQuery((terms("cat"), terms("big dog", "fox"), terms("e mail")),
                            terms("bird", "red fish"))
    assert tsquery(q) == ("(('cat')) & (('big' <-> 'dog') | ('fox')) & (('e' <-> 'mail')) "
                          "& !('bird') & !('red' <-> 'fish')")
    assert fts5_match(parse_query("a"), "ü") == 'owner : "uC3BC" AND (body : "a")'
    assert parse_query("a or b") == ParsedQuery((terms("a"), terms("or"), terms("b")))
    assert parse_query("tea !!! ?") == ParsedQuery((terms("tea"),))


@pytest.mark.parametrize(("query", "problem"), [
    ('"unbalanced', "unbalanced quote"),
    ("", "no word"),
    ("   ", "no word"),
    ("OR", "OR must stand"),
    ("a OR", "OR must stand"),
    ("OR a", "OR must stand"),
    ("a OR OR b", "OR must stand"),
    ("a OR -b", "OR must stand"),
    ("-a -b", "no word"),
    ("!!! ---", "no word"),
    ('a -""', "'-' must be followed"),
    ("x" * 513, "max_query_chars"),
    (" ".join(["w"] * 33), "max_query_terms"),
])
def test_malformed_queries_name_the_problem(query: str, problem: str) -> None:
    with pytest.raises(InvalidMemoryQuery, match=problem):
        parse_query(query, MemoryLimits())


_QUERY_CHARS = st.sampled_from(list('ab "-OR()*:^{}\'\\;NEAR\x00é😀_.,') + ["AND", "NOT"])


@settings(max_examples=150, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture])
@given(query=st.one_of(st.text(max_size=60), st.lists(_QUERY_CHARS, max_size=20).map("".join)))
def test_any_query_searches_or_is_refused(manager: MemoryManager, query: str) -> None:
    scope = MemoryScope("hypothesis-" + manager.store.dialect)
    if not manager.list(scope, limit=1):
        manager.add(scope, "semantic", "a b ab OR NOT and é", operation_id=uuid.uuid4().hex)
    try:
        hits = manager.search(scope, query)
    except InvalidMemoryQuery:
        return
    assert len(hits) <= 10
