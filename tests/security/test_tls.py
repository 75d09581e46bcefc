"""Encrypted transports (docs/security.md, "Encrypted transports").

The settings: ``HYPHA_TLS_*`` files checked at settings time (``SetupError``), turned into
Celery's ``broker_use_ssl`` / ``redis_backend_use_ssl`` and into the query of hypha's own
Redis clients' URL. Then servers this test starts on loopback with certificates it makes
(tests/security/tls_support.py), listening on TLS only: a graph runs end to end through a
real ``celery worker`` over ``rediss://`` (mutual TLS) and over ``amqps://``, on a
PostgreSQL store reached with ``sslmode=verify-full``; a client without the CA, with
another host name or without its certificate is refused.
"""

from __future__ import annotations

import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy as sa
from celery import Celery
from cryptography.hazmat.primitives import serialization
from kombu import Connection

from hypha_celery import Hypha, Settings
from hypha_celery.demo import GRAPH_ID, SOURCES, run_demo
from hypha_celery.errors import BrokerUnavailable, SetupError
from hypha_celery.runtime.config import celery_config
from hypha_celery.runtime.notifier import RedisNotifier
from hypha_celery.runtime.tls import (
    ENV_CA,
    ENV_CERT,
    ENV_KEY,
    TlsFiles,
    amqp_ssl,
    celery_tls,
    redis_client_url,
    redis_ssl,
)
from hypha_celery.store import STORE_ERRORS, EventStore, store_error
from tests import services
from tests.integration.helpers import Backends, Worker, close_client, release_pools
from tests.runtime.support import assert_well_formed
from tests.security import tls_app
from tests.security.tls_support import (
    Certs,
    make_certs,
    pg_url,
    tls_postgres,
    tls_rabbitmq,
    tls_redis,
)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("tls-certs"))


def tls_env(certs: Certs, *, client_cert: bool = True) -> dict[str, str]:
    env = {ENV_CA: str(certs.ca)}
    if client_cert:
        env |= {ENV_CERT: str(certs.client_cert), ENV_KEY: str(certs.client_key)}
    return env


# -- settings: checked at settings time --------------------------------------------------
def _setup_error(env: dict[str, str]) -> str:
    with pytest.raises(SetupError) as info:
        Settings.from_env(env)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_the_tls_files_are_read_from_the_environment(certs: Certs) -> None:
    env = {"HYPHA_BROKER_URL": "rediss://localhost:6380/0", **tls_env(certs)}
    settings = Settings.from_env(env)
    assert settings.tls == TlsFiles(str(certs.ca), str(certs.client_cert), str(certs.client_key))
    assert settings.result_backend == env["HYPHA_BROKER_URL"]  # the URLs stay as given
    assert Settings.from_env({}).tls == TlsFiles()


def test_a_missing_ca_file_is_a_setup_error(certs: Certs, tmp_path: Path) -> None:
    message = _setup_error({ENV_CA: str(tmp_path / "nope.pem")})
    assert message.startswith(ENV_CA) and "does not exist" in message


def test_a_ca_file_without_a_certificate_is_a_setup_error(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("not a certificate\n")
    assert "holds no PEM certificate" in _setup_error({ENV_CA: str(tmp_path / "ca.pem")})


def test_a_client_certificate_needs_its_key(certs: Certs) -> None:
    for env in ({ENV_CERT: str(certs.client_cert)}, {ENV_KEY: str(certs.client_key)}):
        assert "set both or neither" in _setup_error(env)


def test_a_missing_key_file_is_named_but_its_path_is_not_shown(certs: Certs,
                                                               tmp_path: Path) -> None:
    secret = tmp_path / "secret-place" / "client.key"
    message = _setup_error({ENV_CERT: str(certs.client_cert), ENV_KEY: str(secret)})
    assert ENV_KEY in message and "secret-place" not in message


def test_a_key_of_another_certificate_or_an_encrypted_key_is_a_setup_error(
        certs: Certs, tmp_path: Path) -> None:
    message = _setup_error({ENV_CERT: str(certs.client_cert), ENV_KEY: str(certs.server_key)})
    assert message.startswith(f"{ENV_CERT} / {ENV_KEY}")
    assert str(certs.server_key) not in message
    key = serialization.load_pem_private_key(certs.client_key.read_bytes(), None)
    locked = tmp_path / "locked.key"
    locked.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                         serialization.PrivateFormat.PKCS8,
                                         serialization.BestAvailableEncryption(b"pw")))
    # refused, never a password prompt on the terminal
    assert "unencrypted" in _setup_error({ENV_CERT: str(certs.client_cert),
                                          ENV_KEY: str(locked)})


