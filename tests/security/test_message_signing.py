"""Optional Celery message signing (``HYPHA_SIGNING_*``, hypha_celery.runtime.signing).

Unit tests: the settings (all three files or none), the checks at start-up, one key per
process, the missing extra, the consumer's reasons.

With services: two real ``celery worker`` processes on one Redis broker and one
PostgreSQL store. Worker 1 signs with key A and trusts A; worker 2 signs with key B and
trusts only B (its own certificate, not in worker 1's store). Which worker gets a message
is fixed by the queues each consumes: worker 2 the coordinator queue, worker 1 the rest
(then, once worker 2 is gone, the coordinator queue too).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from celery.exceptions import SecurityError
from kombu.exceptions import ContentDisallowed, DecodeError
from kombu.serialization import dumps, loads

from hypha_celery import Hypha, Settings
from hypha_celery.errors import ExtraNotInstalled, SetupError
from hypha_celery.runtime import signing
from hypha_celery.runtime.config import COORDINATOR_QUEUE, NODES_QUEUE, celery_config
from hypha_celery.runtime.consumer import refusal
from tests.integration.helpers import (
    REPO,
    Backends,
    Worker,
    close_client,
    purge,
    release_pools,
    wait_until,
)
from tests.security.signing_support import (
    FAN_GRAPH,
    READY_ENV,
    TOUCH_TASK,
    TOUCHED,
    Identity,
    build,
    cert_store,
    make_identity,
    registry_restored,
    signing_env,
    signing_of,
)

APP = "tests.security.signing_app:celery"
EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


@pytest.fixture(scope="module")
def ids(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Identities A and B, a store trusting A and one trusting B."""
    root = tmp_path_factory.mktemp("signing")
    a = make_identity(root / "a", "hypha-a", 1001)
    b = make_identity(root / "b", "hypha-b", 2002)
    return {"a": a, "b": b, "store_a": cert_store(root / "trust-a", a),
            "store_b": cert_store(root / "trust-b", b), "root": root}


@pytest.fixture
def isolated() -> Iterator[None]:
    with registry_restored():
        yield


def _memory_app() -> Celery:
    app = Celery("signing-unit")
    app.config_from_object(celery_config(Settings.from_env({})))
    return app


# -- settings --------------------------------------------------------------------------
def test_no_signing_variables_is_no_signing() -> None:
    assert Settings.from_env({}).signing is None
    assert signing.from_env({signing.KEY_FILE: "  "}) is None


@pytest.mark.parametrize("given", [(signing.KEY_FILE,), (signing.CERT_FILE,),
                                   (signing.KEY_FILE, signing.CERT_STORE),
                                   (signing.CERT_FILE, signing.CERT_STORE)])
def test_partial_signing_settings_are_a_setup_error(given: tuple[str, ...]) -> None:
    env = {name: "/some/file" for name in given}
    with pytest.raises(SetupError) as err:
        Settings.from_env(env)
    text = str(err.value)
    assert "\n" not in text and "together" in text
    assert all(name in text.split("not set:")[1] for name in signing.FILES if name not in given)


def test_all_three_variables_make_the_signing_setting() -> None:
    env = {signing.KEY_FILE: "/k.pem", signing.CERT_FILE: "/c.pem",
           signing.CERT_STORE: "/trusted", signing.KEY_PASSWORD: "hunter2-secret"}
    settings = Settings.from_env(env)
    assert settings.signing == signing.Signing("/k.pem", "/c.pem", "/trusted",
                                               "hunter2-secret")
    assert "hunter2-secret" not in repr(settings)


# -- start-up ----------------------------------------------------------------------------
def test_a_signing_app_signs_with_auth_over_json_and_verifies(ids: dict[str, Any],
                                                              isolated: None) -> None:
    app = _memory_app()
    signing.apply(app, signing_of(ids["a"], ids["store_a"]))
    assert (app.conf.task_serializer, app.conf.accept_content) == ("auth", ["auth"])
    assert (app.conf.result_serializer, app.conf.result_accept_content) == ("json", ["json"])
    assert app.conf.event_serializer == "json"
    ctype, encoding, body = dumps([["x"], {}, EMBED], serializer="auth")
    assert ctype == signing.CONTENT_TYPE
    assert loads(body, ctype, encoding, accept=[ctype]) == [["x"], {}, EMBED]
    app.close()


def test_hypha_applies_signing_from_its_settings(ids: dict[str, Any], isolated: None,
                                                  tmp_path: Path) -> None:
    settings = dataclasses.replace(Settings.from_env({}),
                                   store_url=f"sqlite:///{tmp_path / 'h.db'}",
                                   signing=signing_of(ids["a"], ids["store_a"]))
    hypha = Hypha(settings)
    try:
        assert hypha.celery.conf.task_serializer == "auth"
        assert hypha.celery.conf.security_key == str(ids["a"].key_file)
        assert hypha.celery.conf.security_key_password is None  # never in the configuration
    finally:
        close_client(hypha)


