"""``hypha.memory``, a user's client's memory (bound to its user: other users' memory does
not exist to it) and ``hypha memory`` (one line and exit 1 on errors, --as-user scoping)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from hypha_celery import Hypha
from hypha_celery.client.memory import ScopedMemory
from hypha_celery.errors import MemoryNotFound, NotPermitted
from hypha_celery.memory import MemoryManager, MemoryScope
from tests.cli.test_commands import invoke, one_line_error
from tests.runtime.support import embedded


@pytest.fixture
def hypha(store_url: str) -> Iterator[Hypha]:
    app = embedded(store_url)
    try:
        yield app
    finally:
        app.close()


def test_a_users_client_never_crosses_its_user(hypha: Hypha) -> None:
    u = uuid.uuid4().hex[:8]
    ann, bob = f"ann-{u}", f"bob-{u}"
    assert isinstance(hypha.memory, MemoryManager)
    theirs = hypha.memory.add(MemoryScope(bob), "semantic", "bob's tea secret",
                              operation_id="b1")
    mine = hypha.as_user(ann).memory
    assert isinstance(mine, ScopedMemory)
    own = mine.add(None, "semantic", "ann's tea", operation_id="a1")
    assert own.scope == MemoryScope(ann)
    assert [h.record.id for h in mine.search(None, "tea")] == [own.id]
    bob_scope = MemoryScope(bob)
    for read in (lambda: mine.get(bob_scope, theirs.id), lambda: mine.get(None, theirs.id),
                 lambda: mine.history(bob_scope, theirs.id),
                 lambda: mine.history(None, theirs.id),
                 lambda: mine.search(bob_scope, "tea"), lambda: mine.list(bob_scope),
                 lambda: list(mine.export(bob_scope))):
        with pytest.raises(MemoryNotFound):
            read()
    for write in (lambda: mine.add(bob_scope, "semantic", "x", operation_id="x"),
                  lambda: mine.update(bob_scope, theirs.id, "x", expected_revision=1,
                                      operation_id="x"),
                  lambda: mine.delete(bob_scope, theirs.id, operation_id="x")):
        with pytest.raises(NotPermitted):
            write()
    with pytest.raises(MemoryNotFound):  # in its own scope: as if it did not exist
        mine.delete(None, theirs.id, operation_id="x")
    with pytest.raises(MemoryNotFound):
        mine.update(None, theirs.id, "x", expected_revision=1, operation_id="y")
    assert hypha.memory.get(bob_scope, theirs.id).text == "bob's tea secret"
    assert hypha.as_user(bob).memory.get(None, theirs.id).revision == 1


def test_the_cli(store_url: str) -> None:
    user = f"cli-{uuid.uuid4().hex[:8]}"
    added = invoke("memory", "add", "Alice likes green tea", "--user", user, "--type",
                   "preference", "--op", "o1", "--tag", "drinks", "--json",
                   store_url=store_url)
    assert added.exit_code == 0, added.output
    record = json.loads(added.stdout)
    rid = record["id"]
    assert record["memory_type"] == "preference" and record["tags"] == ["drinks"]
    again = invoke("memory", "add", "Alice likes green tea", "--user", user, "--type",
                   "preference", "--op", "o1", "--tag", "drinks", store_url=store_url)
    assert again.stdout.strip() == f"memory {rid} revision 1"
    found = invoke("memory", "search", "green OR black", "--user", user, store_url=store_url)
    assert found.exit_code == 0 and rid in found.stdout and "TEXT" in found.stdout
    [line] = invoke("memory", "search", "tea", "--user", user, "--json",
                    store_url=store_url).stdout.splitlines()
    assert json.loads(line)["id"] == rid and "score" in json.loads(line)
    shown = invoke("memory", "show", rid, "--user", user, store_url=store_url)
    assert shown.stdout.rstrip().endswith("Alice likes green tea")
    listed = invoke("memory", "list", "--user", user, "--json", store_url=store_url)
    assert [json.loads(x)["id"] for x in listed.stdout.splitlines()] == [rid]
    assert "no memory" in invoke("memory", "list", "--user", user, "--type", "working",
                                 store_url=store_url).stderr
    deleted = invoke("memory", "delete", rid, "--user", user, store_url=store_url)
    assert deleted.stdout.strip() == f"memory {rid} deleted (revision 2)"
    history = invoke("memory", "history", rid, "--user", user, "--json", store_url=store_url)
    assert [(json.loads(x)["revision"], json.loads(x)["text"])
            for x in history.stdout.splitlines()] == [(1, None), (2, None)]
    assert "no memory found" in invoke("memory", "search", "tea", "--user", user,
                                       store_url=store_url).stderr
    assert "no memory record" in one_line_error(
        invoke("memory", "show", rid, "--user", user, store_url=store_url), 1)


def test_cli_errors_are_one_line(store_url: str) -> None:
    user = f"cli-{uuid.uuid4().hex[:8]}"
    assert "unbalanced quote" in one_line_error(
        invoke("memory", "search", '"tea', "--user", user, store_url=store_url), 1)
    assert "--user" in invoke("memory", "list", store_url=store_url).output
    assert invoke("memory", "list", store_url=store_url).exit_code == 2
    big = "x" * (16 * 1024 + 1)
    assert "max_record_bytes" in one_line_error(
        invoke("memory", "add", big, "--user", user, store_url=store_url), 1)


def test_cli_as_user_cannot_reach_another_user(store_url: str) -> None:
    u = uuid.uuid4().hex[:8]
    ann, bob = f"ann-{u}", f"bob-{u}"
    rid = json.loads(invoke("memory", "add", "bob's note", "--user", bob, "--json",
                            store_url=store_url).stdout)["id"]
    as_ann = ("--as-user", ann)
    for args in (("show", rid), ("history", rid), ("search", "note"), ("list",)):
        line = one_line_error(invoke(*as_ann, "memory", *args, "--user", bob,
                                     store_url=store_url), 1)
        assert "no such memory" in line
    for args in (("delete", rid), ("add", "x")):
        one_line_error(invoke(*as_ann, "memory", *args, "--user", bob, store_url=store_url), 1)
    assert "no memory record" in one_line_error(
        invoke(*as_ann, "memory", "show", rid, "--user", ann, store_url=store_url), 1)
    assert invoke("memory", "show", rid, "--user", bob, store_url=store_url).exit_code == 0
