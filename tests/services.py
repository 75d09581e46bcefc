"""Real services for tests: use the machine's, else start a private one, else skip
(and under CI=true a missing service is a failure, never a skip)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(what: str) -> None:
    msg = f"{what} is not available"
    if IN_CI:
        pytest.fail(f"{msg} (CI=true: service tests must not skip)")
    pytest.skip(msg)  # locally only: under CI the line above fails instead


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def redis_server() -> Iterator[str | None]:
    """Yield a base Redis URL (no db number) or None."""
    host, port = os.environ.get("HYPHA_TEST_REDIS_HOST", "127.0.0.1"), 6379
    if port_open(host, port):
        yield f"redis://{host}:{port}"
        return
    binary = shutil.which("redis-server")
    if binary is None:
        yield None
        return
    port = free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL)
    try:
        _wait_port(port)
        yield f"redis://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


@contextmanager
def postgres_server() -> Iterator[str | None]:
    """Yield a SQLAlchemy URL of a fresh, private database, or None."""
    base = os.environ.get("HYPHA_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
    if not port_open("127.0.0.1", 5432):
        yield None
        return
    import sqlalchemy as sa

    from hypha_celery.store import scratch_database

    with ExitStack() as stack:
        try:
            url = stack.enter_context(scratch_database(base))
        except sa.exc.OperationalError:
            url = None
        yield url


def rabbitmq_url() -> str | None:
    url = os.environ.get("HYPHA_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
    return url if port_open("127.0.0.1", 5672) else None


def _wait_port(port: int, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if port_open("127.0.0.1", port):
            return
        time.sleep(0.05)
    raise RuntimeError(f"service on port {port} did not start")


def tmpdir() -> str:
    return tempfile.mkdtemp(prefix="hypha-test-")
