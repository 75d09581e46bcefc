"""Runs in and out of the store as JSONL: one sealed event envelope per line.

``export_jsonl`` / ``write_jsonl`` write; ``read_file`` / ``parse_jsonl`` read and check a
whole input (a bad line imports nothing); ``import_parsed`` writes it in one transaction;
``import_file`` does both (on PostgreSQL, the write overlapping the read; the same outcome).
A line is the envelope's canonical JSON with ``"checksum":"sha256:<hex>"`` last; every
run's events must be numbered 1..n, start with ``run.created`` and fold into a
projection. A signed export (``key=export_key()``, the key of ``$HYPHA_EXPORT_KEY``) adds
an HMAC-SHA-256 per line bound to the file and the line's position, a signed header and
a trailer; see docs/security.md.
"""

from hypha_celery.exchange._jsonl import (
    MAX_LINE_BYTES,
    Parsed,
    dump_line,
    export_jsonl,
    import_parsed,
    parse_jsonl,
    read_file,
    read_jsonl,
    write_jsonl,
)
from hypha_celery.exchange._signing import KEY_ENV, export_key
from hypha_celery.exchange._stream import import_file

__all__ = [
    # exporting
    "dump_line",
    "export_jsonl",
    "write_jsonl",
    # importing
    "MAX_LINE_BYTES",
    "Parsed",
    "import_file",
    "import_parsed",
    "parse_jsonl",
    "read_file",
    "read_jsonl",
    # signing
    "KEY_ENV",
    "export_key",
]
