"""examples/langgraph_research.py: the distributed run gives LangGraph's own answer, and
the script runs as documented (embedded, no server)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from examples import langgraph_research
from hypha_celery import Hypha
from tests.runtime.support import embedded

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def hypha(sqlite_url: str) -> Iterator[Hypha]:
    h = embedded(sqlite_url)
    try:
        yield h
    finally:
        h.close()


def test_the_distributed_run_gives_langgraph_s_own_values(hypha: Hypha) -> None:
    graph = langgraph_research.app(hypha)
    ours = langgraph_research.run(graph, "queues")
    theirs = langgraph_research.builder().compile().invoke({"topic": "queues", "notes": []})
    assert ours == theirs
    assert ours["report"].startswith("4 notes: glossary of queues; note on queues: ")


def test_the_superstep_of_glossary_and_the_sends_is_one_chord(hypha: Hypha) -> None:
    graph = langgraph_research.app(hypha)
    langgraph_research.run(graph, "queues", thread="t-chord")
    run_id = hypha.store.list_runs(limit=1)[0].run_id
    kinds = [e.kind for e in hypha.store.events(run_id)]
    assert kinds.count("node.reducer.completed") == 1  # __join__: the chord's callback


def test_the_script_prints_the_report(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYPHA_")}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "langgraph_research.py"),
                          "queues"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.startswith("4 notes: glossary of queues; note on queues: failure")
    assert (tmp_path / ".hypha" / "hypha.db").exists()  # the embedded default
