"""``hypha bus list | show | depth | dead-letters | redrive`` on a real store (each
backend; the PostgreSQL database is shared: users of their own): tables without payloads,
``--json``, ``--as-user`` scoping, bad input as one line."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from hypha_celery.bus import Bus, Message, Scope, human
from hypha_celery.store import EventStore
from tests.cli.test_commands import invoke, one_line_error

SECRET = "the prompt text nobody logs"


@dataclass(frozen=True)
class World:
    alice: str
    bob: str
    dead: str  # alice's, dead-lettered
    queued: str  # bob's, queued


@pytest.fixture
def world(store_url: str) -> Iterator[World]:
    tag = uuid.uuid4().hex[:8]
    alice, bob = f"alice-{tag}", f"bob-{tag}"
    store = EventStore(store_url)
    store.migrate()
    bus = Bus(store)

    def send(user: str, to: str) -> Message:
        return bus.publish(Message.model_validate({
            "type": "note", "user_id": user, "session_id": "s1", "from": human(user),
            "to": human(to), "payload": {"prompt": SECRET}, "metadata": {"k": SECRET}}))

    dead = send(alice, bob)
    bus.pull(human(bob), Scope(alice, "s1"))
    bus.fail(dead.id, "poison", dead_letter=True)
    queued = send(bob, alice)
    yield World(alice, bob, dead.id, queued.id)
    store.dispose()


def test_list_shows_no_payload(store_url: str, world: World) -> None:
    result = invoke("bus", "list", "--user", world.alice, store_url=store_url)
    assert result.exit_code == 0, result.output
    header, row = result.stdout.splitlines()
    assert header.split() == ["ID", "TYPE", "SCOPE", "FROM", "TO", "STATUS", "ATTEMPTS",
                              "AGE", "BYTES", "REASON"]
    cells = row.split()
    assert cells[:7] == [world.dead, "note", f"{world.alice}:s1", f"human:{world.alice}",
                         f"human:{world.bob}", "dead_lettered", "1"]
    assert cells[-1] == "poison" and int(cells[-2]) > 0
    lines = invoke("bus", "list", "--user", world.bob, "--json",
                   store_url=store_url).stdout.splitlines()
    [doc] = [json.loads(x) for x in lines]
    assert doc["id"] == world.queued and doc["status"] == "queued"
    assert "payload" not in doc and "metadata" not in doc and SECRET not in "".join(lines)


def test_filters(store_url: str, world: World) -> None:
    def ids(*args: str) -> list[str]:
        result = invoke("bus", "list", "--json", *args, store_url=store_url)
        assert result.exit_code == 0, result.output
        return [json.loads(x)["id"] for x in result.stdout.splitlines()]

    assert ids("--to", f"human:{world.alice}") == [world.queued]
    assert ids("--user", world.alice, "--session", "s1", "--to",
               f"human:{world.bob}") == [world.dead]
    assert ids("--user", world.alice, "--session", "other") == []
    assert ids("--user", world.bob, "--status", "dead_lettered") == []
    assert ids("--user", world.bob, "--status", "queued", "--status", "delivered") == [
        world.queued]
    assert ids("--run", uuid.uuid4().hex) == []


def test_show_hides_content_unless_asked(store_url: str, world: World) -> None:
    shown = invoke("bus", "show", world.dead, store_url=store_url)
    assert shown.exit_code == 0, shown.output
    fields = dict(line.split(None, 1) for line in shown.stdout.splitlines())
    assert fields["status"] == "dead_lettered" and fields["reason"] == "poison"
    assert fields["to"] == f"human:{world.bob}" and SECRET not in shown.stdout
    doc = json.loads(invoke("bus", "show", world.dead, "--json", "--payload",
                            store_url=store_url).stdout)
    assert doc["payload"] == {"prompt": SECRET} and doc["metadata"] == {"k": SECRET}


def test_dead_letters_and_redrive(store_url: str, world: World) -> None:
    listed = invoke("bus", "dead-letters", "--user", world.alice, "--json",
                    store_url=store_url)
    assert [json.loads(x)["id"] for x in listed.stdout.splitlines()] == [world.dead]
    result = invoke("bus", "redrive", world.dead, store_url=store_url)
    assert result.exit_code == 0, result.output
    copy = result.stdout.split()[3]
    assert result.stdout.strip() == (f"redriven {world.dead} as {copy} (queued for "
                                     f"human:{world.bob})")
    again = invoke("bus", "redrive", world.dead, store_url=store_url)
    assert again.stdout == result.stdout  # a second redrive: the same copy
    doc = json.loads(invoke("bus", "show", copy, "--json", store_url=store_url).stdout)
    assert doc["status"] == "queued" and doc["user_id"] == world.alice
    refused = invoke("bus", "redrive", world.queued, store_url=store_url)
    assert "is queued, not dead-lettered" in one_line_error(refused, 1)


def test_depth_counts_live_messages_by_kind(store_url: str, world: World) -> None:
    result = invoke("bus", "depth", store_url=store_url)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["KIND", "QUEUED", "DELIVERED", "OLDEST"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:7]}
    assert set(rows) == {"runtime", "session", "workflow", "agent", "tool", "human"}
    assert int(rows["human"][0]) >= 1 and rows["human"][2] != "-"
    assert lines[7].startswith("fullest queue: ") and "of 10000 messages" in lines[7]
    doc = json.loads(invoke("bus", "depth", "--json", store_url=store_url).stdout)
    human_kind = next(k for k in doc["kinds"] if k["recipient_kind"] == "human")
    assert human_kind["queued"] >= 1 and doc["fullest_queue"]["max_messages"] == 10_000


def test_depth_reads_the_env_bounds(store_url: str, world: World) -> None:
    result = invoke("bus", "depth", store_url=store_url, HYPHA_BUS_MAX_QUEUE_MESSAGES="7")
    assert "of 7 messages" in result.stdout.splitlines()[-1]


def test_as_user_sees_and_acts_on_its_own_messages_only(store_url: str,
                                                        world: World) -> None:
    mine = invoke("--as-user", world.bob, "bus", "list", "--json", store_url=store_url)
    assert [json.loads(x)["id"] for x in mine.stdout.splitlines()] == [world.queued]
    for args in (("show", world.dead), ("redrive", world.dead)):
        theirs = invoke("--as-user", world.bob, "bus", *args, store_url=store_url)
        assert f"no message '{world.dead}'" in one_line_error(theirs, 1)
    refused = invoke("--as-user", world.bob, "bus", "depth", store_url=store_url)
    assert "drop --as-user" in one_line_error(refused, 1)
    own = invoke("--as-user", world.alice, "bus", "dead-letters", "--json",
                 store_url=store_url)
    assert [json.loads(x)["id"] for x in own.stdout.splitlines()] == [world.dead]


@pytest.mark.parametrize("args", [("list", "--to", "agent"), ("list", "--to", "robot:x"),
                                  ("list", "--to", "agent:a b"),
                                  ("list", "--session", "s1"), ("list", "--status", "gone")])
def test_bad_input_is_one_line(store_url: str, args: tuple[str, ...]) -> None:
    one_line_error(invoke("bus", *args, store_url=store_url), 2)


def test_an_unknown_id_is_one_line(store_url: str) -> None:
    for command in ("show", "redrive"):
        result = invoke("bus", command, "nope-1", store_url=store_url)
        assert one_line_error(result, 1) == "hypha: error: no message 'nope-1'"