def test_tls_files_with_a_plain_broker_or_backend_url_are_a_setup_error(certs: Certs) -> None:
    message = _setup_error({"HYPHA_BROKER_URL": "amqps://u:pw@rabbit:5671//",
                            "HYPHA_RESULT_BACKEND": "redis://u:pw@cache:6379/1?x=1",
                            **tls_env(certs)})
    assert "redis://cache:6379 is not encrypted" in message and "pw" not in message
    assert "not encrypted" in _setup_error({"HYPHA_BROKER_URL": "redis://localhost/0",
                                            ENV_CA: str(certs.ca)})
    # embedded (no broker): nothing goes over a network
    assert Settings.from_env(tls_env(certs)).embedded


def test_a_store_url_naming_a_missing_tls_file_is_a_setup_error(certs: Certs,
                                                                tmp_path: Path) -> None:
    base = "postgresql+psycopg://hypha@db:5432/hypha?sslmode=verify-full"
    message = _setup_error({"HYPHA_STORE_URL": f"{base}&sslrootcert={tmp_path}/ca.pem"})
    assert message.startswith("HYPHA_STORE_URL sslrootcert")
    message = _setup_error({"HYPHA_STORE_URL": f"{base}&sslkey={tmp_path}/hidden.key"})
    assert "hidden" not in message
    ok = f"{base}&sslrootcert={certs.ca}"
    assert Settings.from_env({"HYPHA_STORE_URL": ok}).store_url == ok  # left as it is
    Settings.from_env({"HYPHA_STORE_URL": f"{base}&sslrootcert=system"})


# -- settings: what Celery and the Redis clients are given --------------------------------
def test_celery_gets_redis_ssl_options_for_rediss_urls(certs: Certs) -> None:
    files = TlsFiles(str(certs.ca), str(certs.client_cert), str(certs.client_key))
    settings = Settings(broker_url="rediss://localhost:6380/0",
                        result_backend="rediss://localhost:6380/1", store_url="sqlite://",
                        embedded=False, tls=files)
    conf = celery_config(settings)
    expected = {"ssl_cert_reqs": ssl.CERT_REQUIRED, "ssl_check_hostname": True,
                "ssl_ca_certs": str(certs.ca), "ssl_certfile": str(certs.client_cert),
                "ssl_keyfile": str(certs.client_key)}
    assert conf["broker_use_ssl"] == expected == conf["redis_backend_use_ssl"]
    assert conf["broker_url"] == settings.broker_url  # no paths in what the banner prints
    app = Celery("tls-unit", set_as_current=False)
    app.config_from_object(conf)
    try:
        params = app.backend.connparams  # Celery's Redis backend accepts them as they are
        assert params["connection_class"] is redis.SSLConnection
        assert params["ssl_ca_certs"] == str(certs.ca)
        assert params["ssl_cert_reqs"] == ssl.CERT_REQUIRED
        with app.connection_for_write() as conn:
            assert conn.ssl == expected
    finally:
        app.close()


def test_rediss_without_files_still_verifies_against_the_system_trust_store() -> None:
    assert redis_ssl(TlsFiles()) == {"ssl_cert_reqs": ssl.CERT_REQUIRED,
                                     "ssl_check_hostname": True}
    conf = celery_tls("rediss://h:6380/0", "rediss://h:6380/1", TlsFiles())
    assert conf["broker_use_ssl"]["ssl_cert_reqs"] == ssl.CERT_REQUIRED
    assert celery_tls("redis://h/0", "redis://h/1", TlsFiles()) == {}


def test_amqps_gets_py_amqp_ssl_options_with_the_urls_host_name(certs: Certs) -> None:
    files = TlsFiles(str(certs.ca))
    url = "amqps://guest:guest@rabbit.internal:5671//"
    assert celery_tls(url, "rediss://cache/1", files)["broker_use_ssl"] == {
        "cert_reqs": ssl.CERT_REQUIRED, "server_hostname": "rabbit.internal",
        "ca_certs": str(certs.ca)}
    both = TlsFiles(str(certs.ca), str(certs.client_cert), str(certs.client_key))
    assert amqp_ssl(both, "amqps://a//;amqps://b//")["server_hostname"] is None
    assert amqp_ssl(both, url)["keyfile"] == str(certs.client_key)