def test_an_embedded_app_signs_and_verifies_its_own_messages(
        ids: dict[str, Any], isolated: None, tmp_path: Path) -> None:
    settings = dataclasses.replace(Settings.from_env({}),
                                   store_url=f"sqlite:///{tmp_path / 'h.db'}",
                                   signing=signing_of(ids["a"], ids["store_a"]))
    hypha = build(settings)
    try:
        hypha.store.migrate()
        assert hypha.start(FAN_GRAPH).wait(timeout=30) == {"sum": 60}  # a chord, signed
    finally:
        close_client(hypha)


def _setup_error(app: Celery, sig: signing.Signing) -> str:
    with pytest.raises(SetupError) as err:
        signing.apply(app, sig)
    text = str(err.value)
    assert "\n" not in text and "/" not in text, text  # one line, no file path
    return text


def test_bad_signing_files_are_one_line_setup_errors(ids: dict[str, Any],
                                                      isolated: None) -> None:
    root: Path = ids["root"]
    a: Identity = ids["a"]
    app = _memory_app()
    locked = make_identity(root / "locked", "hypha-locked", 3003, password="right horse")
    expired = make_identity(root / "expired", "hypha-expired", 4004, days=-1)
    empty = root / "empty-store"
    empty.mkdir()
    assert "cannot read" in _setup_error(app, dataclasses.replace(
        signing_of(a, ids["store_a"]), key_file=str(root / "nope.key")))
    assert signing.KEY_FILE in _setup_error(app, signing_of(locked, ids["store_a"],
                                                            "wrong horse"))
    assert signing.KEY_FILE in _setup_error(app, signing_of(locked, ids["store_a"]))
    mixed = dataclasses.replace(signing_of(a, ids["store_a"]), cert_file=str(ids["b"].cert_file))
    assert "is not the key of the certificate" in _setup_error(app, mixed)
    assert "expired" in _setup_error(app, signing_of(expired, ids["store_a"]))
    assert "no certificate" in _setup_error(app, signing_of(a, empty))
    assert signing._active is None  # nothing was registered
    signing.apply(app, signing_of(locked, ids["store_a"], "right horse"))  # the password works
    app.close()


def test_one_signing_key_per_process(ids: dict[str, Any], isolated: None) -> None:
    first, second = _memory_app(), _memory_app()
    signing.apply(first, signing_of(ids["a"], ids["store_a"]))
    signing.apply(second, signing_of(ids["a"], ids["store_a"]))  # the same: fine
    assert "one signing key per process" in _setup_error(
        second, signing_of(ids["b"], ids["store_b"]))
    first.close()
    second.close()


