"""The GenAgent patterns of examples/agents, each run on an embedded app."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from examples.agents import (
    _app,
    checkpointer,
    debate,
    heartbeat,
    pipeline,
    pool,
    research,
    retry,
    supervisor,
    switchboard,
    watcher,
    workspace,
)
from hypha_celery import Hypha
from hypha_celery.agents import AgentAlreadyStarted, attach, detach
from hypha_celery.backends import MockBackend
from tests.runtime.support import WAIT, embedded, wait_until


@pytest.fixture
def hypha(sqlite_url: str) -> Iterator[Hypha]:
    h = _app.use(embedded(sqlite_url))
    try:
        yield h
    finally:
        h.close()


def test_switchboard_files_answers_and_notes_in_each_inbox(hypha: Hypha) -> None:
    out = switchboard.run(hypha)
    assert out["sessions"] == ["alice", "bob"]
    assert out["answers"] == {"alice": "hello alice", "bob": "hello bob"}
    assert [(e["kind"], e["text"]) for e in out["inbox"]] == [
        ("answer", "hello alice"), ("note", "escalated to a human")]
    assert out["after_close"] == []


def test_research_self_chains_through_its_phases(hypha: Hypha) -> None:
    st = research.run(hypha)
    assert st["phase"] == "done"
    assert st["questions"] == ["Why is the sky blue?", "Why are sunsets red?"]
    assert st["answers"] == ["Rayleigh scattering", "Longer light paths"]
    assert st["report"] == "Short wavelengths scatter most."
    failed = research.run(hypha, name="empty", scripts=[_app.result("  \n")])
    assert (failed["phase"], failed["error"]) == ("failed", "no sub-questions")


def test_debate_peers_notify_each_other_and_both_halt_at_the_cap(hypha: Hypha) -> None:
    out = debate.run(hypha, max_rounds=4)
    expected = [["pro", "pro argument 1"], ["con", "con argument 1"],
                ["pro", "pro argument 2"], ["con", "con argument 2"]]
    for name in ("pro", "con"):
        assert hypha.agents.status(name).halted
        assert out[name]["round"] == 4
        assert out[name]["transcript"] == expected


def test_pipeline_chains_stage_outputs(hypha: Hypha) -> None:
    out = pipeline.run(hypha)
    assert [(s["prompt"], s["output"]) for s in out.values()] == [
        ("Draft: a line about cats", "cats are nice"),
        ("Edit: cats are nice", "Cats are lovely."),
        ("Translate: Cats are lovely.", "Les chats sont adorables.")]
    assert all(s["phase"] == "done" for s in out.values())


def test_pipeline_failure_propagates_to_the_last_stage(hypha: Hypha) -> None:
    out = pipeline.run(hypha, edit_script=MockBackend.error("rate_limited"))
    assert [s["phase"] for s in out.values()] == ["done", "failed", "failed"]
    assert out["translate"]["error"] == "rate_limited"
    assert out["translate"]["prompt"] is None  # the last stage never ran a turn


def test_pipeline_start_rolls_back_the_stages_it_started(hypha: Hypha) -> None:
    stages = [("a", "A", []), ("b", "B", []), ("a", "again", [])]
    with pytest.raises(AgentAlreadyStarted):
        pipeline.start_pipeline(hypha.agents, stages)
    assert hypha.agents.list() == []


def test_supervisor_spawns_workers_from_a_callback_and_fans_in(hypha: Hypha) -> None:
    st = supervisor.run(hypha)
    workers = ["lead-worker-0", "lead-worker-1", "lead-worker-2"]
    assert st["workers"] == workers
    assert st["results"] == {"lead-worker-0": "price ok", "lead-worker-1": "stock ok",
                             "lead-worker-2": "reviews ok"}
    assert (st["phase"], st["summary"]) == ("done", "All three checks passed.")
    assert sorted(hypha.agents.list()) == ["lead", *workers]
    # a worker notifies the lead from handle_response, before its own halt commits
    assert wait_until(lambda: all(hypha.agents.status(w).halted for w in workers))


def test_pool_dispatches_round_robin(hypha: Hypha) -> None:
    out = pool.run(hypha, size=3, jobs=7)
    assert out["assigned"] == ["w-0", "w-1", "w-2", "w-0", "w-1", "w-2", "w-0"]
    assert out["served"] == {"w-0": ["job 0", "job 3", "job 6"], "w-1": ["job 1", "job 4"],
                             "w-2": ["job 2", "job 5"]}
    assert out["results"][6] == "w-0 done 2"


def test_watcher_prompts_only_for_interesting_events(hypha: Hypha) -> None:
    st = watcher.run(hypha)
    assert (st["seen"], st["ignored"]) == (4, 2)
    assert st["alerts"] == ["free some space", "retry the gateway"]


def test_watcher_defers_events_that_arrive_during_a_turn(hypha: Hypha) -> None:
    tag = "watcher-deferral"
    hypha.agents.start(watcher.Watcher, name="w", backend=MockBackend,
                       scripts=[MockBackend.gate(tag, _app.result("one"), timeout=WAIT),
                                _app.result("two")])
    hypha.agents.notify("w", {"level": "error", "msg": "first"})
    assert MockBackend.wait_blocked(tag, WAIT) is not None
    hypha.agents.notify("w", {"level": "info", "msg": "boring"})
    hypha.agents.notify("w", {"level": "error", "msg": "second"})
    snap = hypha.agents.runtime_snapshot("w")
    assert (snap["phase"], snap["pending_notifications"]) == ("processing", 2)
    assert hypha.agents.status("w").agent_state["seen"] == 1
    MockBackend.release(tag)
    st = wait_until(lambda: (s := _app.state("w"))["alerts"] == ["one", "two"] and s)
    assert (st["seen"], st["ignored"]) == (3, 1)


def test_heartbeat_ticks_from_the_beat_task(hypha: Hypha) -> None:
    st = heartbeat.run(hypha)
    assert (st["ticks"], st["summaries"], st["pending"]) == (
        2, ["3 readings, all nominal"], [])
    heartbeat.tick(hypha.agents, "sensor")  # the task's body, called directly
    wait_until(lambda: _app.state("sensor")["ticks"] == 3)
    heartbeat.register_tick(hypha).apply(args=["sensor"])  # the task, run eagerly
    wait_until(lambda: _app.state("sensor")["ticks"] == 4)
    heartbeat.tick(hypha.agents, "nobody")  # a stale beat entry is harmless
    entry = heartbeat.beat_entry("sensor", every=30.0)["heartbeat-sensor"]
    assert entry["task"] == heartbeat.TICK_TASK in hypha.celery.tasks
    assert (entry["schedule"], entry["args"]) == (30.0, ["sensor"])


def test_checkpointer_waits_idle_for_each_review(hypha: Hypha) -> None:
    st = checkpointer.run(hypha)
    assert st["phase"] == "done" and hypha.agents.status("drafter").halted
    assert (st["turns"], st["revisions"]) == (3, 1)
    assert st["approved"] == ["outline v2", "intro v1"]


def test_retry_backs_off_through_tokens_and_caller_owned_keeps_the_ref(hypha: Hypha) -> None:
    out = retry.run(hypha)
    backoff = out["backoff"]
    assert (backoff["phase"], backoff["answer"], backoff["attempts"]) == ("done", "made it", 3)
    assert backoff["errors"] == ["rate_limited", "rate_limited"]
    assert backoff["delays"] == [0.05, 0.1]
    owned = out["owned"]
    assert owned["answer"] == "made it too"
    assert len({ref for ref, _ in owned["starts"]}) == 1
    assert [n for _, n in owned["starts"]] == [1, 2, 3]


def test_retry_ignores_stale_and_cancelled_tokens(hypha: Hypha) -> None:
    turns: list[str] = []

    def on_start(event: Any, measurements: dict[str, Any], meta: dict[str, Any]) -> None:
        if meta["agent"] == "slow":
            turns.append(meta["origin"])

    hypha.agents.start(retry.BackoffAgent, name="slow", backend=MockBackend,
                       scripts=retry.flaky(1, "never needed"), base_delay_s=60.0)
    attach(("turn", "start"), on_start)
    try:
        hypha.agents.tell("slow", "fetch")
        token = wait_until(lambda: _app.state("slow")["token"])
        hypha.agents.notify("slow", {"retry": "not-the-token"})
        hypha.agents.notify("slow", {"cancel_retry": True})
        wait_until(lambda: _app.state("slow")["phase"] == "cancelled")
        assert _app.state("slow")["attempts"] == 1  # "not-the-token" started no turn
        hypha.agents.notify("slow", {"retry": token})  # the timer firing after the cancel
        # queued behind that event: had it re-prompted, this ask would find no script
        assert hypha.agents.ask("slow", "ping", timeout=WAIT).text == "never needed"
    finally:
        detach(("turn", "start"), on_start)
    st = _app.state("slow")
    assert (st["attempts"], st["phase"], turns) == (2, "done", ["tell", "ask"])


def test_workspace_hooks_write_files_and_a_summary(hypha: Hypha, tmp_path: Path) -> None:
    out = workspace.run(hypha, tmp_path)
    assert out["prompts"] == ["Write the plan\n\nFiles in the workspace: none",
                              "Write the notes\n\nFiles in the workspace: turn-1.md"]
    assert out["files"] == ["SUMMARY.md", "turn-1.md", "turn-2.md"]
    assert [t["file"] for t in out["state"]["turns"]] == ["turn-1.md", "turn-2.md"]
    assert (tmp_path / "writer" / "turn-1.md").read_text() == "# Plan\nstep one\n"
    assert out["summary"].startswith("2 turns\n")
    assert hypha.agents.status("writer").halted
