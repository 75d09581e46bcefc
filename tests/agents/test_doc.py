"""The agent doc is typed (``agents/doc.py``) and serialized to exactly the JSON the
previous, dict-based version wrote: the literals below are rows and lane items that version
wrote (captured from its SQLite store), and such rows still load and serve."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hypha_celery import Hypha
from hypha_celery.agents import Agent, Channel, NoReply, Response
from hypha_celery.agents.doc import AgentDoc, Origin, Request, Stage
from hypha_celery.backends import BackendEvent, MockBackend
from hypha_celery.store import agents as table
from tests.runtime.support import wait_until

# Every doc below starts with the same identity and limits, and writes its flags the same.
_HEAD = (
    '{"name":"a","incarnation":"e29d12afece74e7faf5eba831e27bdd4","kind":"__main__:Cap","'
    'backend":"hypha_celery.backends.mock:MockBackend","limits":{"watchdog_ms":600000,"ma'
    'x_tell_results":100,"max_tell_result_bytes":8388608,"max_events_per_turn":1000,"max_'
    'event_bytes_per_turn":1048576,"event_retention":"compact","max_pending_prompts":1000'
    ',"max_pending_prompt_bytes":1048576,"max_pending_notifications":1000,"max_pending_no'
    'tification_bytes":1048576},"state":')
_FLAGS = (',"halted":false,"halt_pending":false,"halting":false,"draining":false,"pre_run":fa'
          'lse,"pump":')
STARTED = _HEAD + '{"n":0}' + _FLAGS + 'null,"current":null,"self_chain":null}'
AFTER_TURN = _HEAD + '{"n":1}' + _FLAGS + 'null,"current":null,"self_chain":null,"owner":null}'
STREAMING = _HEAD + '{"n":1}' + _FLAGS + (
    '"082db098827043e884f7f8320b97050f","current":{"ref":"4c2655000b88489d9a54c06cb04919e5'
    '","origin":"tell","prompt":"two","attempt":1,"bytes":5,"completion":{"channel":"5a4bf'
    '8743f5b4dd7830606d19963ed0e"},"stream_to":{"channel":"5a4bf8743f5b4dd7830606d19963ed0'
    'e"},"on_halt":"fail","stage":"streaming","sent":"two","started_at":1796335550.264162}'
    ',"self_chain":null,"owner":"14e68fa80c5143f6b6fde01b4d2e5c5d"}')
DECIDING_OK = _HEAD + '{"n":4}' + _FLAGS + (
    '"af161b517f384b7e95a6e23b069562f9","current":{"ref":"10553dea8b01463d8bbf626267d7e13e'
    '","origin":"tell","prompt":"block","attempt":1,"bytes":7,"completion":null,"stream_to'
    '":null,"on_halt":"queue","stage":"deciding","sent":"block","started_at":1796335550.36'
    '72194,"sealed":{"ok":{"prompt":"block","text":"block","final_message":"block","events'
    '":[{"kind":"result","data":{"text":"block"},"timestamp_ms":3796158.41999}],"terminal"'
    ':{"kind":"result","data":{"text":"block"},"timestamp_ms":3796158.41999},"event_covera'
    'ge":{"mode":"exact","observed_events":1,"retained_events":1,"omitted_events":0,"retai'
    'ned_bytes":16,"first_omission":null},"usage":null,"duration_ms":0.08595099998638034,"'
    'metadata":{},"session_id":null,"model":null}},"stream_state":{"n":4},"keeps":true},"s'
    'elf_chain":null,"owner":"935cf6c551e14515a71b6b3ba2c2d81c"}')
DECIDING_ERROR = _HEAD + '{"n":5}' + _FLAGS + (
    '"e21a70a0663f419385666aa383a53e71","current":{"ref":"147c204593f346c382e26a424cc29e75'
    '","origin":"tell","prompt":"err","attempt":1,"bytes":5,"completion":null,"stream_to":'
    'null,"on_halt":"queue","stage":"deciding","sent":"err","started_at":1796335550.390593'
    '8,"sealed":{"error":"boom","info":{"backend_error":{"provider":"mock","kind":"boom","r'
    'etryable":false,"status":null,"retry_after":null}},"terminal":null},"stream_state":{"'
    'n":5},"keeps":true},"self_chain":null,"owner":"8a21f4dd655941a38b027678e0d3ea6a"}')
LANE = [
    (
        '{"ref":"66a9c893df5c4b8eb4bacb6ef9478202","origin":"tell","prompt":"three","attempt"'
        ':1,"bytes":7,"completion":null,"stream_to":null,"on_halt":"queue"}'),
    (
        '{"ref":"83d7fcc4c8564570ad34046198df6d53","origin":"ask","prompt":"four","attempt":1'
        ',"bytes":6,"completion":null,"stream_to":null,"on_halt":"queue","caller":"dcc5c1cfc8'
        '144309a410e5a9a2a38c08"}')]
DOCS = [STARTED, AFTER_TURN, STREAMING, DECIDING_OK, DECIDING_ERROR]


def _text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


@pytest.mark.parametrize("text", DOCS)
def test_docs_the_previous_version_wrote_round_trip_byte_for_byte(text: str) -> None:
    doc = AgentDoc.from_json(json.loads(text))
    assert _text(doc.to_json()) == text


@pytest.mark.parametrize("text", LANE)
def test_queued_requests_round_trip_byte_for_byte(text: str) -> None:
    assert _text(Request.from_json(json.loads(text)).to_json()) == text


def test_the_loaded_doc_is_typed() -> None:
    assert "owner" not in json.loads(STARTED)  # written from the first owner on
    assert AgentDoc.from_json(json.loads(STARTED)).owner is None
    streaming = AgentDoc.from_json(json.loads(STREAMING))
    assert streaming.current is not None and streaming.current.stage is Stage.STREAMING
    assert streaming.current.origin is Origin.TELL
    assert isinstance(streaming.current.request.completion, Channel)
    deciding = AgentDoc.from_json(json.loads(DECIDING_ERROR)).current
    assert deciding is not None and deciding.sealed is not None
    assert deciding.sealed.outcome.decode().reason == "boom"  # type: ignore[union-attr]
    assert Request.from_json(json.loads(LANE[1])).caller is not None


class Old(Agent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {}, {"n": 0}

    def handle_response(self, ref: str, response: Response, state: Any) -> NoReply:
        return NoReply({"n": state["n"] + 1})


def _insert(hypha: Hypha, text: str, scripts: list[Any]) -> dict[str, Any]:
    """Write ``text`` as the previous version did (the row and its ``agent.started``)."""
    doc = json.loads(text)
    doc["kind"] = f"{Old.__module__}:{Old.__qualname__}"
    session = MockBackend().start_session({"scripts": scripts})
    hypha.store.ensure_schema()
    phase = "busy" if doc["pump"] else "idle"
    assert table.create(hypha.store, doc["name"], doc["incarnation"], doc["kind"], phase, doc,
                        session)
    return doc


def test_an_idle_row_of_the_previous_version_serves_turns(hypha: Hypha) -> None:
    _insert(hypha, AFTER_TURN, [[BackendEvent.new("result", {"text": "still here"})]])
    assert hypha.agents.whereis("a") is not None
    assert hypha.agents.status("a").agent_state == {"n": 1}
    assert hypha.agents.ask("a", "hello").text == "still here"
    assert hypha.agents.status("a").agent_state == {"n": 2}


def test_a_streaming_row_of_a_dead_owner_ends_task_crashed_once(hypha: Hypha) -> None:
    doc = _insert(hypha, STREAMING, [])
    cur = doc["current"]
    hypha.agents._publish("a", doc["incarnation"], doc["pump"])  # the redelivery
    wait_until(lambda: hypha.agents.poll("a", cur["ref"]).status == "error")
    assert hypha.agents.poll("a", cur["ref"]).reason == "task_crashed"
    done = hypha.agents.receive(Channel(cur["completion"]["channel"]), timeout=5.0)
    assert done is not None and done["outcome"]["error"] == "task_crashed"
