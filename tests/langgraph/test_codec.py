"""The JSON codec of distributed LangGraph values: LangGraph's objects round trip through
JSON text; values that are not JSON are refused, naming where they are, unless a
``serializer`` takes them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langgraph.types import Interrupt, Send

from hypha_celery.errors import NotJsonState
from hypha_celery.langgraph.codec import TAG, Codec


def through_json(codec: Codec, value: Any) -> Any:
    return codec.decode(json.loads(json.dumps(codec.encode(value, "test"))))


@pytest.mark.parametrize("value", [
    None, True, 3, 2.5, "s", [1, "a", None], {"a": {"b": [1]}},
    (1, "two", (3,)),
    {1: "one", (2, 3): "pair"},
    {TAG: "a user's key", "x": 1},
    [{"nested": (1, {2: "x"})}],
])
def test_plain_values_round_trip(value: Any) -> None:
    assert through_json(Codec(), value) == value


def test_send_and_interrupt_round_trip() -> None:
    codec = Codec()
    send = through_json(codec, Send("m", {"topic": "x", "items": ("a",)}))
    assert isinstance(send, Send) and send == Send("m", {"topic": "x", "items": ("a",)})
    got = through_json(codec, [Interrupt(value={"q": "ok?"}, id="i1")])
    assert isinstance(got[0], Interrupt) and (got[0].value, got[0].id) == ({"q": "ok?"}, "i1")


def test_tuples_stay_tuples() -> None:
    assert type(through_json(Codec(), ("a", 1))) is tuple


def test_langchain_messages_round_trip() -> None:
    messages = pytest.importorskip("langchain_core.messages")
    sent = [messages.HumanMessage("hi", id="1"),
            messages.AIMessage("hello", id="2", tool_calls=[
                {"name": "f", "args": {"x": 1}, "id": "c1", "type": "tool_call"}]),
            messages.ToolMessage("42", tool_call_id="c1", id="3")]
    got = through_json(Codec(), {"messages": sent})["messages"]
    assert got == sent and [type(m) for m in got] == [type(m) for m in sent]


class Point:
    def __init__(self, x: int) -> None:
        self.x = x

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Point) and other.x == self.x

    def __hash__(self) -> int:
        return self.x


class PointSerializer:
    def dump(self, value: Any) -> Any:
        if isinstance(value, Point):
            return {"x": value.x}
        if isinstance(value, set | frozenset):
            return {"set": sorted(value)}
        raise TypeError(type(value).__name__)

    def load(self, data: Any) -> Any:
        return set(data["set"]) if "set" in data else Point(data["x"])


@pytest.mark.parametrize(("value", "type_name"), [
    ({1, 2}, "builtins.set"),
    (Point(1), "Point"),
])
def test_a_value_that_is_not_json_names_the_channel_and_the_type(
        value: Any, type_name: str) -> None:
    with pytest.raises(NotJsonState) as info:
        Codec().encode({"inner": [value]}, "channel 'tags'")
    assert "channel 'tags'" in str(info.value) and type_name in str(info.value)
    assert isinstance(info.value, TypeError)


def test_a_serializer_takes_what_json_does_not() -> None:
    codec = Codec(PointSerializer())
    value = {"tags": {1, 2}, "where": Point(3), "plain": [1]}
    assert through_json(codec, value) == value


def test_a_serializer_that_refuses_leaves_the_error() -> None:
    with pytest.raises(NotJsonState, match="datetime"):
        import datetime

        Codec(PointSerializer()).encode(datetime.date(2020, 1, 1), "channel 'd'")


def test_a_custom_value_without_its_serializer_is_refused_on_read() -> None:
    data = Codec(PointSerializer()).encode(Point(1), "x")
    with pytest.raises(NotJsonState, match="custom"):
        Codec().decode(data)

