"""Signed JSONL exports: HMAC-SHA-256 over every line, bound to its file and position.

A line's ``checksum`` (SHA-256 of its canonical JSON) detects accidents only: anyone can
change a line and seal it again. A signed export proves, to whoever holds the key, that
every line is one the exporter wrote, in that file, at that place, and that none is
missing at the end:

* line 1, the **header**: ``{"hypha_signed_export":1,"alg":"HMAC-SHA256","key_id":K,
  "nonce":N,"mac":M}``: a fresh random ``nonce`` names the file; ``key_id`` is the first
  16 hex digits of SHA-256 of the key (which key, never the key);
* every event line is the unsigned export's line with ``,"mac":"<64 hex>"`` before its
  closing brace: the HMAC of ``nonce:position:line`` (``line`` without the member), so a
  changed, re-sealed, moved, or other file's line fails at its line;
* the last line, the **trailer**: ``{"hypha_signed_export_end":1,"lines":L,"runs":R,
  "mac":M}``: the counts, signed, so a file cut short (or one whose trailer was dropped)
  is refused. The counts come last because an export is written as it is read.

The key is bytes from the environment (``HYPHA_EXPORT_KEY``, at least 16 characters) or
given by the caller. Verifying needs the same key; it is symmetric, so it proves origin
only among the holders of the key.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Iterable, Iterator
from typing import Any

from hypha_celery.errors import MalformedLine, SignatureMismatch, SigningKeyMissing

__all__ = ["KEY_ENV", "MIN_KEY_CHARS", "Signer", "Verifier", "export_key", "is_signed",
           "unsigned"]

#: The environment variable ``--sign`` and ``--verify`` read the key from.
KEY_ENV = "HYPHA_EXPORT_KEY"
MIN_KEY_CHARS = 16
_HEADER = "hypha_signed_export"
_TRAILER = "hypha_signed_export_end"
_ALG = "HMAC-SHA256"
_MAC_HEAD = ',"mac":"'
_MAC_LEN = len(_MAC_HEAD) + 64 + 2  # ,"mac":"<hex>"}


def export_key(key: str | bytes | None = None) -> bytes:
    """``key``, else ``$HYPHA_EXPORT_KEY``, as bytes; :class:`SigningKeyMissing` when
    there is none or it is shorter than ``MIN_KEY_CHARS``."""
    found = key if key is not None else os.environ.get(KEY_ENV)
    if not found:
        raise SigningKeyMissing(f"no signing key: set {KEY_ENV} (at least {MIN_KEY_CHARS} "
                                "characters)")
    raw = found.encode() if isinstance(found, str) else found
    if len(raw) < MIN_KEY_CHARS:
        raise SigningKeyMissing(f"the signing key is too short: at least {MIN_KEY_CHARS} "
                                "characters")
    return raw


def key_id(key: bytes) -> str:
    return hashlib.sha256(key).hexdigest()[:16]


def is_signed(first_line: str | bytes) -> bool:
    """Whether ``first_line`` is a signed export's header."""
    text = first_line.decode() if isinstance(first_line, bytes) else first_line
    if f'"{_HEADER}":1' not in text:
        return False
    try:
        body = json.loads(text)
    except ValueError:
        return False
    return isinstance(body, dict) and body.get(_HEADER) == 1


class Signer:
    """Signs the lines of one export: :meth:`header`, then :meth:`line` for each event
    line in order, then :meth:`trailer`."""

    def __init__(self, key: bytes) -> None:
        self._key = key
        self._nonce = secrets.token_hex(16)
        self._position = 0

    def header(self) -> str:
        body = {_HEADER: 1, "alg": _ALG, "key_id": key_id(self._key), "nonce": self._nonce}
        return _with_mac(body, self._mac(_canonical(body)))

    def line(self, text: str) -> str:
        """``text`` (one export line, no newline) with its ``mac`` member."""
        self._position += 1
        return f'{text[:-1]}{_MAC_HEAD}{self._mac(f"{self._position}:{text}")}"}}'

    def trailer(self, runs: int) -> str:
        body = {_TRAILER: 1, "lines": self._position, "runs": runs}
        return _with_mac(body, self._mac(_canonical(body)))

    def _mac(self, message: str) -> str:
        return hmac.digest(self._key, f"{self._nonce}:{message}".encode(), "sha256").hex()


