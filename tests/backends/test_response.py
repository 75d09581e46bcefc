from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from hypha_celery.backends import BackendError, BackendEvent, Response, TurnError, collect


def text(t: str, boundary: bool = False) -> BackendEvent:
    data = {"text": t, "message_boundary": True} if boundary else {"text": t}
    return BackendEvent.new("text", data)


def result(**data: Any) -> BackendEvent:
    return BackendEvent.new("result", data)


def ok(events: Any, **kw: Any) -> Response:
    out = collect("p", events, **kw)
    assert isinstance(out, Response), out
    return out


def fail(events: Any, **kw: Any) -> TurnError:
    out = collect("p", events, **kw)
    assert isinstance(out, TurnError), out
    return out


def test_result_text_wins_and_fields() -> None:
    events = [BackendEvent.new("session", {"model": "m0"}), text("a"), text("b"),
              BackendEvent.new("usage", {"input_tokens": 1, "output_tokens": 2}),
              BackendEvent.new("usage", {"input_tokens": 3, "output_tokens": 4}),
              result(text="final", session_id="s1", model="m1")]
    resp = ok(events, metadata={"k": 1})
    assert (resp.prompt, resp.text, resp.final_message) == ("p", "final", "final")
    assert resp.usage == {"input_tokens": 3, "output_tokens": 4}
    assert (resp.session_id, resp.model, resp.metadata) == ("s1", "m1", {"k": 1})
    assert resp.events == tuple(events) and resp.terminal is events[-1]
    assert resp.event_coverage == {"mode": "exact", "observed_events": 6, "retained_events": 6,
                                   "omitted_events": 0,
                                   "retained_bytes": sum(e.size for e in events),
                                   "first_omission": None}


def test_deltas_join_with_blank_line_at_boundaries() -> None:
    events = [text("one", boundary=True), text(" more"), text("two", boundary=True),
              text("three", boundary=True), text("!"), result()]
    resp = ok(events)
    assert resp.text == "one more\n\ntwo\n\nthree!"
    assert resp.final_message == "three!"
    assert resp.usage is None and resp.session_id is None and resp.model is None


def test_no_boundaries_final_message_is_all_text_and_empty_result_text_ignored() -> None:
    resp = ok([text("a"), text("b"), result(text="")])
    assert (resp.text, resp.final_message) == ("ab", "ab")


def test_session_id_fallback() -> None:
    assert ok([result(text="x")], session_id="given").session_id == "given"
    assert ok([result(text="x", session_id="new")], session_id="given").session_id == "new"


def test_stops_at_first_terminal_and_closes_the_stream() -> None:
    consumed: list[str] = []
    closed: list[bool] = []

    def stream() -> Iterator[BackendEvent]:
        try:
            for e in [text("a"), result(text="r1"), text("late"), result(text="r2")]:
                consumed.append(e.kind)
                yield e
        finally:
            closed.append(True)

    resp = ok(stream())
    assert resp.text == "r1" and consumed == ["text", "result"] and closed == [True]


def test_error_terminal() -> None:
    err = BackendEvent.new("error", {"reason": "overloaded", "detail": "x"})
    out = fail([text("a"), err, result(text="never")])
    assert (out.reason, out.info, out.terminal) == ("overloaded", {}, err)
    assert fail([BackendEvent.new("error", {})]).reason == "unknown"
    assert fail([BackendEvent.new("error", {"reason": {"nested": 1}})]).reason == "unknown"


def test_missing_terminal() -> None:
    assert fail([text("a"), text("b")]) == TurnError("no_terminal_event")
    assert fail([]) == TurnError("no_terminal_event")


def test_raising_stream_is_a_crash_with_content_free_info() -> None:
    def stream() -> Iterator[BackendEvent]:
        yield text("a")
        raise ValueError("SECRET-SENTINEL")

    out = fail(stream())
    assert out == TurnError("task_crashed", {"exception": "ValueError"})
    assert "SECRET-SENTINEL" not in json.dumps(out.to_json())

    def backend_crash() -> Iterator[BackendEvent]:
        raise BackendError("mock", "boom", False, message="SECRET-SENTINEL")
        yield  # pragma: no cover

    out = fail(backend_crash())
    assert out.info == {"exception": "BackendError", "backend_error": {
        "provider": "mock", "kind": "boom", "retryable": False, "status": None,
        "retry_after": None}}


