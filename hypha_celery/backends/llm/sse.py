"""A provider's server-sent event stream read straight off the SDK's HTTP response.

The SDKs send the request (auth, headers, timeouts, the HTTP error statuses as their
exceptions), but their stream iterators build a pydantic model per event by validating a
union of every event type the API has: about a millisecond per event, more than
everything else a call does, and on a cold worker a schema build of 150 ms per thread.
So the request goes through the SDKs' public ``with_streaming_response`` and the body is
read here: each event's ``data`` is decoded with ``json.loads`` into a :class:`Wire`
object, which the provider decoders read by attribute as they would the SDK's model.

What the SDK streams do that this does too: the Chat Completions ``[DONE]`` sentinel ends
the stream; an event whose data carries an ``error`` object is raised as a
:class:`~hypha_celery.backends.BackendError` classified by that object (the SDKs raise
``APIError``); transport failures propagate as the HTTP client raised them (``errors``
maps them). Comment lines and ``retry:`` / ``id:`` fields are ignored.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from contextlib import AbstractContextManager, suppress
from typing import Any

from hypha_celery.backends.llm import errors

__all__ = ["RawStream", "Wire", "open_raw", "parse"]


class Wire(dict[str, Any]):
    """A decoded JSON object whose fields also read as attributes; a field that is absent
    reads as None, like an optional field of the SDK's model."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        return self.get(name)


def parse(lines: Iterator[str]) -> Iterator[Any]:
    """The decoded ``data`` of each event of ``lines`` (one event's ``data:`` lines are
    joined with newlines, as the SSE format says), until ``[DONE]`` or the end."""
    data: list[str] = []
    for line in itertools.chain(lines, [""]):  # a blank line ends the last event too
        if line.startswith("data:"):
            data.append(line[6:] if line.startswith("data: ") else line[5:])
        elif not line and data:
            text = "\n".join(data)
            data = []
            if text.startswith("[DONE]"):
                return
            yield json.loads(text, object_hook=Wire)


class RawStream:
    """An SDK streaming response (the context manager ``with_streaming_response.create``
    returns, already entered) read as decoded events. ``response`` is the HTTP response
    (its socket is what a cancel shuts down)."""

    def __init__(self, vendor: str, manager: AbstractContextManager[Any], api: Any) -> None:
        self.vendor = vendor
        self._manager = manager
        self.response = api.http_response
        self._events = parse(api.iter_lines())

    def __iter__(self) -> Iterator[Any]:
        for event in self._events:
            error = event.get("error") if isinstance(event, dict) else None
            if error:
                raise _stream_error(self.vendor, event)
            yield event

    def close(self) -> None:
        with suppress(Exception):
            self._manager.__exit__(None, None, None)


def open_raw(vendor: str, manager: AbstractContextManager[Any]) -> RawStream:
    """Enter ``manager`` (the request is sent; an HTTP error status raises the SDK's
    exception) and read its body as events."""
    return RawStream(vendor, manager, manager.__enter__())


def _stream_error(vendor: str, event: dict[str, Any]) -> Exception:
    error = event["error"]
    message = error.get("message") if isinstance(error, dict) else None
    text = message if isinstance(message, str) and message else "an error event in the stream"
    return errors.from_payload(vendor, dict(event), errors.scrub(f"error event: {text}"))
