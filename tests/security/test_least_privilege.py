"""docs/security.md, "Least privilege": each recipe, read from the page, against the
machine's real services, then hypha running end to end on the accounts it made and
those accounts refused what the page says they cannot do.

Names are unique per test and everything made is removed at the end (the servers are
shared with other test sessions).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis
import sqlalchemy as sa
from kombu import Connection

from hypha_celery import Hypha, Settings
from hypha_celery.backends import BackendEvent, MockBackend
from hypha_celery.demo import SOURCES, run_demo
from hypha_celery.errors import SetupError
from hypha_celery.store import EventStore
from tests import services
from tests.integration.helpers import (
    Backends,
    Worker,
    assert_exactly_once,
    close_client,
    release_pools,
)
from tests.runtime.support import assert_well_formed, wait_until
from tests.security import privilege_app
from tests.security import privilege_support as doc
from tests.security.privilege_app import Counter

pytestmark = pytest.mark.services

PG_ADMIN = os.environ.get("HYPHA_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def venv_env(**extra: str) -> dict[str, str]:
    """The environment of a recipe's shell: no HYPHA_*, this interpreter's ``python``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYPHA_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(doc.ROOT)
    env.update(extra)
    return env


# -- PostgreSQL ----------------------------------------------------------------------
def _pg_url(database: str, role: str | None, password: str | None) -> str:
    """The superuser's URL (``role`` None), or ``role``'s, on ``database``."""
    url = sa.engine.make_url(PG_ADMIN).set(database=database)
    if role is not None:
        url = url.set(username=role, password=password)
    return url.render_as_string(hide_password=False)


