"""``hypha runs``: a table for people and ``--json`` for scripts, every filter, paging
that walks every run once, ``--as-user`` scoping, bad input as one line. Rows are
written straight into the store (the PostgreSQL database is shared: unique ids)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from hypha_celery.store import EventStore
from tests.cli.conftest import DemoRun
from tests.cli.test_commands import invoke, one_line_error
from tests.conftest import migrated
from tests.store.test_runs_list import STATUSES, Spec, World, insert_runs, unique

T0 = 1_700_000_000.0


@pytest.fixture
def store(store_url: str) -> Iterator[EventStore]:
    yield from migrated(store_url)


@pytest.fixture
def world(store: EventStore) -> World:
    g1, g2, u1, u2 = unique("g1"), unique("g2"), unique("u1"), unique("u2")
    specs = [Spec(graph_id=(g1, g2)[i % 2], status=STATUSES[i % 3], user_id=(u1, u2)[i % 2],
                  session_id=("s1", "s2")[i // 6], created_at=T0 + i, updated_at=T0 + i + 100)
             for i in range(12)]
    return World(g1, g2, u1, u2, T0, insert_runs(store, specs), specs)


def runs(store: EventStore, *args: str, user: str | None = None) -> tuple[int, str, str]:
    pre = ("--as-user", user) if user else ()
    result = invoke(*pre, "runs", *args, store_url=store.url)
    return result.exit_code, result.stdout, result.stderr


def json_ids(out: str) -> list[str]:
    return [json.loads(line)["run_id"] for line in out.splitlines()]


def test_table_for_people(store: EventStore, world: World) -> None:
    code, out, err = runs(store, "--graph", world.g1)
    assert code == 0, err
    header, *rows, footer = out.splitlines()
    assert header.split() == ["RUN_ID", "GRAPH", "STATUS", "USER", "SESSION", "EVENTS",
                              "CREATED", "UPDATED"]
    assert [r.split()[0] for r in rows] == world.expected(lambda s: s.graph_id == world.g1)
    first = rows[0].split()
    assert first[1:4] == [world.g1, "failed", world.u1] and first[5] == "3"
    assert first[6:] == ["2023-11-14T22:13:30Z", "2023-11-14T22:15:10Z"]  # T0 + 10, + 110
    assert len({r.index("2023-") for r in [header.replace("CREATED", "2023-"), *rows]}) == 1
    assert footer == "6 runs; no more"


def test_json_lines_are_content_free(store: EventStore, world: World) -> None:
    code, out, _ = runs(store, "--graph", world.g2, "--json")
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert [d["run_id"] for d in lines] == world.expected(lambda s: s.graph_id == world.g2)
    assert set(lines[0]) == {"run_id", "graph_id", "status", "user_id", "session_id", "seq",
                             "created_at", "updated_at", "cursor"}
    assert lines[0]["created_at"] == T0 + 11


@pytest.mark.parametrize(("args", "keep"), [
    (("--status", "failed"), lambda w, s: s.status == "failed"),
    (("--user", "{u2}"), lambda w, s: s.user_id == w.u2),
    (("--user", "{u1}", "--session", "s2"), lambda w, s: s.user_id == w.u1
     and s.session_id == "s2"),
    (("--since", "2023-11-14T22:13:25", "--until", str(T0 + 8)),
     lambda w, s: T0 + 5 <= s.created_at < T0 + 8),
    (("--updated", "--since", str(T0 + 109)), lambda w, s: s.updated_at >= T0 + 109),
    (("--updated", "--until", "2023-11-14T23:15:02+01:00"),
     lambda w, s: s.updated_at < T0 + 102),
])
def test_filters(store: EventStore, world: World, args: tuple[str, ...], keep: object) -> None:
    both = ("--graph", world.g1), ("--graph", world.g2)
    got: list[str] = []
    for graph in both:
        code, out, err = runs(store, *graph, *(a.format(u1=world.u1, u2=world.u2)
                                               for a in args), "--json")
        assert code == 0, err
        got += json_ids(out)
    assert sorted(got) == sorted(world.expected(lambda s: keep(world, s)))  # type: ignore[operator]
    assert got


def test_paging_walks_every_run_once(store: EventStore, world: World) -> None:
    code, out, _ = runs(store, "--user", world.u1, "--limit", "4")
    assert code == 0
    footer = out.splitlines()[-1]
    assert re.fullmatch(rf"next: hypha runs --before \d+ --user {world.u1} --limit 4", footer)
    seen: list[str] = []
    args = ["--user", world.u1, "--limit", "4"]
    while True:
        code, out, err = runs(store, *args, "--json")
        assert code == 0, err
        lines = [json.loads(line) for line in out.splitlines()]
        seen += [d["run_id"] for d in lines]
        if len(lines) < 4:
            break
        args = ["--user", world.u1, "--limit", "4", "--before", lines[-1]["cursor"]]
    assert seen == world.expected(lambda s: s.user_id == world.u1)
    code, out, err = runs(store, "--user", world.u1, "--before", lines[-1]["cursor"])
    assert code == 0 and err.strip() == "no runs before that cursor" and out == ""


def test_as_user_sees_only_its_runs(store: EventStore, world: World) -> None:
    code, out, _ = runs(store, "--graph", world.g1, "--json", user=world.u1)
    assert code == 0 and json_ids(out) == world.expected(
        lambda s: s.graph_id == world.g1 and s.user_id == world.u1)
    code, out, _ = runs(store, "--user", world.u2, "--json", user=world.u1)
    assert code == 0 and out == ""
    code, out, _ = runs(store, "--graph", world.g1, "--limit", "1", user=world.u1)
    assert out.splitlines()[-1].startswith(f"next: hypha --as-user {world.u1} runs --before ")


@pytest.mark.parametrize(("args", "needle"), [
    (("--status", "finished"), "'--status'"),
    (("--before", "abc"), "'--before'"),
    (("--before", "-3"), "'--before'"),
    (("--before", "0"), "'--before'"),
    (("--since", "yesterday"), "'--since'"),
    (("--until", "nan"), "'--until'"),
    (("--limit", "0"), "'--limit'"),
    (("--limit", "1001"), "'--limit'"),
])
def test_bad_input_is_one_line(sqlite_url: str, args: tuple[str, ...], needle: str) -> None:
    result = invoke("runs", *args, store_url=sqlite_url)
    assert needle in one_line_error(result, 2)


def test_the_events_column_counts_a_real_runs_events(demo_run: DemoRun) -> None:
    """A run of the demo's few steps writes many more events: the column says EVENTS and
    holds their count (it said STEP)."""
    result = invoke("runs", "--graph", "support", store_url=demo_run.store_url)
    assert result.exit_code == 0, result.output
    header, *rows, _footer = result.stdout.splitlines()
    column = header.split().index("EVENTS")
    [row] = [r.split() for r in rows if r.startswith(demo_run.run_id)]
    assert row[column] == str(len(demo_run.events)) and len(demo_run.events) > 5
