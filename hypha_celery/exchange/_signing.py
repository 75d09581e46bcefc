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
from typing import Any, NoReturn

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
_MAC_HEAD_B = _MAC_HEAD.encode()
_TRAILER_HEAD = b'{"' + _TRAILER.encode() + b'"'


_IPAD = bytes(x ^ 0x36 for x in range(256))
_OPAD = bytes(x ^ 0x5C for x in range(256))


class _Mac:
    """HMAC-SHA-256 (RFC 2104) of ``nonce:`` + a message: the key's padded states and the
    nonce are hashed once per file, so a line costs two state copies (``hmac.digest``
    keys afresh per call: twice the time of what a line costs here)."""

    def __init__(self, key: bytes, nonce: str) -> None:
        if len(key) > 64:
            key = hashlib.sha256(key).digest()
        padded = key.ljust(64, b"\0")
        self._inner = hashlib.sha256(padded.translate(_IPAD))
        self._inner.update(nonce.encode() + b":")
        self._outer = hashlib.sha256(padded.translate(_OPAD))

    def states(self) -> tuple[Any, Any]:
        """The inner (nonce included) and outer hash states, to copy per message."""
        return self._inner, self._outer

    def hex(self, *parts: bytes) -> str:
        inner = self._inner.copy()
        for part in parts:
            inner.update(part)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.hexdigest()


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
    """Whether ``first_line`` is a signed export's header (a line that is not UTF-8 is
    not: the parser then refuses it)."""
    try:
        text = first_line.decode() if isinstance(first_line, bytes) else first_line
    except UnicodeDecodeError:
        return False
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
        self._mac = _Mac(key, self._nonce)
        self._position = 0

    def header(self) -> str:
        body = {_HEADER: 1, "alg": _ALG, "key_id": key_id(self._key), "nonce": self._nonce}
        return _with_mac(body, self._mac.hex(_canonical(body).encode()))

    def line(self, text: str) -> str:
        """``text`` (one export line, no newline) with its ``mac`` member."""
        self._position += 1
        mac = self._mac.hex(b"%d:" % self._position, text.encode())
        return f'{text[:-1]}{_MAC_HEAD}{mac}"}}'

    def trailer(self, runs: int) -> str:
        body = {_TRAILER: 1, "lines": self._position, "runs": runs}
        return _with_mac(body, self._mac.hex(_canonical(body).encode()))


class Verifier:
    """Checks a signed export as it is read (``source`` names it in errors):
    :meth:`lines` yields each event line without its ``mac`` for the ordinary parser and
    raises :class:`SignatureMismatch` naming the first line that fails."""

    def __init__(self, key: bytes, source: str) -> None:
        self._key = key
        self._source = source
        self._mac = _Mac(key, "")

    def lines(self, raw: Iterable[str | bytes]) -> Iterator[bytes]:
        numbered = enumerate(raw, 1)
        for _, line in numbered:
            self._header(_data(line))
            break
        else:
            self._fail(1, "no signed header")
        lineno = position = 1
        inner, outer = self._mac.states()
        for lineno, line in numbered:  # the hot path, inline
            data = _data(line)
            if data.startswith(_TRAILER_HEAD):
                self._trailer(data, lineno, position - 1)
                self._nothing_after(numbered)
                return
            plain = _without_mac(data)
            if plain is None:
                self._fail(lineno, "a line without its signature")
            mac = inner.copy()
            mac.update(b"%d:" % position)
            mac.update(plain)
            check = outer.copy()
            check.update(mac.digest())
            if not hmac.compare_digest(data[-66:-2], check.hexdigest().encode()):
                self._fail(lineno, "signature mismatch: the line was changed, moved or taken "
                                   "from another file")
            position += 1
            yield plain
        self._fail(lineno, "the file ends without its signed trailer (cut short?)")

    def _nothing_after(self, numbered: Iterator[tuple[int, str | bytes]]) -> None:
        for lineno, line in numbered:
            if _data(line).strip():
                self._fail(lineno, "a line after the signed trailer")

    def _header(self, data: bytes) -> None:
        body = self._json(data, 1)
        mac = body.pop("mac", None)
        nonce = body.get("nonce")
        if body.get(_HEADER) != 1 or body.get("alg") != _ALG or not isinstance(
                nonce, str) or not nonce.isascii():  # the signer's is hex
            self._fail(1, "not a signed export's header")
        if body.get("key_id") != key_id(self._key):
            self._fail(1, f"signed with another key (key id {body.get('key_id')!r})")
        self._mac = _Mac(self._key, body["nonce"])
        self._check(mac, _canonical(body).encode(), 1, "the header's signature does not match")

    def _trailer(self, data: bytes, lineno: int, lines: int) -> dict[str, Any]:
        body = self._json(data, lineno)
        mac = body.pop("mac", None)
        self._check(mac, _canonical(body).encode(), lineno,
                    "the trailer's signature does not match")
        if body.get("lines") != lines:
            self._fail(lineno, f"the trailer counts {body.get('lines')} lines, the file has "
                               f"{lines} (lines were removed)")
        return body

    def _check(self, mac: Any, message: bytes, lineno: int, why: str) -> None:
        if not isinstance(mac, str) or not mac.isascii() or not hmac.compare_digest(
                mac, self._mac.hex(message)):  # compare_digest refuses non-ASCII text
            self._fail(lineno, why)

    def _json(self, data: bytes, lineno: int) -> dict[str, Any]:
        try:
            body = json.loads(data)
        except ValueError:
            raise MalformedLine(f"{self._source}:{lineno}: not JSON") from None
        if not isinstance(body, dict):
            raise MalformedLine(f"{self._source}:{lineno}: not a JSON object")
        return body

    def _fail(self, lineno: int, why: str) -> NoReturn:
        raise SignatureMismatch(f"{self._source}:{lineno}: {why}")


def _data(line: str | bytes) -> bytes:
    return (line.encode() if isinstance(line, str) else line).rstrip(b"\r\n")


def _without_mac(data: bytes) -> bytes | None:
    """The line ``data`` without its ``mac`` member; None when it has none."""
    if len(data) <= _MAC_LEN or data[-_MAC_LEN:-66] != _MAC_HEAD_B or data[-2:] != b'"}':
        return None
    return data[:-_MAC_LEN] + b"}"


def unsigned(rest: Iterable[str | bytes]) -> Iterator[bytes]:
    """The event lines of a signed export after its header, their ``mac`` members removed,
    its trailer dropped, nothing verified (for reading one without the key)."""
    for line in rest:
        data = _data(line)
        if not data.startswith(_TRAILER_HEAD):
            plain = _without_mac(data)
            yield data if plain is None else plain


def _canonical(body: dict[str, Any]) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def _with_mac(body: dict[str, Any], mac: str) -> str:
    return _canonical({**body, "mac": mac})