def _run_sql(script: doc.SqlScript, passwords: dict[str, str]) -> None:
    role = script.role
    engine = sa.create_engine(_pg_url(script.database, role, passwords.get(role or "")),
                              isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            for statement in script.statements:
                conn.exec_driver_sql(statement)
    finally:
        engine.dispose()


@pytest.fixture
def pg_names() -> Iterator[dict[str, str]]:
    """The page's PostgreSQL names, made unique; the database and roles dropped after."""
    if not services.port_open("127.0.0.1", 5432):
        services.unavailable("PostgreSQL (127.0.0.1:5432)")
    token = uuid.uuid4().hex[:10]
    names = {"hypha_owner": f"hypha_lp_owner_{token}", "hypha_runtime": f"hypha_lp_rt_{token}",
             "hypha": f"hypha_lp_{token}", "db.internal:5432": "127.0.0.1:5432"}
    admin = sa.create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    try:
        try:
            admin.connect().close()
        except sa.exc.OperationalError:
            services.unavailable(f"PostgreSQL superuser at {PG_ADMIN}")
        yield names
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{names["hypha"]}" WITH (FORCE)')
            for role in (names["hypha_runtime"], names["hypha_owner"]):
                conn.exec_driver_sql(f'DROP ROLE IF EXISTS "{role}"')
        admin.dispose()


def _refused(url: str, statement: str) -> str:
    """The error of ``statement`` run at ``url``, which must be a privilege error."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(statement)
    except sa.exc.ProgrammingError as exc:
        message = str(exc.orig)
        assert "permission denied" in message or "must be owner" in message, message
        return message
    finally:
        engine.dispose()
    raise AssertionError(f"the runtime role was allowed: {statement}")


def test_postgres_recipe_runs_hypha_with_a_runtime_role_that_cannot_change_the_schema(
        pg_names: dict[str, str], tmp_path: Path) -> None:
    sql = [doc.sql_script(doc.Block(b.subsection, b.lang, doc.substitute(b.text, pg_names)))
           for b in doc.blocks("PostgreSQL", "sql")]
    bash = [doc.substitute(b.text, pg_names) for b in doc.blocks("PostgreSQL", "bash")]
    migrate, runtime_env = bash
    # the page's order: the database as a superuser, the migration as the owner, the grants
    setup = [s for s in sql if s.role is None]
    grants = [s for s in sql if s.role is not None]
    assert setup and grants and all(s.role == pg_names["hypha_owner"] for s in grants)
    passwords = dict(re.findall(r"CREATE ROLE (\w+) LOGIN PASSWORD '([^']*)'",
                                ";".join(st for s in setup for st in s.statements)))
    assert set(passwords) == {pg_names["hypha_owner"], pg_names["hypha_runtime"]}
    for script in setup:
        _run_sql(script, passwords)
    runtime_url = _exports(runtime_env)["HYPHA_STORE_URL"]
    assert pg_names["hypha_runtime"] in runtime_url
    # the page: the runtime role cannot bring the schema up to date, only the owner can
    unmigrated = EventStore(runtime_url)
    with pytest.raises(SetupError, match="migrate as the schema's owner"):
        unmigrated.migrate()
    unmigrated.dispose()
    doc.run_bash(migrate, venv_env(), tmp_path)
    for script in grants:
        _run_sql(script, passwords)

    # everything a deployment does, as the runtime role (embedded: memory broker,
    # in-process worker; the store is the one that matters here)
    hypha = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                           store_url=runtime_url, embedded=True))
    try:
        run, result = run_demo(hypha)
        assert sorted(result["sources"]) == sorted(SOURCES)
        assert_well_formed(run)
        reply = [BackendEvent.new("text", {"text": "hi"}), BackendEvent.new("result", {})]
        hypha.agents.start(Counter, name="counter", backend=MockBackend, scripts=[reply, reply])
        ref = hypha.agents.tell("counter", "one")
        hypha.agents.tell("counter", "two")
        assert wait_until(lambda: hypha.agents.poll("counter", ref).response).text == "hi"
        wait_until(lambda: hypha.agents.status("counter").agent_state["turns"] == 2)
        hypha.agents.stop("counter")
        hypha.sweep()
        # the runtime role may delete dead letters (a message an earlier test left on
        # the process-wide memory broker may have become one: count any)
        assert hypha.store.purge_dead_letters() >= 0
        assert hypha.store.dead_letters(status=None) == []
    finally:
        hypha.close()

    # what the page says the runtime role cannot do
    owner_only = ["DROP TABLE hypha_events", "TRUNCATE hypha_runs",
                  "ALTER TABLE hypha_runs ADD COLUMN x integer",
                  "CREATE TABLE hypha_extra (x integer)",
                  "DELETE FROM hypha_events", "UPDATE hypha_events SET kind = kind",
                  "UPDATE alembic_version SET version_num = version_num"]
    for statement in owner_only:
        _refused(runtime_url, statement)


# -- the brokers: a real `hypha worker` and `hypha beat` on the restricted account ----
APP = "tests.security.privilege_app:hypha"
HYPHA = str(Path(sys.executable).parent / "hypha")


@contextmanager
def deployment(backends: Backends, tmp: Path) -> Iterator[Hypha]:
    """A client, a ``hypha worker`` (prefork, 2) and ``hypha beat`` (a sweep every
    second) on ``backends``; the client is returned once beat's supervisor task has
    gone through broker and worker."""
    done = tmp / "done.txt"
    env = {"HYPHA_SWEEP_INTERVAL": "1", "HYPHA_LP_DONE": str(done)}
    client = privilege_app.build(backends.settings())
    client.store.migrate()
    worker = Worker(backends, tmp / "worker.log", queues=[], env=env)
    worker.argv = [HYPHA, "worker", "--app", APP, "-c", "2", "-l", "WARNING",
                   f"--hostname={worker.name.split('@')[0]}@%h"]
    beat_log = (tmp / "beat.log").open("ab")
    beat = subprocess.Popen([HYPHA, "beat", "--app", APP, "-l", "WARNING"], cwd=doc.ROOT,
                            env=backends.env(**env), stdout=beat_log,
                            stderr=subprocess.STDOUT)
    try:
        worker.start(client.celery)
        wait_until(lambda: done.exists() and "hypha.supervisor" in done.read_text(),
                   what="beat's supervisor task to run in the worker")
        yield client
    finally:
        beat.terminate()
        beat.wait(20)
        beat_log.close()
        worker.stop()
        close_client(client)
        release_pools()


def _exports(block: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in doc.commands(doc.Block("", "bash", block)):
        assert line[0] == "export" and len(line) == 2, line
        name, value = line[1].split("=", 1)
        out[name] = value
    return out


def _run_graph_and_agent(client: Hypha) -> None:
    """The demo graph (a chord in the middle) and an agent's turn, both on the worker."""
    run, result = run_demo(client)
    assert sorted(result["sources"]) == sorted(SOURCES)
    events = run.events()
    assert any(e.kind == "node.fanout.scheduled" for e in events)  # a chord went through
    assert_exactly_once(events)
    reply = [BackendEvent.new("text", {"text": "hi"}).to_json(),
             BackendEvent.new("result", {}).to_json()]
    client.agents.start(Counter, name="counter", backend=MockBackend, scripts=[reply])
    assert client.agents.ask("counter", "one", timeout=20).text == "hi"
    client.agents.stop("counter")


def test_redis_acl_recipe_runs_worker_beat_and_client_and_refuses_the_rest(
        redis_base: str, claimed_redis: str, tmp_path: Path) -> None:
    db = claimed_redis.rsplit("/", 1)[1]
    user = f"hypha_lp_{uuid.uuid4().hex[:10]}"
    names = {"hypha_app": user, "redis.internal:6379/0": f"127.0.0.1:6379/{db}",
             "/0.celery.pidbox": f"/{db}.celery.pidbox", "/0.celeryev": f"/{db}.celeryev",
             "+select|0": f"+select|{db}"}
    setuser, urls = (doc.substitute(b.text, names) for b in doc.blocks("Redis", "bash"))
    (argv,) = doc.commands(doc.Block("", "bash", setuser))
    assert argv[:3] == ["redis-cli", "ACL", "SETUSER"] and argv[3] == user
    url = _exports(urls)["HYPHA_BROKER_URL"]
    admin = redis.Redis.from_url(claimed_redis)
    try:
        admin.execute_command(*argv[1:])
        backends = Backends("redis-acl", url, url, f"sqlite:///{tmp_path / 'hypha.db'}")
        with deployment(backends, tmp_path) as client:
            _run_graph_and_agent(client)
        denied = [e for e in admin.execute_command("ACL", "LOG", "128")
                  if e[b"username"].decode() == user]
        assert not denied, denied

        as_user = redis.Redis.from_url(url)
        try:
            for command in (("FLUSHALL",), ("FLUSHDB",), ("CONFIG", "GET", "*"),
                            ("KEYS", "*"), ("INFO",), ("CLIENT", "LIST"),
                            ("ACL", "LIST"), ("SET", "not-hypha", "1"),
                            ("PUBLISH", "not-hypha", "1")):
                with pytest.raises(redis.exceptions.NoPermissionError):
                    as_user.execute_command(*command)
        finally:
            as_user.close()
    finally:
        admin.execute_command("ACL", "DELUSER", user)
        admin.close()


def _rabbitmqctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["rabbitmqctl", *args], capture_output=True, text=True, timeout=60)


