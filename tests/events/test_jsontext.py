"""events/jsontext.py: CPython's private ``_json.make_encoder`` behind ``prebuilt``.

These tests fail loudly when CPython changes the private encoder (gone, other arguments,
other text), and show that ``prebuilt`` then falls back to the public ``encode``.
"""

from __future__ import annotations

import json
import math
import platform
import sys
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypha_celery.events.jsontext import prebuilt

ENCODERS = {
    "canonical": json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                                  allow_nan=False),
    "store": json.JSONEncoder(allow_nan=False, separators=(",", ":"), check_circular=False),
    "default": json.JSONEncoder(),
    "unicode, nan": json.JSONEncoder(ensure_ascii=False, allow_nan=True),
    "skipkeys, default": json.JSONEncoder(skipkeys=True, default=repr),
}
VALUES: list[Any] = [
    None, True, False, 0, -1, 2**70, 0.1, -0.0, 1e-7, 1e300, 1.5e-323, "", "plain",
    "quote \" backslash \\ newline \n tab \t nul \x00", "é ü 中 😀", "lone \ud800 surrogate",
    [], {}, [1, [2, [3, []]]], {"b": 1, "a": {"d": [], "c": None}},
    {1: "int key", 2.5: "float key", None: "null key"}, {False: "bool key", "b": 2},
    ("a", "tuple"), {"payload": {"execution_id": "r.1.n", "step": 1, "output": {"x": [1.25]}}},
    math.nan, math.inf, {"x": object()}, {("tuple", "key"): 1},  # errors for some encoders
]
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20)


def test_cpython_has_the_private_encoder_and_prebuilt_uses_it() -> None:
    if platform.python_implementation() != "CPython":
        pytest.skip("the C encoder is CPython's")
    from _json import make_encoder  # noqa: F401 - the name itself is what is checked
    for name, encoder in ENCODERS.items():
        assert prebuilt(encoder) != encoder.encode, f"{name}: fell back to the public path"


@pytest.mark.parametrize("name", ENCODERS)
@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_same_text_or_error_as_the_public_encoder(name: str, value: Any) -> None:
    encoder = ENCODERS[name]
    assert outcome(prebuilt(encoder), value) == outcome(encoder.encode, value)


@given(JSON)
def test_same_text_on_any_json_value(value: Any) -> None:
    for encoder in ENCODERS.values():
        assert prebuilt(encoder)(value) == encoder.encode(value)


def test_without_the_private_encoder_it_is_the_public_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "_json", None)  # ``from _json import ...`` fails
    encoder = ENCODERS["canonical"]
    assert prebuilt(encoder) == encoder.encode


@pytest.mark.parametrize("make_encoder", [
    lambda *args: (lambda value, level: ["other text"]),  # writes other text
    lambda markers, default: None,  # takes other arguments
], ids=["other text", "other arguments"])
def test_a_changed_private_encoder_is_not_used(monkeypatch: pytest.MonkeyPatch,
                                               make_encoder: Callable[..., Any]) -> None:
    monkeypatch.setitem(sys.modules, "_json", SimpleNamespace(make_encoder=make_encoder))
    encoder = ENCODERS["canonical"]
    assert prebuilt(encoder) == encoder.encode


def test_an_indented_encoder_is_the_public_one() -> None:
    encoder = json.JSONEncoder(indent=2)
    assert prebuilt(encoder) == encoder.encode


def outcome(encode: Callable[[Any], str], value: Any) -> tuple[str, str]:
    """The text, or the type of the error (the messages may differ)."""
    try:
        return "text", encode(value)
    except (TypeError, ValueError) as exc:
        return "error", type(exc).__name__
