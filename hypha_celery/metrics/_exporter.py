"""One ``/metrics`` endpoint per worker: ``HYPHA_METRICS_PORT`` (and ``HYPHA_METRICS_ADDR``,
default ``0.0.0.0``).

A prefork worker's tasks run in child processes, so the metrics use prometheus_client's
multiprocess mode: each process writes its values to files under
``PROMETHEUS_MULTIPROC_DIR`` (a fresh temporary directory unless the environment names
one, set by :func:`prepare_multiprocess` when the middleware is built, before its
metrics), and the worker's main process serves their sum (``MultiProcessCollector``)
together with the live gauges of :class:`~hypha_celery.metrics.HyphaCollector`.
The exporter is a middleware bound to the app's worker processes
(:mod:`~hypha_celery.middleware._celery_signals`): it serves once the worker is ready
(``process_boot`` of the main process), a child that exits is marked dead (its
``process_shutdown``), and the server and the temporary directory go with the worker
(the main process's ``process_shutdown``)."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from typing import Any

from hypha_celery._private_api import use_multiprocess_values
from hypha_celery.errors import SetupError
from hypha_celery.metrics._client import multiprocess, prometheus
from hypha_celery.middleware import Middleware, MiddlewareStack, Process
from hypha_celery.middleware import _celery_signals as celery_signals

log = logging.getLogger(__name__)

PORT_ENV = "HYPHA_METRICS_PORT"
ADDR_ENV = "HYPHA_METRICS_ADDR"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

#: The temporary directory this process made for multiprocess mode (removed at exit).
_made_dir: list[str] = []


def metrics_port() -> int | None:
    """``HYPHA_METRICS_PORT`` as a port number, or None when unset or empty."""
    raw = os.environ.get(PORT_ENV, "").strip()
    if not raw:
        return None
    try:
        port = int(raw)
    except ValueError:
        raise SetupError(f"{PORT_ENV} must be a port number, not {raw!r}") from None
    if not 0 < port < 65536:
        raise SetupError(f"{PORT_ENV} must be 1-65535, not {port}")
    return port


def prepare_multiprocess() -> str | None:
    """With ``HYPHA_METRICS_PORT`` set, the multiprocess directory (made when the
    environment names none). Call before prometheus_client's first import."""
    if metrics_port() is None:
        return None
    path = os.environ.get(MULTIPROC_ENV)
    if not path:
        path = tempfile.mkdtemp(prefix="hypha-metrics-")
        _made_dir.append(path)
        os.environ[MULTIPROC_ENV] = path
    use_multiprocess_values()  # the metrics built from now on write to the files
    return path


def registry(*collectors: Any) -> Any:
    """A registry of the multiprocess sum (or the global registry's metrics outside
    multiprocess mode) and ``collectors``."""
    p = prometheus()
    reg = p.CollectorRegistry()
    if os.environ.get(MULTIPROC_ENV):
        multiprocess().MultiProcessCollector(reg)
    else:
        reg.register(_Global(p.REGISTRY))
    for collector in collectors:
        reg.register(collector)
    return reg


class _Global:
    """The global registry's metrics, inside another registry."""

    def __init__(self, source: Any) -> None:
        self.source = source

    def collect(self) -> Any:
        return self.source.collect()


def serve(port: int, reg: Any, addr: str = "0.0.0.0") -> Any:
    """Serve ``reg`` on ``http://addr:port/metrics``; returns the server (``shutdown()``)."""
    server, _thread = prometheus().start_http_server(port, addr=addr, registry=reg)
    return server


class MetricsExporter(Middleware):
    """Serves ``/metrics`` on ``port`` from a worker's main process (its registry:
    :func:`registry` of ``collectors``) while the worker runs."""

    def __init__(self, port: int, *collectors: Any) -> None:
        self.port, self.collectors = port, collectors
        self.servers: list[Any] = []

    def process_boot(self, process: Process) -> None:
        if process.child or self.servers:
            return
        addr = os.environ.get(ADDR_ENV, "0.0.0.0")
        self.servers.append(serve(self.port, registry(*self.collectors), addr))
        log.info("hypha metrics: serving http://%s:%d/metrics", addr, self.port)

    def process_shutdown(self, process: Process) -> None:
        if process.child:
            if os.environ.get(MULTIPROC_ENV):
                multiprocess().mark_process_dead(process.pid)
            return
        while self.servers:
            self.servers.pop().shutdown()
        while _made_dir:
            shutil.rmtree(_made_dir.pop(), ignore_errors=True)


def install(app: Any, *collectors: Any) -> None:
    """With ``HYPHA_METRICS_PORT`` set, make the workers of the Celery app ``app`` serve
    their metrics (and ``collectors``) when ready."""
    port = metrics_port()
    if port is None:
        return
    celery_signals.bind(app, MiddlewareStack([MetricsExporter(port, *collectors)]))