def test_hypha_redis_clients_get_the_files_in_the_url_query(certs: Certs) -> None:
    files = TlsFiles("/etc/my ca.pem", "/c.pem", "/c.key")
    url = redis_client_url("rediss://:pw@cache:6380/2", files)
    assert url == ("rediss://:pw@cache:6380/2?ssl_cert_reqs=required&ssl_check_hostname=true"
                   "&ssl_ca_certs=/etc/my%20ca.pem&ssl_certfile=/c.pem&ssl_keyfile=/c.key")
    kwargs = redis.connection.parse_url(url)
    assert kwargs["ssl_ca_certs"] == "/etc/my ca.pem" and kwargs["ssl_check_hostname"] is True
    # what the URL says wins; a plain URL is left alone
    own = redis_client_url("rediss://cache/0?ssl_cert_reqs=none&ssl_ca_certs=/x.pem", files)
    assert "ssl_cert_reqs=none" in own and "ssl_ca_certs=/x.pem" in own
    assert "ssl_check_hostname" not in own and "my%20ca" not in own
    assert redis_client_url("redis://cache/0", files) == "redis://cache/0"
    hypha = Hypha(Settings(broker_url="rediss://localhost:1/0", store_url="sqlite://",
                           result_backend="rediss://localhost:1/1", embedded=False, tls=files))
    try:
        assert isinstance(hypha.notifier, RedisNotifier)
        kwargs = hypha.notifier.client.connection_pool.connection_kwargs
        assert kwargs["ssl_ca_certs"] == "/etc/my ca.pem" and kwargs["ssl_keyfile"] == "/c.key"
    finally:
        hypha.close()
        hypha.celery.close()


# -- servers with TLS ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def redis_tls(certs: Certs) -> Iterator[int]:
    with tls_redis(certs) as port:
        if port is None:
            services.unavailable("redis-server (with TLS)")
        assert port is not None
        yield port


@pytest.fixture(scope="module")
def pg_tls(certs: Certs) -> Iterator[int]:
    with tls_postgres(certs) as port:
        if port is None:
            services.unavailable("PostgreSQL server binaries (initdb, pg_ctl)")
        assert port is not None
        yield port


@pytest.fixture(scope="module")
def rabbit_tls(certs: Certs) -> Iterator[int]:
    with tls_rabbitmq(certs) as port:
        if port is None:
            services.unavailable("rabbitmq-server")
        assert port is not None
        yield port


def fresh_database(port: int, certs: Certs) -> str:
    """A new database in the TLS cluster: its verify-full URL."""
    name = f"hypha_tls_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(pg_url(port, certs.ca), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    finally:
        admin.dispose()
    return pg_url(port, certs.ca, name)


def run_through_a_worker(env: dict[str, str], log: Path) -> None:
    """The client and a ``celery worker`` process, both from ``env``: the demo graph
    runs end to end (its chord through the result backend)."""
    settings = Settings.from_env(env)
    client = tls_app.build(settings)
    client.store.migrate()
    backends = Backends("tls", settings.broker_url, settings.result_backend,
                        settings.store_url)
    tls_only = {k: v for k, v in env.items() if k.startswith("HYPHA_TLS_")}
    worker = Worker(backends, log, queues=sorted(client.queues()), app=tls_app.APP,
                    env=tls_only, concurrency=2)
    try:
        worker.start(client.celery)
        try:
            run, result = run_demo(client, timeout=30.0)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n--- worker log ---\n{worker.tail()}") from None
        assert sorted(result["sources"]) == sorted(SOURCES)
        assert_well_formed(run)
        assert any(e.kind == "node.fanout.scheduled" for e in run.events())
    finally:
        worker.stop()
        close_client(client)
        release_pools()


def _redis_error(url: str, files: TlsFiles) -> str:
    client = redis.Redis.from_url(redis_client_url(url, files), socket_connect_timeout=5,
                                  socket_timeout=5)
    try:
        with pytest.raises(redis.exceptions.ConnectionError) as info:
            client.ping()
    finally:
        client.close()
    return str(info.value)


@pytest.mark.services
def test_a_graph_runs_through_a_worker_over_rediss_with_mutual_tls(
        certs: Certs, redis_tls: int, pg_tls: int, tmp_path: Path) -> None:
    env = {"HYPHA_BROKER_URL": f"rediss://localhost:{redis_tls}/0",
           "HYPHA_RESULT_BACKEND": f"rediss://localhost:{redis_tls}/1",
           "HYPHA_STORE_URL": fresh_database(pg_tls, certs), **tls_env(certs)}
    run_through_a_worker(env, tmp_path / "worker.log")


