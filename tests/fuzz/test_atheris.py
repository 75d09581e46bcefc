"""The atheris (coverage-guided, libFuzzer) harnesses, each a fixed number of runs in a
subprocess (``atheris.Fuzz`` never returns): exit code 0 means no crash. The JSONL one
starts from the session's real export (signed and unsigned). Where atheris is not
installed (it is in the ``dev`` extra: Linux x86-64 wheels) they skip locally and fail
under CI=true (``tests.services.unavailable``)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import services
from tests.fuzz.conftest import LONG_FACTOR, PROFILE, Export


@pytest.fixture(autouse=True)
def _atheris() -> None:
    if importlib.util.find_spec("atheris") is None:
        services.unavailable("atheris (the dev extra, Linux x86-64)")

ROOT = Path(__file__).parents[2]


def _fuzz(module: str, runs: int, tmp_path: Path, *corpus: Path) -> None:
    if PROFILE == "long":
        runs *= LONG_FACTOR
    if os.environ.get("HYPHA_FUZZ_EXAMPLES"):
        runs = int(os.environ["HYPHA_FUZZ_EXAMPLES"])
    done = subprocess.run(
        [sys.executable, "-m", module, f"-runs={runs}", "-seed=1",
         f"-artifact_prefix={tmp_path}/", "-max_len=65536", *map(str, corpus)],
        cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-4000:]
    assert f"Done {runs} runs" in done.stderr, done.stderr[-2000:]


def test_guard_parser(tmp_path: Path) -> None:
    _fuzz("tests.fuzz.atheris_guards", 10_000, tmp_path)


def test_jsonl_import(tmp_path: Path, export: Export) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "plain.jsonl").write_text("".join(export.lines))
    (corpus / "signed.jsonl").write_text("".join(export.signed))
    _fuzz("tests.fuzz.atheris_jsonl", 3_000, tmp_path, corpus)