def test_non_event_item_is_a_crash() -> None:
    assert fail([{"kind": "result"}]).info == {"exception": "TypeError"}


def test_propagate_reraises() -> None:
    class Watchdog(Exception):
        pass

    def stream() -> Iterator[BackendEvent]:
        raise Watchdog
        yield  # pragma: no cover

    with pytest.raises(Watchdog):
        collect("p", stream(), propagate=(Watchdog,))


def test_compact_count_limit_exact_coverage() -> None:
    events = [text(f"{i % 10}") for i in range(1005)] + [result(session_id="s")]
    resp = ok(events, max_events=1000)
    assert resp.events == tuple(events[:1000])
    assert resp.terminal is events[-1] and resp.session_id == "s"
    assert resp.text == "".join(f"{i % 10}" for i in range(1005))  # full text preserved
    assert resp.event_coverage == {
        "mode": "compact", "observed_events": 1006, "retained_events": 1000,
        "omitted_events": 6, "retained_bytes": sum(e.size for e in events[:1000]),
        "first_omission": {"limit": "events", "event_kind": "text"}}


def test_compact_keeps_a_prefix_under_the_byte_limit() -> None:
    big, small = text("x" * 100), text("y")
    size = big.size
    resp = ok([big, big, big, small, result(text="done")], max_bytes=2 * size + 5)
    assert resp.events == (big, big)  # a prefix: the small one after the omission is dropped
    assert resp.event_coverage == {
        "mode": "compact", "observed_events": 5, "retained_events": 2, "omitted_events": 3,
        "retained_bytes": 2 * size, "first_omission": {"limit": "bytes", "event_kind": "text"}}
    assert resp.text == "done"


def test_terminal_compacted_away_is_still_the_terminal() -> None:
    final = result(text="r")
    resp = ok([text("a"), final], max_events=1)
    assert resp.events == (resp.events[0],) and resp.terminal is final
    assert resp.event_coverage["first_omission"] == {"limit": "events", "event_kind": "result"}


def test_lossless_overflow_error_is_exact() -> None:
    seen: list[BackendEvent] = []
    events = [text("a")] * 3 + [BackendEvent.new("tool_use", {"name": "t"}), result(text="r")]
    out = fail(events, max_events=3, retention="lossless", on_event=seen.append)
    assert out == TurnError("event_capture_overflow", {
        "limit": "events", "max_events": 3, "max_bytes": 1_048_576, "retained_events": 3,
        "retained_bytes": 3 * events[0].size, "rejected_event_kind": "tool_use",
        "rejected_event_bytes": events[3].size})
    assert seen == events[:3]  # the rejected event is not passed on


def test_lossless_byte_overflow() -> None:
    a, b = text("a" * 50), text("b" * 50)
    out = fail([a, b, result()], max_bytes=a.size + 10, retention="lossless")
    assert out.info == {"limit": "bytes", "max_events": 1000, "max_bytes": a.size + 10,
                        "retained_events": 1, "retained_bytes": a.size,
                        "rejected_event_kind": "text", "rejected_event_bytes": b.size}


def test_lossless_within_bounds_is_exact() -> None:
    assert ok([text("a"), result()], retention="lossless").event_coverage["mode"] == "exact"


def test_compact_delivers_every_event_to_on_event() -> None:
    seen: list[BackendEvent] = []
    events = [text("a"), text("b"), result()]
    ok(events, max_events=1, on_event=seen.append)
    assert seen == events


def test_duration_uses_the_clock() -> None:
    ticks = iter([100.0, 350.0])
    assert ok([result()], clock=lambda: next(ticks)).duration_ms == 250.0
    assert ok([result()], clock=lambda: 40.0, started_ms=10.0).duration_ms == 30.0


@pytest.mark.parametrize("kw", [{"max_events": 0}, {"max_bytes": -1}, {"max_events": 1.5},
                                {"retention": "exact"}])
def test_bad_bounds(kw: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        collect("p", [], **kw)


def test_response_json_round_trip() -> None:
    resp = ok([text("a", boundary=True), BackendEvent.new("usage", {"input_tokens": 1}),
               result(text="r", model="m")], max_events=2, metadata={"m": [1]})
    doc = json.loads(json.dumps(resp.to_json()))
    assert Response.from_json(doc) == resp
