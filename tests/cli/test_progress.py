"""Progress of long work: a counter line on a terminal's stderr (``\\r``, throttled,
erased at the end), nothing when stderr is not a terminal; the library reports through
callbacks (export, the import's read) and prints nothing itself."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

from hypha_celery.cli.progress import Progress, Ticker, read_counts
from hypha_celery.exchange import export_jsonl, read_file
from hypha_celery.store import EventStore
from tests.cli.conftest import DemoRun
from tests.cli.test_commands import invoke


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_nothing_when_not_a_terminal() -> None:
    out, clock = io.StringIO(), Clock()
    with Progress("export", stream=out, clock=clock) as progress:
        clock.now += 10
        progress(1, 2)
        progress.show("x")
    assert out.getvalue() == "" and not progress.enabled


def test_a_terminal_gets_one_line_rewritten_at_most_every_interval() -> None:
    out, clock = Tty(), Clock()
    with Progress("export", stream=out, clock=clock, interval=0.5) as progress:
        progress(1, 10)  # before the first interval: work that short shows nothing
        assert out.getvalue() == ""
        clock.now += 0.5
        progress(1_200, 34_567)
        assert out.getvalue() == "\rexport: 1,200 runs, 34,567 events"
        clock.now += 0.2
        progress(1_300, 40_000)  # too soon
        assert out.getvalue().count("\r") == 1
        clock.now += 0.3
        progress(2, 3)  # shorter: the rest of the longer line is blanked
    text = out.getvalue()
    lines = text.split("\r")
    assert lines[2] == "export: 2 runs, 3 events" + " " * (len(lines[1]) - 24)
    assert text.endswith("\r" + " " * 24 + "\r")  # erased when done (the rest is blank)
    assert "\n" not in text


def test_a_ticker_shows_the_time_while_a_call_runs() -> None:
    out = Tty()
    with Ticker("sweep", stream=out, interval=0.01):
        time.sleep(0.1)
    text = out.getvalue()
    assert "\rsweep: 0." in text and text.endswith("\r")
    quiet = io.StringIO()
    with Ticker("sweep", stream=quiet, interval=0.01):
        time.sleep(0.03)
    assert quiet.getvalue() == ""


def test_read_counts(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(b"x" * 2_000_000)
    assert read_counts(str(path))(1_500, 500_000) == "1,500 lines, 0.5 MB (25%)"
    assert read_counts("-")(3, 1_000) == "3 lines, 0.0 MB"


def test_export_and_read_report_their_progress(demo_run: DemoRun, tmp_path: Path) -> None:
    store = EventStore(demo_run.store_url)
    calls: list[tuple[int, int]] = []
    out = io.StringIO()
    try:
        done = export_jsonl(store, out, progress=lambda r, e: calls.append((r, e)))
    finally:
        store.dispose()
    assert calls[-1] == done == (1, len(demo_run.events))
    path = tmp_path / "export.jsonl"
    path.write_text(out.getvalue())
    read: list[tuple[int, int]] = []
    parsed = read_file(str(path), progress=lambda n, size: read.append((n, size)))
    assert read[-1] == (len(demo_run.events), path.stat().st_size)
    assert len(parsed.events) == len(demo_run.events)


def test_import_json_and_no_progress_without_a_terminal(demo_run: DemoRun,
                                                       tmp_path: Path) -> None:
    path = tmp_path / "export.jsonl"
    exported = invoke("export", "-o", str(path), store_url=demo_run.store_url)
    assert exported.exit_code == 0
    assert exported.stderr == f"exported {len(demo_run.events)} events of 1 runs\n"
    target = f"sqlite:///{tmp_path / 'target.db'}"
    first = invoke("import", str(path), "--json", store_url=target)
    assert first.exit_code == 0 and first.stderr == ""
    assert json.loads(first.stdout) == {"runs": 1, "events": len(demo_run.events),
                                        "present": 0}
    again = invoke("import", str(path), "--json", store_url=target)
    assert json.loads(again.stdout) == {"runs": 0, "events": 0,
                                        "present": len(demo_run.events)}
    plain = invoke("import", str(path), store_url=target)
    assert plain.stdout.startswith("imported 0 runs") and plain.stderr == ""
