"""JSON text the fast way: a :class:`json.JSONEncoder` whose C encoder is built once.

``JSONEncoder.encode`` builds its C encoder on every call, which costs as much as
encoding a small payload; the store and the envelope encode millions of them.

:func:`prebuilt` is the package's one use of a private CPython API,
``_json.make_encoder`` (what ``JSONEncoder.iterencode`` calls). Where it is missing, takes
other arguments or writes other text, ``prebuilt`` returns the public ``encoder.encode``
(the same text, slower); ``tests/events/test_jsontext.py`` fails when CPython changes it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json.encoder import encode_basestring, encode_basestring_ascii
from typing import Any

__all__ = ["prebuilt"]

#: What a built C encoder must write exactly as ``encoder.encode`` does before it is used.
_PROBE = {"b": [1, 2.5, -0.0, True, None, "é\x00\ud800"], "a": {"1": {}, "": []}}


def prebuilt(encoder: json.JSONEncoder) -> Callable[[Any], str]:
    """``encoder.encode`` with its C encoder built once: the same text. There is no check
    for cycles: a value that contains itself raises ``RecursionError``. An encoder with an
    ``indent``, or a Python without the C encoder, gets ``encoder.encode`` itself."""
    if encoder.indent is not None:
        return encoder.encode
    try:
        from _json import make_encoder  # private: see the module docstring
        once = make_encoder(None, encoder.default,
                            encode_basestring_ascii if encoder.ensure_ascii else encode_basestring,
                            None, encoder.key_separator, encoder.item_separator,
                            encoder.sort_keys, encoder.skipkeys, encoder.allow_nan)
    except (ImportError, TypeError):
        return encoder.encode

    def encode(value: Any) -> str:
        return "".join(once(value, 0))

    try:
        same = encode(_PROBE) == encoder.encode(_PROBE)
    except Exception:  # any failure means: not the encoder this was written for
        same = False
    return encode if same else encoder.encode
