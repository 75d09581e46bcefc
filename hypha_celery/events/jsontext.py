"""JSON text the fast way: a :class:`json.JSONEncoder` whose C encoder is built once.

``JSONEncoder.encode`` builds its C encoder on every call, which costs as much as
encoding a small payload; the store and the envelope encode millions of them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json.encoder import encode_basestring, encode_basestring_ascii
from typing import Any

__all__ = ["prebuilt"]


def prebuilt(encoder: json.JSONEncoder) -> Callable[[Any], str]:
    """``encoder.encode`` (no ``indent``) with its C encoder built once: the same text.
    There is no check for cycles: a value that contains itself raises ``RecursionError``."""
    try:
        from _json import make_encoder
    except ImportError:  # pragma: no cover - not CPython
        return encoder.encode
    once = make_encoder(None, encoder.default,
                        encode_basestring_ascii if encoder.ensure_ascii else encode_basestring,
                        None, encoder.key_separator, encoder.item_separator,
                        encoder.sort_keys, encoder.skipkeys, encoder.allow_nan)

    def encode(value: Any) -> str:
        return "".join(once(value, 0))

    return encode
