"""Coverage-guided fuzzing of the JSONL import with atheris (libFuzzer)::

    python -m tests.fuzz.atheris_jsonl -runs=5000 [CORPUS_DIR]          # CI: a fixed count
    python -m tests.fuzz.atheris_jsonl -max_total_time=600 CORPUS_DIR    # by hand

Each input is a JSONL file's bytes: parsed as an unsigned export (``parse_jsonl``) and
verified as a signed one (``Verifier``); each must give events or an
``ImportFormatError``; anything else is a crash. Seed ``CORPUS_DIR`` with a real export
(``hypha export``, signed and unsigned, with ``HYPHA_EXPORT_KEY`` set to
``KEY`` below) so the fuzzer starts from lines whose checksums match.
Only :mod:`hypha_celery.exchange` is instrumented.
"""

from __future__ import annotations

import contextlib
import sys

import atheris

import hypha_celery.events  # not instrumented
import hypha_celery.store  # noqa: F401

with atheris.instrument_imports(include=["hypha_celery.exchange"]):
    from hypha_celery.exchange import parse_jsonl
    from hypha_celery.exchange._signing import Verifier, is_signed, unsigned

from hypha_celery.errors import ImportFormatError

KEY = b"fuzzing-key-0123456789"


def one(data: bytes) -> None:
    lines = data.splitlines(keepends=True)
    if not lines:
        return
    if is_signed(lines[0]):
        for source in (Verifier(KEY, "f").lines(lines), unsigned(lines[1:])):
            with contextlib.suppress(ImportFormatError):
                parse_jsonl(source, "f", first_lineno=2)
        return
    with contextlib.suppress(ImportFormatError):
        parse_jsonl(lines, "f")


def main() -> None:
    atheris.Setup(sys.argv, one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
