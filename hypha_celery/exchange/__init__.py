"""Runs in and out of the store as JSONL: one sealed event envelope per line.

``export_jsonl`` / ``write_jsonl`` write; ``read_file`` / ``parse_jsonl`` read and check a
whole input (a bad line imports nothing); ``import_parsed`` writes it in one transaction.
What a line is and what is checked: :mod:`hypha_celery.exchange.jsonl`.
"""

from hypha_celery.exchange.jsonl import (
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

__all__ = ["MAX_LINE_BYTES", "Parsed", "dump_line", "export_jsonl", "import_parsed",
           "parse_jsonl", "read_file", "read_jsonl", "write_jsonl"]