@pytest.mark.services
def test_redis_refuses_a_client_without_the_ca_the_host_name_or_a_certificate(
        certs: Certs, redis_tls: int) -> None:
    url = f"rediss://localhost:{redis_tls}/0"
    ours = TlsFiles(str(certs.ca), str(certs.client_cert), str(certs.client_key))
    system_ca = TlsFiles(None, str(certs.client_cert), str(certs.client_key))
    assert "certificate verify failed" in _redis_error(url, system_ca)
    other_ca = TlsFiles(str(certs.other_ca), str(certs.client_cert), str(certs.client_key))
    assert "certificate verify failed" in _redis_error(url, other_ca)
    by_ip = _redis_error(f"rediss://127.0.0.1:{redis_tls}/0", ours)
    assert "mismatch" in by_ip, by_ip  # the certificate names localhost only
    _redis_error(url, TlsFiles(str(certs.ca)))  # mutual TLS: no client certificate
    client = redis.Redis.from_url(redis_client_url(url, ours))
    try:
        assert client.ping()
    finally:
        client.close()


@pytest.mark.services
def test_a_client_without_the_ca_cannot_enqueue_over_rediss(
        certs: Certs, redis_tls: int, tmp_path: Path) -> None:
    env = {"HYPHA_BROKER_URL": f"rediss://localhost:{redis_tls}/0",
           "HYPHA_STORE_URL": f"sqlite:///{tmp_path / 'hypha.db'}",
           ENV_CERT: str(certs.client_cert), ENV_KEY: str(certs.client_key)}
    settings = Settings.from_env(env)
    client = tls_app.build(settings)
    client.celery.conf.broker_connection_max_retries = 0
    client.celery.conf.broker_transport_options = {"max_retries": 0}
    try:
        client.store.migrate()
        with pytest.raises(BrokerUnavailable) as info:
            client.start(GRAPH_ID, {"question": "q"})
        assert "recorded as run.failed" in str(info.value)
    finally:
        close_client(client)
        release_pools()


@pytest.mark.services
def test_the_store_over_verify_full_tls(certs: Certs, pg_tls: int) -> None:
    url = fresh_database(pg_tls, certs)
    hypha = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                           store_url=url, embedded=True))
    try:
        hypha.store.migrate()
        run, result = run_demo(hypha)
        assert sorted(result["sources"]) == sorted(SOURCES)
        assert_well_formed(run)
        with hypha.store.engine.connect() as conn:
            row = conn.exec_driver_sql(
                "SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()").one()
        assert row[0] is True and row[1].startswith("TLS")
    finally:
        hypha.close()


def _store_refused(url: str) -> str:
    store = EventStore(url)
    try:
        with pytest.raises(STORE_ERRORS) as info:
            store.migrate()
    finally:
        store.dispose()
    message = store_error(info.value)
    assert message is not None
    return message


@pytest.mark.services
def test_the_store_refuses_another_ca_another_host_name_and_plain_connections(
        certs: Certs, pg_tls: int) -> None:
    assert "certificate verify failed" in _store_refused(pg_url(pg_tls, certs.other_ca))
    by_ip = _store_refused(pg_url(pg_tls, certs.ca, host="127.0.0.1"))
    assert "does not match host name" in by_ip, by_ip
    plain = _store_refused(pg_url(pg_tls, certs.ca, sslmode="disable"))
    assert "no pg_hba.conf entry" in plain and "no encryption" in plain, plain


@pytest.mark.services
def test_a_graph_runs_through_a_worker_over_amqps(
        certs: Certs, rabbit_tls: int, redis_tls: int, pg_tls: int, tmp_path: Path) -> None:
    env = {"HYPHA_BROKER_URL": f"amqps://guest:guest@localhost:{rabbit_tls}//",
           "HYPHA_RESULT_BACKEND": f"rediss://localhost:{redis_tls}/2",
           "HYPHA_STORE_URL": fresh_database(pg_tls, certs), **tls_env(certs)}
    run_through_a_worker(env, tmp_path / "worker.log")


def _amqp_error(url: str, options: dict[str, Any]) -> BaseException:
    conn = Connection(url, ssl=options, connect_timeout=5)
    try:
        with pytest.raises(Exception) as info:
            conn.ensure_connection(max_retries=1)
    finally:
        conn.release()
    return info.value


@pytest.mark.services
def test_rabbitmq_refuses_a_client_without_the_ca_or_by_another_host_name(
        certs: Certs, rabbit_tls: int) -> None:
    url = f"amqps://guest:guest@localhost:{rabbit_tls}//"
    error = _amqp_error(url, amqp_ssl(TlsFiles(), url))
    assert "certificate verify failed" in str(error), repr(error)
    by_ip = f"amqps://guest:guest@127.0.0.1:{rabbit_tls}//"
    error = _amqp_error(by_ip, amqp_ssl(TlsFiles(str(certs.ca)), by_ip))
    assert "mismatch" in str(error), repr(error)
    with Connection(url, ssl=amqp_ssl(TlsFiles(str(certs.ca)), url), connect_timeout=5) as conn:
        conn.ensure_connection(max_retries=1)
