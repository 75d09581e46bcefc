"""Inputs the fuzzers (tests/fuzz) found that raised an untyped error; each now gets a
typed one."""

from __future__ import annotations

from pathlib import Path

import pytest

from hypha_celery.errors import MalformedLine
from hypha_celery.exchange import read_file
from hypha_celery.exchange.signing import is_signed


def test_a_first_line_that_is_not_utf8_is_a_malformed_line(tmp_path: Path) -> None:
    """``read_file`` asked ``is_signed`` about the raw first line, which decoded it as
    UTF-8 and raised UnicodeDecodeError."""
    assert is_signed(b"\x80") is False
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\x80\n")
    for key, verify in ((None, False), (b"k" * 16, False)):
        with pytest.raises(MalformedLine, match=rf"{path}:1: not a hypha event"):
            read_file(str(path), key=key, verify=verify)
