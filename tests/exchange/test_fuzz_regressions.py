"""Inputs the fuzzers (tests/fuzz) found that raised an untyped error; each now gets a
typed one."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from hypha_celery import Event
from hypha_celery.errors import MalformedLine, SignatureMismatch
from hypha_celery.exchange import read_file, write_jsonl
from hypha_celery.exchange._signing import is_signed


def test_a_first_line_that_is_not_utf8_is_a_malformed_line(tmp_path: Path) -> None:
    """``read_file`` asked ``is_signed`` about the raw first line, which decoded it as
    UTF-8 and raised UnicodeDecodeError."""
    assert is_signed(b"\x80") is False
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\x80\n")
    for key in (None, b"k" * 16):  # with a key, an unsigned file needs allow_unsigned
        with pytest.raises(MalformedLine, match=rf"{path}:1: not a hypha event"):
            read_file(str(path), key=key, allow_unsigned=True)


@pytest.mark.parametrize("where", ["header", "trailer"])
def test_a_signed_line_whose_mac_is_not_ascii_is_a_signature_mismatch(
        tmp_path: Path, where: str) -> None:
    """``hmac.compare_digest`` raised TypeError on the non-ASCII ``mac`` of a changed
    header or trailer."""
    key = b"a-key-of-at-least-16"
    event = Event(run_id="r1", seq=1, type="run.created", timestamp=1.0,
                  payload={"graph_id": "g"})
    out = io.StringIO()
    write_jsonl([event], out, key=key)
    lines = out.getvalue().splitlines(keepends=True)
    at = 0 if where == "header" else -1
    lines[at] = lines[at].replace('"mac":"', '"mac":"\u00e9')
    path = tmp_path / "signed.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(SignatureMismatch, match="signature does not match"):
        read_file(str(path), key=key, verify=True)


def test_a_signed_header_whose_nonce_is_not_ascii_is_a_signature_mismatch(
        tmp_path: Path) -> None:
    """A nonce holding a lone surrogate (``"\\ud800"`` in JSON) raised UnicodeEncodeError
    when the verifier keyed its MAC with it."""
    key = b"a-key-of-at-least-16"
    event = Event(run_id="r1", seq=1, type="run.created", timestamp=1.0,
                  payload={"graph_id": "g"})
    out = io.StringIO()
    write_jsonl([event], out, key=key)
    lines = out.getvalue().splitlines(keepends=True)
    header = json.loads(lines[0])
    header["nonce"] = "\ud800"
    lines[0] = json.dumps(header, separators=(",", ":")) + "\n"
    path = tmp_path / "signed.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(SignatureMismatch, match="1: not a signed export's header"):
        read_file(str(path), key=key, verify=True)