class Verifier:
    """Checks a signed export as it is read (``source`` names it in errors):
    :meth:`lines` yields each event line without its ``mac`` for the ordinary parser and
    raises :class:`SignatureMismatch` naming the first line that fails."""

    def __init__(self, key: bytes, source: str) -> None:
        self._key = key
        self._source = source
        self._nonce = ""

    def lines(self, raw: Iterable[str | bytes]) -> Iterator[str]:
        lineno, position, trailer = 0, 0, None
        for lineno, line in enumerate(raw, 1):
            text = (line.decode() if isinstance(line, bytes) else line).rstrip("\r\n")
            if lineno == 1:
                self._header(text)
                continue
            if trailer is not None:
                if text.strip():
                    self._fail(lineno, "a line after the signed trailer")
                continue
            if text.startswith('{"' + _TRAILER + '"'):
                trailer = self._trailer(text, lineno, position)
                continue
            position += 1
            yield self._line(text, lineno, position)
        if lineno == 0:
            self._fail(1, "no signed header")
        if trailer is None:
            self._fail(lineno, "the file ends without its signed trailer (cut short?)")

    def _header(self, text: str) -> None:
        body = self._json(text, 1)
        mac = body.pop("mac", None)
        if body.get(_HEADER) != 1 or body.get("alg") != _ALG or not isinstance(
                body.get("nonce"), str):
            self._fail(1, "not a signed export's header")
        if body.get("key_id") != key_id(self._key):
            self._fail(1, f"signed with another key (key id {body.get('key_id')!r})")
        self._nonce = body["nonce"]
        if not isinstance(mac, str) or not hmac.compare_digest(
                mac, self._mac(_canonical(body))):
            self._fail(1, "the header's signature does not match")

    def _line(self, text: str, lineno: int, position: int) -> str:
        if len(text) <= _MAC_LEN or text[-_MAC_LEN:-66] != _MAC_HEAD or text[-2:] != '"}':
            self._fail(lineno, "a line without its signature")
        plain = text[:-_MAC_LEN] + "}"
        if not hmac.compare_digest(text[-66:-2], self._mac(f"{position}:{plain}")):
            self._fail(lineno, "signature mismatch: the line was changed, moved or taken "
                               "from another file")
        return plain

    def _trailer(self, text: str, lineno: int, lines: int) -> dict[str, Any]:
        body = self._json(text, lineno)
        mac = body.pop("mac", None)
        if not isinstance(mac, str) or not hmac.compare_digest(
                mac, self._mac(_canonical(body))):
            self._fail(lineno, "the trailer's signature does not match")
        if body.get("lines") != lines:
            self._fail(lineno, f"the trailer counts {body.get('lines')} lines, the file has "
                               f"{lines} (lines were removed)")
        return body

    def _json(self, text: str, lineno: int) -> dict[str, Any]:
        try:
            body = json.loads(text)
        except ValueError:
            raise MalformedLine(f"{self._source}:{lineno}: not JSON") from None
        if not isinstance(body, dict):
            raise MalformedLine(f"{self._source}:{lineno}: not a JSON object")
        return body

    def _mac(self, message: str) -> str:
        return hmac.digest(self._key, f"{self._nonce}:{message}".encode(), "sha256").hex()

    def _fail(self, lineno: int, why: str) -> None:
        raise SignatureMismatch(f"{self._source}:{lineno}: {why}")


def unsigned(rest: Iterable[str | bytes]) -> Iterator[str]:
    """The event lines of a signed export after its header, their ``mac`` members removed,
    its trailer dropped, nothing verified (for reading one without the key)."""
    for line in rest:
        text = (line.decode() if isinstance(line, bytes) else line).rstrip("\r\n")
        if text.startswith('{"' + _TRAILER + '"'):
            continue
        if len(text) > _MAC_LEN and text[-_MAC_LEN:-66] == _MAC_HEAD and text[-2:] == '"}':
            text = text[:-_MAC_LEN] + "}"
        yield text


def _canonical(body: dict[str, Any]) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def _with_mac(body: dict[str, Any], mac: str) -> str:
    return _canonical({**body, "mac": mac})
