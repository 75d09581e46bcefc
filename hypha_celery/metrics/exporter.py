"""One ``/metrics`` endpoint per worker: ``HYPHA_METRICS_PORT`` (and ``HYPHA_METRICS_ADDR``,
default ``0.0.0.0``).

A prefork worker's tasks run in child processes, so the metrics use prometheus_client's
multiprocess mode: each process writes its values to files under
``PROMETHEUS_MULTIPROC_DIR`` (a fresh temporary directory unless the environment names
one, set by :func:`prepare_multiprocess` when the middleware is built, before its
metrics), and the worker's main process serves their sum (``MultiProcessCollector``)
together with the live gauges of :class:`~hypha_celery.metrics.collector.HyphaCollector`.
A child that exits is marked dead (``worker_process_shutdown``); the temporary directory
goes with the worker."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
from typing import Any

from celery.signals import worker_process_shutdown, worker_ready, worker_shutdown

from hypha_celery.errors import SetupError
from hypha_celery.metrics.client import multiprocess, prometheus

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
    _multiprocess_values()
    return path


def _multiprocess_values() -> None:
    """prometheus_client picks its value class when first imported, and the ``celery``
    command may have imported it already (Flower's command plugin does): pick again, so
    that the metrics built from now on write to the multiprocess files."""
    values: Any = sys.modules.get("prometheus_client.values")
    if values is not None and values.ValueClass is values.MutexValue:
        values.ValueClass = values.get_value_class()


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


def install(app: Any, *collectors: Any) -> None:
    """With ``HYPHA_METRICS_PORT`` set, make the workers of the Celery app ``app`` serve
    their metrics (and ``collectors``) when ready."""
    port = metrics_port()
    if port is None:
        return
    servers: list[Any] = []

    def start(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is not app or servers:
            return
        addr = os.environ.get(ADDR_ENV, "0.0.0.0")
        servers.append(serve(port, registry(*collectors), addr))
        log.info("hypha metrics: serving http://%s:%d/metrics", addr, port)

    def child_exit(pid: int | None = None, **_: Any) -> None:
        if os.environ.get(MULTIPROC_ENV):
            multiprocess().mark_process_dead(pid or os.getpid())

    def stop(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is not app:
            return
        while servers:
            servers.pop().shutdown()
        while _made_dir:
            shutil.rmtree(_made_dir.pop(), ignore_errors=True)

    worker_ready.connect(start, weak=False)
    worker_process_shutdown.connect(child_exit, weak=False)
    worker_shutdown.connect(stop, weak=False)