def test_rabbitmq_vhost_recipe_runs_worker_beat_and_client_in_its_vhost_only(
        amqp_url: str, claimed_redis: str, tmp_path: Path) -> None:
    if shutil.which("rabbitmqctl") is None or _rabbitmqctl("list_vhosts").returncode:
        services.unavailable("rabbitmqctl (adding a vhost and a user)")
    token = uuid.uuid4().hex[:10]
    vhost, user = f"hypha-lp-{token}", f"hypha_lp_{token}"
    names = {"hypha-prod": vhost, "hypha_app": user, "rabbit.internal:5672": "127.0.0.1:5672"}
    setup, urls = (doc.substitute(b.text, names) for b in doc.blocks("RabbitMQ", "bash"))
    commands = doc.commands(doc.Block("", "bash", setup))
    assert [c[:2] for c in commands] == [["rabbitmqctl", "add_vhost"],
                                         ["rabbitmqctl", "add_user"],
                                         ["rabbitmqctl", "set_permissions"]]
    url = _exports(urls)["HYPHA_BROKER_URL"]
    assert url.endswith(f"/{vhost}")
    try:
        for argv in commands:
            done = _rabbitmqctl(*argv[1:])
            assert done.returncode == 0, (argv, done.stderr)
        backends = Backends("rabbit-vhost", url, claimed_redis,
                            f"sqlite:///{tmp_path / 'hypha.db'}")
        with deployment(backends, tmp_path) as client:
            _run_graph_and_agent(client)

        password = urlsplit(url).password
        with Connection(f"amqp://{user}:{password}@127.0.0.1:5672//",
                        connect_timeout=5) as conn, pytest.raises(Exception) as refused:
            conn.connect()
        assert "access" in str(refused.value).lower() or "not_allowed" in \
            str(refused.value).lower(), refused.value
        with Connection(url, connect_timeout=5) as conn:
            channel = conn.channel()
            with pytest.raises(conn.channel_errors) as refused:
                channel.queue_declare("not-hypha", auto_delete=True)
            assert "ACCESS_REFUSED" in str(refused.value), refused.value
    finally:
        _rabbitmqctl("delete_vhost", vhost)
        _rabbitmqctl("delete_user", user)
