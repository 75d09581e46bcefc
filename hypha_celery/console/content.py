"""How the console shows run content (input, state, node output, model output).

Off (the default) it shows a value's shape only -- its type, its keys and its size in
JSON bytes -- never the value. On (``HYPHA_CONSOLE_SHOW_CONTENT=1``) it shows the
value as JSON, cut at :data:`MAX_SHOWN_BYTES`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_SHOWN_BYTES", "Shown", "shown"]

#: Bytes of JSON shown of one value at most (the rest is cut, and says so).
MAX_SHOWN_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Shown:
    """A value as a page shows it: ``text`` is JSON (content on) or its shape."""

    text: str
    size: int
    content: bool


def _size(value: Any) -> int:
    return len(json.dumps(value, default=str, ensure_ascii=False).encode())


def _shape(value: Any) -> str:
    if isinstance(value, dict):
        keys = ", ".join(str(k) for k in list(value)[:20])
        more = f" (+{len(value) - 20})" if len(value) > 20 else ""
        return f"object {{{keys}{more}}}"
    if isinstance(value, list):
        return f"array of {len(value)}"
    return "null" if value is None else type(value).__name__


def shown(value: Any, content: bool) -> Shown:
    """``value`` as the page may show it."""
    size = _size(value)
    if not content:
        return Shown(f"{_shape(value)}, {size:,} bytes", size, False)
    text = json.dumps(value, default=str, ensure_ascii=False, indent=2)
    if len(text) > MAX_SHOWN_BYTES:
        text = text[:MAX_SHOWN_BYTES] + f"\n… cut at {MAX_SHOWN_BYTES:,} of {size:,} bytes"
    return Shown(text, size, True)
