"""The projection kept in the append transaction equals the fold of the events,
for real runs of every shape; export / import reproduces both."""

from __future__ import annotations

import contextlib
import io
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hypha_celery import Context, FanOut, Finish, Graph, Hypha, Next, Outcome, RunFailed
from hypha_celery.events import Event
from hypha_celery.exchange import read_jsonl, write_jsonl
from hypha_celery.store import EventStore
from tests import services
from tests.runtime.support import WAIT, of_kind, running, wait_until


@dataclass
class Runs:
    url: str
    ids: dict[str, str]  # shape -> run id


def _graph(gate: threading.Event, entered: threading.Event) -> Graph:
    def work(state: dict[str, Any], inp: Any) -> dict[str, Any]:
        if inp == "boom":
            raise ValueError("boom")
        if inp == "block":
            gate.wait(WAIT)
        if inp == "hold":
            entered.set()
            gate.wait(WAIT)
        return {f"w{len(state)}": inp}

    def merge(state: dict[str, Any], outcomes: list[Outcome]) -> dict[str, Any]:
        return {"merged": [o.value if o.ok else o.error.type for o in outcomes]}  # type: ignore[union-attr]

    def policy(ctx: Context) -> Next | FanOut | Finish:
        plan = ctx.input["plan"]
        if plan == "raise" and ctx.step == 1:
            raise RuntimeError("policy bug")
        if ctx.step < len(plan):
            item = plan[ctx.step]
            if isinstance(item, list):
                return FanOut([Next("work", x) for x in item], reducer="merge")
            return Next("work", item)
        return Finish({"state": ctx.state})

    return Graph(id="shapes", nodes={"work": work}, reducers={"merge": merge},
                 decision_policy=policy, max_steps=4, on_node_error="fail")


def _make_runs(hypha: Hypha) -> dict[str, str]:
    gate, entered = threading.Event(), threading.Event()
    hypha.register(_graph(gate, entered))
    start = hypha.start
    ids: dict[str, Any] = {
        "completed": start("shapes", {"plan": ["a", "b", "c"]}),
        "fanout": start("shapes", {"plan": ["a", ["x", "boom", "y"], "z"]}),
        "node_failed": start("shapes", {"plan": ["a", "boom"]}),
        "policy_error": start("shapes", {"plan": "raise"}),
        "max_steps": start("shapes", {"plan": ["a"] * 10}),
        "lane_first": start("shapes", {"plan": ["block"]}, user_id="u", session_id="s"),
        "lane_queued": start("shapes", {"plan": ["q"]}, user_id="u", session_id="s"),
    }
    ids["cancelled"] = start("shapes", {"plan": ["a", "hold"]})
    assert entered.wait(WAIT)
    assert ids["cancelled"].cancel()
    gate.set()
    for run in ids.values():
        with contextlib.suppress(RunFailed):
            run.wait(WAIT)
    wait_until(lambda: of_kind(ids["cancelled"], "node.execution.late_result"), what="late result")
    return {shape: run.id for shape, run in ids.items()}


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('shapes') / 'hypha.db'}"
    else:
        url = str(request.getfixturevalue("pg_url"))
    with running(url) as hypha:
        ids = _make_runs(hypha)
    return Runs(url, ids)


@pytest.fixture
def source(runs: Runs) -> Iterator[EventStore]:
    store = EventStore(runs.url)
    yield store
    store.dispose()


@pytest.fixture
def target(runs: Runs, tmp_path: Path) -> Iterator[EventStore]:
    """A fresh store of the same backend."""
    if runs.url.startswith("sqlite"):
        store = EventStore(f"sqlite:///{tmp_path / 'target.db'}")
        yield store
        store.dispose()
        return
    with services.postgres_server() as url:
        if url is None:
            services.unavailable("PostgreSQL")
        assert url is not None
        store = EventStore(url)
        yield store
        store.dispose()


EXPECTED_STATUS = {"completed": "completed", "fanout": "completed", "node_failed": "failed",
                   "policy_error": "failed", "max_steps": "failed", "lane_first": "completed",
                   "lane_queued": "completed", "cancelled": "cancelled"}


def test_runs_have_the_intended_shapes(runs: Runs, source: EventStore) -> None:
    views = {shape: source.get(run_id) for shape, run_id in runs.ids.items()}
    assert {s: v["status"] for s, v in views.items()} == EXPECTED_STATUS
    kinds = {s: [e.kind for e in source.events(r)] for s, r in runs.ids.items()}
    assert "node.fanout.scheduled" in kinds["fanout"] and "node.execution.failed" in kinds["fanout"]
    assert "run.queued" in kinds["lane_queued"]
    assert kinds["cancelled"][-1] == "node.execution.late_result"
    assert views["policy_error"]["error"]["reason"] == "policy_error"
    assert views["max_steps"]["error"]["reason"] == "max_steps_exceeded"
    assert views["fanout"]["result"]["state"]["merged"] == [{"w1": "x"}, "ValueError", {"w1": "y"}]


@pytest.mark.parametrize("shape", sorted(EXPECTED_STATUS))
def test_projection_equals_rebuild(runs: Runs, source: EventStore, shape: str) -> None:
    run_id = runs.ids[shape]
    projection = source.get(run_id)
    rebuilt = source.rebuild(run_id)
    assert projection == rebuilt
    assert projection["seq"] == len(source.events(run_id))


def _jsonl(evs: list[Event]) -> list[Event]:
    """Through the JSONL text form, as `hypha export` / `hypha import` do."""
    out = io.StringIO()
    write_jsonl(evs, out)
    return read_jsonl(out.getvalue().splitlines())


def test_export_import_roundtrip(runs: Runs, source: EventStore, target: EventStore) -> None:
    ids = list(runs.ids.values())
    exported = list(source.export(ids))
    assert len(exported) == sum(len(source.events(r)) for r in ids)
    done = target.import_events(_jsonl(exported))
    assert (done.runs, done.events, done.present) == (len(ids), len(exported), 0)
    for run_id in ids:
        assert target.events(run_id) == source.events(run_id)  # idempotency keys included
        assert target.get(run_id) == source.get(run_id)
        assert target.get(run_id) == target.rebuild(run_id)
    assert any(e.idempotency_key for e in target.events(runs.ids["fanout"]))
    assert sorted(target.run_ids()) == sorted(ids)
    assert list(target.export(ids)) == exported


def test_import_twice_is_harmless(runs: Runs, source: EventStore, target: EventStore) -> None:
    exported = list(source.export(list(runs.ids.values())))
    first = target.import_events(exported)
    before = {r: (target.events(r), target.get(r)) for r in runs.ids.values()}
    time.sleep(0.01)
    assert tuple(target.import_events(exported)) == (0, 0, len(exported))
    assert tuple(source.import_events(exported)) == (0, 0, len(exported))
    assert first.runs == len(runs.ids)
    assert {r: (target.events(r), target.get(r)) for r in runs.ids.values()} == before
