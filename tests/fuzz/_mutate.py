"""Hypothesis strategies shared by the fuzzers: JSON values, and mutations of a valid
JSONL export (bytes, lines, JSON values re-sealed so they pass the checksum)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from hypha_celery.events.envelope import canonical

_SCALARS = (st.none() | st.booleans() | st.integers() | st.integers(-3, 3)
            | st.floats(allow_nan=False, allow_infinity=False)
            | st.text(max_size=20)
            | st.sampled_from(["", "run.created", "node.execution.completed", "run-1",
                               "x:1", "sha256:", "\ud800", "\u0000", "9" * 30]))
#: JSON values, small, sometimes nested deep.
JSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=16)
DEEP = st.integers(1, 3000).map(lambda n: "[" * n + "]" * n)  # a deep JSON array, as text


def seal(body: dict[str, Any]) -> str:
    """The export line of ``body`` (its checksum replaced by the right one)."""
    body = {k: v for k, v in body.items() if k != "checksum"}
    text = canonical(body)
    digest = hashlib.sha256(text.encode()).hexdigest()
    return f'{text[:-1]},"checksum":"sha256:{digest}"}}\n'


def _paths(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at] if at else []
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*at, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out += _paths(item, (*at, i))
    return out


def _set(value: Any, at: tuple[Any, ...], new: Any) -> Any:
    if not at:
        return new
    head, rest = at[0], at[1:]
    if isinstance(value, dict):
        return {**value, head: _set(value[head], rest, new)}
    copy = list(value)
    copy[head] = _set(copy[head], rest, new)
    return copy


@st.composite
def resealed(draw: st.DrawFn, lines: list[str]) -> list[str]:
    """``lines`` with a few JSON values (a field, a payload member) changed, dropped or
    added, each changed line sealed again: the checksum passes, the deeper checks run."""
    out = list(lines)
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(out) - 1))
        body = json.loads(out[i])
        body.pop("checksum", None)
        paths = _paths(body)
        at = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["set", "set", "drop", "add"]))
        if action == "set":
            body = _set(body, at, draw(JSON))
        elif action == "drop":
            parent = _get(body, at[:-1])
            if isinstance(parent, dict):
                body = _set(body, at[:-1], {k: v for k, v in parent.items() if k != at[-1]})
        else:
            parent = _get(body, at[:-1])
            if isinstance(parent, dict):
                key = draw(st.text(max_size=8))
                body = _set(body, at[:-1], {**parent, key: draw(JSON)})
        out[i] = seal(body)
    return out


def _get(value: Any, at: tuple[Any, ...]) -> Any:
    for key in at:
        value = value[key]
    return value


@st.composite
def line_edits(draw: st.DrawFn, lines: list[str]) -> list[str]:
    """``lines`` with lines dropped, repeated, swapped, or a blank / foreign one put in."""
    out = list(lines)
    for _ in range(draw(st.integers(1, 4))):
        n = len(out)
        op = draw(st.sampled_from(["drop", "dup", "swap", "insert", "truncate"]))
        i = draw(st.integers(0, max(n - 1, 0)))
        if op == "drop" and n:
            del out[i]
        elif op == "dup" and n:
            out.insert(draw(st.integers(0, n)), out[i])
        elif op == "swap" and n:
            j = draw(st.integers(0, n - 1))
            out[i], out[j] = out[j], out[i]
        elif op == "insert":
            foreign = draw(st.sampled_from(["\n", "  \n", "{}\n", "[]\n", "null\n",
                                            '{"hypha_signed_export_end":1}\n'])
                           | st.text(max_size=40).map(lambda t: t + "\n"))
            out.insert(draw(st.integers(0, n)), foreign)
        elif op == "truncate" and n:
            out[i] = out[i][:draw(st.integers(0, len(out[i])))]
    return out


@st.composite
def byte_flips(draw: st.DrawFn, lines: list[str]) -> list[bytes]:
    """``lines`` as bytes with a few bytes changed, removed or put in."""
    data = bytearray("".join(lines).encode())
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, max(len(data) - 1, 0)))
        op = draw(st.sampled_from(["flip", "set", "delete", "insert", "text"]))
        if op == "flip" and data:
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and data:
            data[i] = draw(st.integers(0, 255))
        elif op == "delete" and data:
            del data[i]
        elif op == "text":  # valid UTF-8: non-ASCII text where hex or a number was
            data[i:i + draw(st.integers(0, 2))] = draw(
                st.text(min_size=1, max_size=3)).encode("utf-8", "surrogatepass")
        else:
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
    return bytes(data).splitlines(keepends=True)


@st.composite
def mutated(draw: st.DrawFn, doc: Any, values: st.SearchStrategy[Any]) -> Any:
    """``doc`` (a document: dicts, lists, scalars) with one to four values replaced by
    ``values``, removed, or added (a new key, a list item repeated)."""
    out = doc
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(out)
        if not paths:
            return draw(values)
        at = draw(st.sampled_from(paths))
        parent = _get(out, at[:-1])
        action = draw(st.sampled_from(["set", "set", "drop", "add"]))
        if action == "set":
            out = _set(out, at, draw(values))
        elif action == "drop" and isinstance(parent, dict):
            out = _set(out, at[:-1], {k: v for k, v in parent.items() if k != at[-1]})
        elif action == "drop":
            out = _set(out, at[:-1], [v for i, v in enumerate(parent) if i != at[-1]])
        elif isinstance(parent, dict):
            out = _set(out, at[:-1], {**parent, draw(st.text(max_size=10)): draw(values)})
        else:
            out = _set(out, at[:-1], [*parent, parent[at[-1]]])
    return out


def tally(name: str) -> None:
    """``hypothesis.event(name)`` inside a Hypothesis test (its statistics); else nothing."""
    if currently_in_test_context():
        event(name)
