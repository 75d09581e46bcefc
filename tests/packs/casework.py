"""Nodes of the ``casework`` test pack (casework.yaml): an echo, a node that raises, a
nap that gives up when its run is cancelled, and dice (a different output each run)."""

from __future__ import annotations

import time
import uuid

from hypha_celery.graph import Context
from hypha_celery.jsontypes import JsonObject, JsonValue

__all__ = ["boom", "dice", "echo", "nap"]


def echo(state: dict[str, object], input: JsonValue) -> JsonObject:
    text = input.get("text", "") if isinstance(input, dict) else ""
    return {"reply": {"text": text}}


def boom(state: dict[str, object], input: JsonValue) -> JsonObject:
    raise RuntimeError("the boom node always fails")


def nap(state: dict[str, object], input: JsonValue, ctx: Context) -> JsonObject:
    seconds = input.get("seconds", 1) if isinstance(input, dict) else 1
    end = time.monotonic() + float(seconds if isinstance(seconds, int | float) else 1)
    while time.monotonic() < end and not ctx.cancelled():
        time.sleep(0.05)
    return {"reply": {"text": "awake"}}


def dice(state: dict[str, object], input: JsonValue) -> JsonObject:
    return {"reply": {"text": uuid.uuid4().hex}}
