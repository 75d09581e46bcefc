"""Fresh stores, embedded settings and real ``celery worker`` processes for tests."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypha_celery.client.hypha import Hypha
from hypha_celery.loading import load_object
from hypha_celery.runtime.config import Settings
from hypha_celery.store import scratch_database

#: Seconds a worker may take to answer its first ping.
START_TIMEOUT = 60.0
Builder = Callable[[Settings], Hypha]


def embedded_settings(store_url: str, **overrides: Any) -> Settings:
    """The embedded default on ``store_url``: memory broker, in-process worker thread."""
    base: dict[str, Any] = {"broker_url": "memory://", "result_backend": "cache+memory://",
                            "store_url": store_url, "embedded": True}
    return Settings(**{**base, **overrides})


@contextmanager
def fresh_store_url(directory: Path, admin_url: str | None = None) -> Iterator[str]:
    """A store URL nobody else uses: a SQLite file in ``directory``, or (``admin_url``, a
    PostgreSQL URL) a new database on that server, dropped afterwards."""
    if not admin_url:
        yield f"sqlite:///{directory / 'hypha.db'}"
        return
    with scratch_database(admin_url) as url:
        yield url


class WorkerProcess:
    """A ``celery worker`` subprocess running the builder ``app`` (``MODULE:ATTR``, a
    ``build(settings) -> Hypha``) on the given broker, result backend and store, and
    :attr:`client`, the same builder's Hypha in this process (not embedded)."""

    def __init__(self, app: str, *, broker_url: str, store_url: str,
                 result_backend: str | None = None, log: Path, cwd: Path,
                 pool: str = "prefork", concurrency: int = 2,
                 loglevel: str = "WARNING", env: dict[str, str] | None = None) -> None:
        self.app = app
        self.settings = Settings(broker_url=broker_url,
                                 result_backend=result_backend or broker_url,
                                 store_url=store_url, embedded=False)
        self.log_path = log
        self.cwd = cwd
        builder: Builder = load_object(app, option="hypha_worker_app", cwd=cwd)  # type: ignore[assignment]
        if not callable(builder):
            raise TypeError(f"{app} must name a callable build(settings) -> Hypha")
        self.client: Hypha = builder(self.settings)
        self.name = f"hypha-test-{uuid.uuid4().hex[:10]}@{socket.gethostname()}"
        self.argv = [sys.executable, "-m", "celery", "-A", "hypha_celery.testing.worker_app:celery",
                     "worker", "-P", pool, "-c", str(concurrency),
                     "-Q", ",".join(sorted(self.client.queues())), "--without-mingle",
                     "--without-gossip", "-l", loglevel, "-n", self.name]
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("HYPHA_")}
        path = os.pathsep.join(p for p in (str(cwd), self.env.get("PYTHONPATH", "")) if p)
        self.env.update(env or {})
        self.env.update(PYTHONPATH=path, PYTHONUNBUFFERED="1", HYPHA_TEST_APP=app,
                        HYPHA_BROKER_URL=self.settings.broker_url,
                        HYPHA_RESULT_BACKEND=self.settings.result_backend,
                        HYPHA_STORE_URL=store_url)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = START_TIMEOUT, *, purge_queues: bool = True,
              ) -> WorkerProcess:
        """Migrate the store, drop messages left in the app's queues (unless
        ``purge_queues`` is false: a restart that finds what the broker kept), start the
        worker and wait for it to answer a ping."""
        self.client.store.migrate()
        if purge_queues:
            purge(self.settings.broker_url, sorted(self.client.queues()))
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(self.argv, cwd=self.cwd, env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT)
        end = time.monotonic() + timeout
        while not self._pong():
            if time.monotonic() > end:
                self.stop()
                raise RuntimeError(f"worker {self.name} did not answer a ping within "
                                   f"{timeout}s:\n{self.log()}")
        return self

    def _pong(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"worker exited with {self.proc.returncode}:\n{self.log()}")
        return bool(self.client.celery.control.ping(destination=[self.name], timeout=0.5))

    def log(self, chars: int = 4000) -> str:
        """The end of the worker's output."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop the worker (SIGTERM: warm shutdown, then SIGKILL) and close the client."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None
        self.client.close()
        self.client.celery.close()


@contextmanager
def start_worker(app: str, **options: Any) -> Iterator[WorkerProcess]:
    """A started :class:`WorkerProcess` (keyword options as its constructor's), stopped
    at the end."""
    worker = WorkerProcess(app, **options)
    try:
        yield worker.start()
    finally:
        worker.stop()


def purge(broker_url: str, queues: Sequence[str]) -> None:
    """Drop the messages of ``queues`` (an earlier session may have left some)."""
    import kombu

    connection: Any = getattr(kombu, "Connection")  # noqa: B009 (kombu exports it lazily)
    with connection(broker_url) as conn:
        for name in queues:
            channel = conn.channel()
            try:
                channel.queue_purge(name)
            except conn.channel_errors:
                pass  # no such queue yet
            finally:
                with contextlib.suppress(*conn.channel_errors, *conn.connection_errors):
                    channel.close()
