"""The fuzzers' budget and shared inputs.

Every fuzz test takes its settings from :func:`budget`: a fixed number of examples per
target (chosen so the whole ``tests/fuzz`` package stays near a minute on a 2-core CI
machine), derandomized (the same examples on every CI run), a per-example deadline (the
"no hang past a bound" check; pytest-timeout ends a true hang) and no example database
(nothing is written under ``.hypothesis/``).

By hand, longer::

    HYPHA_FUZZ_PROFILE=long ./dev test tests/fuzz -q          # 50x the examples, random
    HYPHA_FUZZ_EXAMPLES=20000 ./dev test tests/fuzz -q -k guard   # an exact count per target
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import settings

from hypha_celery import Event, Hypha, Settings
from hypha_celery.demo import run_demo
from hypha_celery.exchange import write_jsonl

#: The profile the fuzz targets use: ``ci`` (default) or ``long``.
PROFILE = os.environ.get("HYPHA_FUZZ_PROFILE", "ci")
#: How many times the CI budget a ``long`` run uses per target.
LONG_FACTOR = 50

_COMMON = dict(
    database=None,  # never .hypothesis/ in the tree
    deadline=timedelta(seconds=5),  # per example: a slow input is a finding
    print_blob=True,  # a failure prints @reproduce_failure
)
settings.register_profile("hypha-fuzz-ci", derandomize=True, **_COMMON)
settings.register_profile("hypha-fuzz-long", derandomize=False, **_COMMON)
if PROFILE not in ("ci", "long"):
    raise pytest.UsageError(f"HYPHA_FUZZ_PROFILE is ci or long, not {PROFILE!r}")


def budget(examples: int, **overrides: object) -> settings:
    """The settings of one fuzz target that runs ``examples`` examples in CI
    (``long``: ``LONG_FACTOR`` times as many; ``HYPHA_FUZZ_EXAMPLES``: exactly that)."""
    if os.environ.get("HYPHA_FUZZ_EXAMPLES"):
        examples = int(os.environ["HYPHA_FUZZ_EXAMPLES"])
    elif PROFILE == "long":
        examples *= LONG_FACTOR
    return settings(settings.get_profile(f"hypha-fuzz-{PROFILE}"), max_examples=examples,
                    **overrides)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Export:
    """A real run's events and its JSONL export, unsigned and signed with ``key``."""

    events: list[Event]
    lines: list[str]  # unsigned, each with its newline
    signed: list[str]
    key: bytes


KEY = b"fuzzing-key-0123456789"


@pytest.fixture(scope="session")
def export(tmp_path_factory: pytest.TempPathFactory) -> Export:
    """One run of the demo graph on the embedded runtime, exported."""
    url = f"sqlite:///{tmp_path_factory.mktemp('fuzz-demo') / 'hypha.db'}"
    hypha = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                           store_url=url, embedded=True))
    try:
        run, _ = run_demo(hypha)
        events = run.events()
    finally:
        hypha.close()
    plain, signed = io.StringIO(), io.StringIO()
    write_jsonl(events, plain)
    write_jsonl(events, signed, key=KEY)
    return Export(events, plain.getvalue().splitlines(keepends=True),
                  signed.getvalue().splitlines(keepends=True), KEY)


@pytest.fixture(scope="session")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory for the files the fuzzers write (one session-wide)."""
    return tmp_path_factory.mktemp("fuzz")
