"""Coverage-guided fuzzing of the guard parser with atheris (libFuzzer)::

    python -m tests.fuzz.atheris_guards -runs=20000          # a fixed count (CI)
    python -m tests.fuzz.atheris_guards -max_total_time=600  # by hand

Every input is parsed as a guard: a :class:`Guard` that evaluates to a bool, or a
:class:`GuardError`; anything else is a crash (libFuzzer prints it and exits non-zero).
Only :mod:`hypha_celery.guards` is instrumented (its dependencies are imported first).
"""

from __future__ import annotations

import sys

import atheris

import hypha_celery.errors  # noqa: F401  (not instrumented)

with atheris.instrument_imports(include=["hypha_celery.guards"]):
    from hypha_celery.guards import parse

from hypha_celery.errors import GuardError

SCOPE = {"input": {"a": [1, "x", None], "b": {"c": 2.5}}, "variables": {"a": "ship it"},
         "metadata": {"x": True}}


def one(data: bytes) -> None:
    text = atheris.FuzzedDataProvider(data).ConsumeUnicode(1100)
    try:
        guard = parse(text)
    except GuardError:
        return
    assert isinstance(guard.evaluate(SCOPE), bool)
    assert isinstance(guard.evaluate({}), bool)


def main() -> None:
    atheris.Setup(sys.argv, one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
