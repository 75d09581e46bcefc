"""``hypha events RUN --follow`` interleaves the run's live items with its stored events,
prints text deltas on one line, and still works without a live bus."""

from __future__ import annotations

import queue
import subprocess
import threading
from pathlib import Path

import click

from hypha_celery import Graph, Hypha, Settings
from hypha_celery.cli.follow import LiveLines, follow
from hypha_celery.events import new_view
from hypha_celery.live import MemoryLiveBus, end_item, run_topic
from hypha_celery.runtime import lifecycle
from hypha_celery.store import EventStore
from tests.cli.helpers import HYPHA, ROOT, clean_env
from tests.live.test_stream import TOKENS, once
from tests.runtime.support import WAIT


def test_follow_yields_live_items_between_polls_in_arrival_order(tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path / 'f.db'}")
    bus = MemoryLiveBus()
    with store.transaction() as tx:
        tx.create(new_view("r"))
        lifecycle.record(tx, "r", "run.created", {"graph_id": "g"})

    def later() -> None:
        with store.transaction() as tx:
            tx.lock("r")
            lifecycle.record(tx, "r", "run.started", {"execution_id": "r.0"})
            lifecycle.record(tx, "r", "run.cancelled", {"reason": "cancelled"})
        bus.publish(run_topic("r"), end_item(status="cancelled", reason="cancelled"))

    try:
        with bus.subscribe(run_topic("r")) as live:
            for item in TOKENS:
                bus.publish(run_topic("r"), item)
            timer = threading.Timer(0.1, later)
            timer.start()
            seen = [getattr(e, "kind", None) or e["kind"]  # type: ignore[index]
                    for e in follow(store, "r", poll=0.01, timeout=WAIT, live=live)]
            timer.join()
    finally:
        store.dispose()
    assert seen[:5] == ["run.created", "text", "text", "tool_use", "usage"]
    assert seen[-2:] == ["run.started", "run.cancelled"]
    assert set(seen[5:-2]) <= {"end"}  # the end item may come before the last poll


def test_live_lines_keep_text_on_one_line() -> None:
    out: list[str] = []

    def echo(text: str = "", nl: bool = True) -> None:
        out.append(text + ("\n" if nl else ""))

    lines = LiveLines(echo)
    for item in [*TOKENS, {"kind": "text", "text": "again"}, {"kind": "gap", "lost": 3}]:
        lines.item(item)
    lines.close_line()
    assert "".join(out) == ("    > Hello\n"
                            "    ~ tool_use id=call_1 name=kb_search\n"
                            "    ~ usage input=12 output=2\n"
                            "    > again\n"
                            "    ~ gap lost=3\n")
    assert click.unstyle("".join(out)) == "".join(out)


def test_the_command_prints_tokens_while_the_run_goes_on(redis_url: str, tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'cli.db'}"
    settings = Settings(broker_url=redis_url, result_backend=redis_url, store_url=store_url,
                        embedded=False)
    hypha = Hypha(settings)
    lines: queue.Queue[str] = queue.Queue()
    try:
        hypha.register(Graph("idle", {"n": lambda s, i: {}}, once("n")))
        run = hypha.start("idle")  # no worker: running until cancelled
        with subprocess.Popen(
                [HYPHA, "events", run.id, "--follow"], cwd=ROOT, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, text=True, env=clean_env(
                    HYPHA_BROKER_URL=redis_url, HYPHA_STORE_URL=store_url, NO_COLOR="1")
        ) as proc:
            assert proc.stdout is not None
            out = proc.stdout

            def read() -> None:
                for line in out:
                    lines.put(line)

            reader = threading.Thread(target=read, daemon=True)
            reader.start()
            first = lines.get(timeout=30)  # subscribed before its first read: printed after
            assert "run.created" in first
            for item in TOKENS:
                hypha.live.publish(run_topic(run.id), item)
            seen = [lines.get(timeout=WAIT)]
            while "> Hello" not in seen[-1]:
                seen.append(lines.get(timeout=WAIT))
            run.cancel()
            assert proc.wait(30) == 0
            reader.join(5)
    finally:
        hypha.close()
    rest = []
    while not lines.empty():
        rest.append(lines.get())
    printed = "".join([first, *seen, *rest])
    assert "~ tool_use id=call_1 name=kb_search" in printed and "run.cancelled" in printed


def test_hypha_agents_stream_prints_a_turn_until_it_ends(redis_url: str, tmp_path: Path) -> None:
    from hypha_celery.backends import MockBackend
    from hypha_celery.live import agent_topic
    from tests.live.test_stream import Quiet

    store_url = f"sqlite:///{tmp_path / 'agents.db'}"
    hypha = Hypha(Settings(broker_url=redis_url, result_backend=redis_url, store_url=store_url,
                           embedded=False))
    try:
        hypha.agents.start(Quiet, name="streamer", backend=MockBackend)  # no worker needed
        with subprocess.Popen(
                [HYPHA, "agents", "stream", "streamer", "--timeout", "30"], cwd=ROOT,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=clean_env(
                    HYPHA_BROKER_URL=redis_url, HYPHA_STORE_URL=store_url, NO_COLOR="1"),
        ) as proc:
            assert proc.stdout is not None
            first = ""
            out = proc.stdout
            lines: queue.Queue[str] = queue.Queue()

            def read() -> None:
                for line in out:
                    lines.put(line)

            reader = threading.Thread(target=read, daemon=True)
            reader.start()
            while not first:  # it prints nothing before it subscribed: ping until it shows
                hypha.live.publish(agent_topic("streamer"), {"kind": "usage", "ping": 1})
                try:
                    first = lines.get(timeout=0.2)
                except queue.Empty:
                    assert proc.poll() is None
            items: list[dict[str, object]] = [
                {"kind": "text", "text": "Hel"}, {"kind": "text", "text": "lo"},
                {"kind": "end", "ref": "r-1", "attempt": 1, "reason": None}]
            for item in items:
                hypha.live.publish(agent_topic("streamer"), item)
            assert proc.wait(30) == 0
            reader.join(5)
    finally:
        hypha.close()
    rest = []
    while not lines.empty():
        rest.append(lines.get())
    assert first == "~ usage ping=1\n"
    assert [x for x in rest if x != first][-2:] == ["> Hello\n", "~ end ref=r-1 attempt=1\n"]
