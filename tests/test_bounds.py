"""The bounds at the entry points (docs/security.md, "Bounds at the entry points"): a
value past its bound is a typed error at the call and nothing of it is written."""

from __future__ import annotations

import importlib
import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hypha_celery import (
    Context,
    Finish,
    Graph,
    Hypha,
    InputTooLarge,
    Next,
    NotRedrivable,
    TooLarge,
)
from hypha_celery.agents import Agent, NoReply
from hypha_celery.backends import MockBackend
from hypha_celery.errors import InvalidFixture, MalformedLine, RunFailed
from hypha_celery.exchange import MAX_LINE_BYTES, read_file
from hypha_celery.replay import _store as fixtures
from tests.runtime.support import WAIT, embedded


class Quiet(Agent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": []}, {}

    def handle_response(self, ref: str, response: Any, state: Any) -> NoReply:
        return NoReply(state)


def _graph() -> Graph:
    def work(state: dict[str, Any], inp: Any) -> dict[str, Any]:
        return {"blob": "x" * inp}

    def policy(ctx: Context) -> Next | Finish:
        return Next("work", ctx.input) if ctx.step == 0 else Finish(len(ctx.state["blob"]))

    return Graph(id="blob", nodes={"work": work}, decision_policy=policy,
                 max_state_bytes=10_000)


@pytest.fixture
def hypha(sqlite_url: str) -> Iterator[Hypha]:
    h = embedded(sqlite_url)
    h.register(_graph())
    yield h
    h.close()


def test_a_node_output_past_the_state_bound_fails_at_the_node(hypha: Hypha) -> None:
    assert hypha.start("blob", 100).wait(WAIT) == 100
    run = hypha.start("blob", 20_000)
    with pytest.raises(RunFailed) as failed:
        run.wait(WAIT)
    assert failed.value.reason == "node_failed"
    errors = [e.data["error"]["type"] for e in run.events()
              if e.kind == "node.execution.failed"]
    assert errors == ["NodeOutputTooLarge"]
    assert all("x" * 10_001 not in json.dumps(e.data) for e in run.events())


def test_a_run_input_past_its_bound_records_nothing(hypha: Hypha) -> None:
    before = hypha.store.run_ids(limit=1000)
    with pytest.raises(InputTooLarge) as err:
        hypha.start("blob", "x" * (hypha.settings.max_input_bytes + 1))
    assert isinstance(err.value, TooLarge) and err.value.what == "run input"
    assert hypha.store.run_ids(limit=1000) == before


def test_an_agent_prompt_or_notification_past_its_queue_bound(hypha: Hypha) -> None:
    name = f"q-{uuid.uuid4().hex[:6]}"
    hypha.agents.start(Quiet, name=name, backend=MockBackend,
                       max_pending_prompt_bytes=1000, max_pending_notification_bytes=1000)
    for call in (lambda: hypha.agents.tell(name, "x" * 1001),
                 lambda: hypha.agents.ask(name, "é" * 501, timeout=1),
                 lambda: hypha.agents.notify(name, {"x": "y" * 1000}),
                 lambda: hypha.agents.notify_ack(name, {"x": "y" * 1000})):
        with pytest.raises(TooLarge) as err:
            call()
        assert err.value.limit == 1000 and "max_pending_" in err.value.bound
    snap = hypha.agents.runtime_snapshot(name)
    assert (snap["phase"], snap["pending_prompts"], snap["pending_notifications"]) == (
        "idle", 0, 0)
    hypha.agents.stop(name)


def test_a_jsonl_line_past_the_bound_is_refused_as_it_is_read(tmp_path: Path) -> None:
    big = tmp_path / "big.jsonl"
    with big.open("wb") as out:
        out.write(b"\n")
        out.write(b"x" * (MAX_LINE_BYTES + 1))
    with pytest.raises(MalformedLine) as err:
        read_file(str(big))
    assert str(err.value).startswith(f"{big}:2: line longer than {MAX_LINE_BYTES} bytes")


def test_a_fixture_past_the_bound_is_refused_before_it_is_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fixtures, "MAX_FIXTURE_BYTES", 10)
    path = tmp_path / "f.json"
    path.write_text("{" + " " * 20 + "}")
    with pytest.raises(InvalidFixture, match="larger than 10 bytes"):
        fixtures.read_fixture(path)


def test_every_constant_the_bounds_table_names_is_in_its_public_package() -> None:
    """docs/security.md's table names a bound's constant as ``package.NAME``: the public
    package exports it (an implementation module is no address for users)."""
    doc = (Path(__file__).parent.parent / "docs" / "security.md").read_text()
    table = doc.split("## Bounds at the entry points", 1)[1].split("\n## ", 1)[0]
    named = re.findall(r"`([a-z_.]+)\.([A-Z][A-Z0-9_]+)`", table)
    assert len(named) >= 4, named
    for where, name in named:
        assert "." not in where, f"{where}.{name}: name it from its package"
        package = importlib.import_module(f"hypha_celery.{where}")
        assert name in package.__all__, f"hypha_celery.{where} does not export {name}"


@pytest.mark.parametrize("reason", ["message_too_large", "bad_signature", "unsigned"])
def test_a_message_refused_unread_cannot_be_redriven(hypha: Hypha, reason: str) -> None:
    letter = hypha.store.add_dead_letter({
        "run_id": None, "execution_id": "x", "task": "hypha.coordinator", "queue": None,
        "args": {"raw": "[[{"}, "reason": reason, "error_class": "validation",
        "error": {"message": "x"}, "attempts": 1, "status": "open", "created_at": 0.0})
    with pytest.raises(NotRedrivable, match="refused unread"):
        hypha.redrive(letter)
    assert hypha.store.dead_letter(letter)["status"] == "open"
