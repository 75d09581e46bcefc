"""Items on the wire: a large text is split (nothing lost), any other large item is
truncated to its short scalar fields, and what is not a JSON object with a kind is dropped."""

from __future__ import annotations

import json
import logging

import pytest

from hypha_celery.live import LiveBounds
from hypha_celery.live._bus import is_end, shape


def decoded(payloads: list[bytes]) -> list[dict[str, object]]:
    return [json.loads(p) for p in payloads]


@pytest.mark.parametrize("text", ["a" * 5_000, "é" * 3_000, "\x01\"\\" * 900, "🦀x" * 1_500])
def test_a_large_text_is_split_on_characters_and_joins_back(text: str) -> None:
    payloads = shape({"kind": "text", "text": text, "execution_id": "r.1"}, 1_024)
    assert len(payloads) > 1 and all(len(p) <= 1_024 for p in payloads)
    items = decoded(payloads)
    assert "".join(str(i["text"]) for i in items) == text
    assert all(i["kind"] == "text" and i["execution_id"] == "r.1" for i in items)


def test_an_item_within_the_bound_is_one_payload_kind_first() -> None:
    [payload] = shape({"text": "hi", "kind": "text"}, 1_024)
    assert payload == b'{"kind":"text","text":"hi"}'
    assert is_end(shape({"reason": None, "kind": "end"}, 1_024)[0])
    assert not is_end(shape({"kind": "endless"}, 1_024)[0])


def test_any_other_large_item_is_truncated_to_its_short_scalars() -> None:
    item = {"kind": "tool_use", "id": "call_1", "name": "kb_search", "n": 3,
            "input": {"q": "x" * 5_000}, "note": "y" * 500}
    [payload] = shape(item, 1_024)
    assert json.loads(payload) == {"kind": "tool_use", "id": "call_1", "name": "kb_search",
                                   "n": 3, "truncated": True,
                                   "bytes": len(json.dumps(item, separators=(",", ":")))}


def test_text_with_huge_other_fields_is_truncated_not_split() -> None:
    [payload] = shape({"kind": "text", "text": "hello", "meta": "m" * 2_000}, 512)
    assert json.loads(payload)["truncated"] is True and len(payload) <= 512


def test_what_is_not_an_item_is_dropped_and_logged_by_type(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "hypha_celery.live")
    assert shape({"kind": "text", "text": object()}, 1_024) == []
    assert shape({"text": "no kind"}, 1_024) == []
    assert shape(["kind"], 1_024) == []  # type: ignore[arg-type]
    assert [r.getMessage() for r in caplog.records] == ["live item dropped: TypeError"] * 3


def test_bounds_are_checked() -> None:
    with pytest.raises(ValueError):
        LiveBounds(queue_items=0)
    with pytest.raises(ValueError):
        LiveBounds(max_item_bytes=100)
