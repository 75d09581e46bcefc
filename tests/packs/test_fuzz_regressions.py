"""Pack documents the fuzzers (tests/fuzz) found that raised an untyped error or took
unbounded time; each is now a PackError, at once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hypha_celery.errors import PackError
from hypha_celery.packs import load_pack, parse_pack
from hypha_celery.packs._parse import MAX_DOC_DEPTH, MAX_DOC_VALUES


@pytest.mark.parametrize("name", ["deep.yaml", "deep.json"])
def test_a_deeply_nested_file_is_a_pack_error(tmp_path: Path, name: str) -> None:
    """The YAML and JSON parsers raised RecursionError."""
    file = tmp_path / name
    file.write_text("[" * 20_000 + "]" * 20_000)
    with pytest.raises(PackError, match="nested too deeply"):
        load_pack(file)


def test_a_deeply_nested_document_is_a_pack_error() -> None:
    """``parse_pack`` walked the document recursively (RecursionError)."""
    doc: object = "x"
    for _ in range(5_000):
        doc = [doc]
    with pytest.raises(PackError, match=f"nested deeper than {MAX_DOC_DEPTH} levels"):
        parse_pack({"id": "p", "version": "1", "name": "n", "description": doc})


def test_nested_yaml_aliases_are_refused_at_once(tmp_path: Path) -> None:
    """A billion laughs: 12 levels of ten aliases (700 bytes) expand to 10**12 values;
    checking it took minutes (10 s at 7 levels, 10x a level)."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 12)]
    file = tmp_path / "bomb.yaml"
    file.write_text("\n".join(lines) + "\n")
    began = time.monotonic()
    with pytest.raises(PackError, match=f"more than {MAX_DOC_VALUES} values"):
        load_pack(file)
    assert time.monotonic() - began < 5