def test_without_cryptography_the_error_names_the_extra(
        ids: dict[str, Any], isolated: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cryptography", None)
    with pytest.raises(ExtraNotInstalled, match=r"hypha-celery\[signing\]"):
        signing.apply(_memory_app(), signing_of(ids["a"], ids["store_a"]))


def test_the_consumer_names_signature_refusals() -> None:
    # Celery's SecurityError, re-raised by Celery and then by kombu as a DecodeError
    try:
        try:
            try:
                raise SecurityError("Unknown certificate: 'hypha-b 2002'")
            except SecurityError as inner:
                raise SecurityError(f"Unable to deserialize: {inner!r}") from inner
        except SecurityError as outer:
            raise DecodeError(outer) from outer
    except DecodeError as exc:
        decode_error = exc
    reason, error = refusal(decode_error, "malformed", True)
    assert reason == "bad_signature" and isinstance(error, SecurityError)
    assert str(error) == "Unknown certificate: 'hypha-b 2002'"  # the innermost
    disallowed = ContentDisallowed("Refusing to deserialize untrusted content of type json")
    assert refusal(disallowed, "malformed", True) == ("unsigned", disallowed)
    assert refusal(disallowed, "malformed", False) == ("malformed", disallowed)
    plain = DecodeError("not JSON")
    assert refusal(plain, "malformed", True) == ("malformed", plain)


# -- two workers, one with the wrong key ---------------------------------------------
def _start(worker: Worker, ready: Path) -> Worker:
    """Start ``worker`` and wait for its ready file (no ping: see signing_support)."""
    with worker.log_path.open("ab") as out:
        worker.proc = subprocess.Popen(worker.argv, cwd=REPO, env=worker.env, stdout=out,
                                       stderr=subprocess.STDOUT)

    def up() -> bool:
        assert worker.proc is not None
        if worker.proc.poll() is not None:
            raise AssertionError(f"worker exited with {worker.proc.returncode}:\n"
                                 f"{worker.tail()}")
        return ready.exists()

    wait_until(up, 90.0, f"worker {worker.name} to be ready", worker.tail)
    return worker


def _start_as(backends: Backends, ident: Identity, store: Path) -> str:
    """Start a run of :data:`FAN_GRAPH` from another process signing as ``ident``."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.security.signing_app", "start", FAN_GRAPH], cwd=REPO,
        env=backends.env(**signing_env(ident, store)), capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    return done.stdout.decode().strip().splitlines()[-1]


def _publish(app: Celery, body: bytes, content_type: str, task_id: str) -> None:
    with app.connection_for_write() as conn:
        conn.Producer().publish(body, exchange=NODES_QUEUE, routing_key=NODES_QUEUE,
                                headers={"lang": "py", "task": TOUCH_TASK, "id": task_id},
                                content_type=content_type, content_encoding="utf-8",
                                retry=True)


def _tampered(value: str) -> bytes:
    """A body signed with this process's key (A), then changed: ``value`` -> upper."""
    _ctype, _enc, signed = dumps([[value], {}, EMBED], serializer="auth")
    raw = base64.b64decode(signed)
    assert raw.count(value.encode()) == 1
    return base64.b64encode(raw.replace(value.encode(), value.upper().encode()))


def _letters(hypha: Hypha, count: int, log: Any) -> list[dict[str, Any]]:
    def enough() -> list[dict[str, Any]] | None:
        found = hypha.store.dead_letters(status=None)
        return found if len(found) >= count else None

    found: list[dict[str, Any]] = wait_until(enough, what=f"{count} dead letters", log=log)
    return found


def _summary(record: dict[str, Any]) -> tuple[Any, ...]:
    return (record["reason"], record["task"], record["queue"], record["error"]["type"],
            record["run_id"])


@pytest.mark.services
def test_two_workers_one_with_the_wrong_key(ids: dict[str, Any], claimed_redis: str,
                                            fresh_pg: str, tmp_path: Path,
                                            isolated: None) -> None:
    pg_url = fresh_pg
    a, b, store_a, store_b = ids["a"], ids["b"], ids["store_a"], ids["store_b"]
    url = claimed_redis
    backends = Backends("redis", url, url, pg_url)
    client = build(dataclasses.replace(backends.settings(), signing=signing_of(a, store_a)))
    client.store.migrate()
    others = sorted(client.queues() - {COORDINATOR_QUEUE})
    purge(url, sorted(client.queues()))
    side = redis.Redis.from_url(url)
    good = Worker(backends, tmp_path / "good.log", queues=others, concurrency=1, app=APP,
                  env={**signing_env(a, store_a), READY_ENV: str(tmp_path / "good.ready")})
    wrong = Worker(backends, tmp_path / "wrong.log", queues=[COORDINATOR_QUEUE],
                   concurrency=1, app=APP,
                   env={**signing_env(b, store_b), READY_ENV: str(tmp_path / "wrong.ready")})

    def logs() -> str:
        return f"{good.tail()}\n--- wrong-key worker ---\n{wrong.tail()}"

    try:
        _start(good, tmp_path / "good.ready")
        _start(wrong, tmp_path / "wrong.ready")

        # (c) the wrong-key worker trusts only B: the kickoff client A signed is refused
        run_a = client.start(FAN_GRAPH).id
        [refused] = _letters(client, 1, logs)
        assert _summary(refused) == ("bad_signature", "hypha.coordinator", COORDINATOR_QUEUE,
                                     "SecurityError", None), refused
        assert refused["execution_id"] == f"{run_a}.0.c"
        assert "Unknown certificate" in refused["error"]["message"]
        assert "hypha-a 1001" in refused["error"]["message"]
        # a broadcast reaches every worker: the good one answers client A's ping, the
        # wrong-key one cannot verify it and records it (a control message: task "?")
        assert client.celery.control.ping(destination=[good.name], timeout=2.0)
        ping = next(r for r in _letters(client, 2, logs) if r["id"] != refused["id"])
        assert _summary(ping) == ("bad_signature", "?", None, "SecurityError", None), ping

        # (b) what the wrong-key worker sends is refused by the good one: a client signing
        # with B starts a run, the wrong-key worker (trusting B) runs its first step, and
        # the three fan-out edges it publishes, signed with B, never run
        run_b = _start_as(backends, b, store_b)
        letters = _letters(client, 5, logs)
        edges = [r for r in letters if r["task"] == f"{FAN_GRAPH}.edge"]
        assert len(edges) == 3, letters
        assert {_summary(r) for r in edges} == {
            ("bad_signature", f"{FAN_GRAPH}.edge", NODES_QUEUE, "SecurityError", None)}
        assert all(r["execution_id"].startswith(f"{run_b}.") for r in edges), edges
        assert all("hypha-b 2002" in r["error"]["message"] for r in edges)

        for proc in (good.proc, wrong.proc):
            assert proc is not None and proc.poll() is None, logs()
        wrong.stop()

        # the good worker takes the coordinator queue too (a signed control message)
        replies = client.celery.control.add_consumer(
            COORDINATOR_QUEUE, destination=[good.name], reply=True, timeout=5.0)
        assert replies and "ok" in replies[0][good.name], replies

        # (b) a client signing with B is refused by the good worker; so are a body signed
        # with A but changed on the way, an unsigned (plain JSON) message and one that
        # claims to be text
        run_b2 = _start_as(backends, b, store_b)
        _publish(client.celery, _tampered("tampered"), signing.CONTENT_TYPE, "tampered-1")
        _publish(client.celery, json.dumps([["unsigned"], {}, EMBED]).encode(),
                 "application/json", "unsigned-1")
        # kombu trusts application/text whatever accept_content says: it stays text
        _publish(client.celery, json.dumps([["text"], {}, EMBED]).encode(),
                 "application/text", "text-1")
        client.celery.send_task(TOUCH_TASK, args=["signed"], queue=NODES_QUEUE,
                                ignore_result=True)
        wait_until(lambda: side.lrange(TOUCHED, 0, -1), what="the signed task", log=logs)

        # (a) a run client A starts completes on the good worker: a chord of three edges
        done = client.start(FAN_GRAPH).wait(timeout=60)
        assert done == {"sum": 60}, done

        letters = _letters(client, 9, logs)
        assert good.proc is not None and good.proc.poll() is None, logs()
    finally:
        wrong.stop()
        good.stop()
        close_client(client)
        side.close()
        release_pools()

    assert side.lrange(TOUCHED, 0, -1) == [b"signed"]  # nothing else ran
    by_id = {r["execution_id"]: r for r in letters}
    kick = by_id[f"{run_b2}.0.c"]
    assert _summary(kick) == ("bad_signature", "hypha.coordinator", COORDINATOR_QUEUE,
                              "SecurityError", None)
    assert "Unknown certificate" in kick["error"]["message"]
    tampered = by_id["tampered-1"]
    assert _summary(tampered) == ("bad_signature", TOUCH_TASK, NODES_QUEUE, "SecurityError",
                                  None)
    # Celery 5.7's Certificate.verify catches ``(cryptography.exceptions,)``, a module: the
    # InvalidSignature then surfaces as a TypeError inside its SecurityError. Refused
    # either way; a fixed Celery says "Bad signature".
    assert tampered["error"]["message"].startswith((
        "Bad signature", "Unable to deserialize: TypeError")), tampered["error"]
    assert set(tampered["args"]) == {"raw"}  # an unverified body is kept as text only
    unsigned = by_id["unsigned-1"]
    assert _summary(unsigned) == ("unsigned", TOUCH_TASK, NODES_QUEUE, "ContentDisallowed",
                                  None)
    text = by_id["text-1"]
    assert _summary(text) == ("invalid_task", TOUCH_TASK, NODES_QUEUE, "InvalidTaskError",
                              None)
    assert len(letters) == 9, [_summary(r) for r in letters]

    # nothing of the refused runs ran: no node started, no step after the refusal
    assert _kinds_of(pg_url, run_a) == ["run.created", "run.started"]
    kinds_b = _kinds_of(pg_url, run_b)
    assert "node.fanout.scheduled" in kinds_b and not any(
        k.startswith("node.execution.") for k in kinds_b), kinds_b
    assert _kinds_of(pg_url, run_b2) == ["run.created", "run.started"]
    # each refusal is one warning line in the log of the worker that refused it
    good_log, wrong_log = good.tail(400_000), wrong.tail(400_000)
    assert good_log.count("hypha: dead-lettered a message (bad_signature)") == 5, good_log
    assert good_log.count("hypha: dead-lettered a message (unsigned)") == 1, good_log
    assert wrong_log.count("hypha: dead-lettered a message (bad_signature)") == 2, wrong_log
    for log in (good_log, wrong_log):
        assert "Unrecoverable error" not in log and "Traceback" not in log, log


def _kinds_of(store_url: str, run_id: str) -> list[str]:
    from hypha_celery.store import EventStore

    store = EventStore(store_url)
    try:
        return [e.kind for e in store.events(run_id)]
    finally:
        store.dispose()
