"""The benchmark application: hypha graphs AND raw Celery tasks on ONE Celery app.

One worker process tree (``celery -A bench.app:celery worker -P prefork -c 2 -E``,
consuming ``hypha.coordinator,hypha.nodes,celery``) serves both sides, so broker,
result backend, serializer, prefetch and event settings are identical.

Environment (the bench scripts set these before importing this module):

* ``BENCH_REDIS_URL``  broker and result backend (default ``redis://127.0.0.1:6379/11``)
* ``BENCH_STORE_URL``  hypha event store (the scripts create a fresh PostgreSQL database)
* ``BENCH_PROFILE``    a directory: each pool process profiles itself with cProfile and
  dumps ``worker-<pid>.prof`` there (see ``bench/profile_worker.py``)
* ``BENCH_LLM_URL``    the local provider's root URL: ``bench_llm`` (one node, one
  ``ctx.llm`` call) calls it (``bench/models.py concurrency``)
* ``BENCH_OBSERVE``    ``1``: the app's middleware are :func:`observers`, tracing and metrics
  as in production (``TracingMiddleware`` on an SDK ``TracerProvider`` with a
  ``BatchSpanProcessor`` whose exporter drops the spans, and ``PrometheusMiddleware``);
  ``bench/observability.py`` runs a worker so (its B side)
* ``BENCH_TRACE_RATIO`` the share of runs :func:`observers`' tracing samples (default ``1``)
* ``BENCH_OTEL_CELERY`` ``1``: OpenTelemetry's own Celery instrumentation
  (``CeleryInstrumentor``) in each pool process (``worker_process_init``, as its docs say),
  on a provider like :func:`observers`' (:func:`dropping_provider`);
  ``bench/observability.py`` runs a worker so (the raw side's traced worker)
* ``BENCH_SPANS_DIR``  a directory: each pool process writes ``spans-<pid>.json`` there at its
  shutdown (the spans its dropping exporters were handed, after a flush)
* ``BENCH_PRELOAD``    a module imported first, in the driver and in the worker (for trying
  out a patched copy of a library function; never set by the scripts)
"""

from __future__ import annotations

import cProfile
import dataclasses
import importlib
import json
import os
from collections.abc import Sequence
from typing import Any

import redis
from celery.signals import (
    task_postrun,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
    worker_shutdown,
)

from hypha_celery import FanOut, Finish, Graph, Hypha, Next, Settings
from hypha_celery.backends.llm.client import LLMClient
from hypha_celery.graph import Context, Node, Outcome

if os.environ.get("BENCH_PRELOAD"):
    importlib.import_module(os.environ["BENCH_PRELOAD"])

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/11")
STORE_URL = os.environ.get("BENCH_STORE_URL", "sqlite:///.hypha/bench.db")
RAW_QUEUE = "celery"
COUNTER_KEY = "bench:noop:count"

_KNOBS = ("HYPHA_INLINE_COORDINATOR", "HYPHA_LOCAL_STEPS_BUDGET")


def bench_settings(redis_url: str = REDIS_URL, store_url: str = STORE_URL) -> Settings:
    """The bench settings; ``HYPHA_INLINE_COORDINATOR`` / ``HYPHA_LOCAL_STEPS_BUDGET`` from
    the environment still apply (e.g. ``HYPHA_LOCAL_STEPS_BUDGET=0``: one hop per step)."""
    settings = Settings(broker_url=redis_url, result_backend=redis_url, store_url=store_url,
                        embedded=False)
    knobs = {k: os.environ[k] for k in _KNOBS if k in os.environ}
    if not knobs:
        return settings
    env = Settings.from_env({"HYPHA_BROKER_URL": redis_url, "HYPHA_STORE_URL": store_url,
                             **knobs})
    return dataclasses.replace(settings, inline_coordinator=env.inline_coordinator,
                               local_budget=env.local_budget)


def _llm() -> LLMClient | None:
    url = os.environ.get("BENCH_LLM_URL")
    return LLMClient(base_urls={"openai": f"{url}/v1"}) if url else None


#: Spans this process's dropping exporters were handed (:func:`dropping_provider`).
EXPORTED = {"spans": 0}


def _dropping_exporter() -> Any:
    """A span exporter that counts the spans it is handed and keeps nothing: they are
    built, batched and handed over, then dropped (everything but the network)."""
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class DroppedSpans(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            EXPORTED["spans"] += len(spans)
            return SpanExportResult.SUCCESS

    return DroppedSpans()


_providers: list[Any] = []


def dropping_provider(ratio: float | None = None) -> Any:
    """An SDK ``TracerProvider`` as a production app has one, but for the network: sampler
    ``ParentBased(TraceIdRatioBased(ratio))`` (``None``: ``BENCH_TRACE_RATIO``, default 1),
    a ``BatchSpanProcessor`` (it survives the prefork fork) to an exporter that counts
    the spans and drops them. The
    same for hypha's tracing and for OpenTelemetry's Celery instrumentation."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    if ratio is None:  # the share of runs traced (head sampling by the trace id)
        ratio = float(os.environ.get("BENCH_TRACE_RATIO", "1"))
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(ratio)))
    provider.add_span_processor(BatchSpanProcessor(_dropping_exporter()))
    _providers.append(provider)
    return provider


def observers(which: str = "1", ratio: float | None = None) -> list[Any]:
    """Tracing and metrics as a production app has them: ``TracingMiddleware`` on
    :func:`dropping_provider` (``ratio``: the share of runs sampled) and
    ``PrometheusMiddleware`` on prometheus_client's registry."""
    from hypha_celery.metrics import PrometheusMiddleware
    from hypha_celery.tracing import TracingMiddleware

    out: list[Any] = []
    if which in ("1", "tracing"):
        out.append(TracingMiddleware(dropping_provider(ratio)))
    if which in ("1", "metrics"):
        out.append(PrometheusMiddleware())
    return out


OBSERVE = os.environ.get("BENCH_OBSERVE", "").strip()
hypha = Hypha(bench_settings(), llm=_llm(),
              middleware=observers(OBSERVE) if OBSERVE not in ("", "0") else ())
celery = hypha.celery

# -- hypha graphs ------------------------------------------------------------


def noop_node(state: dict[str, Any], input: Any) -> dict[str, Any]:
    return {}


def linear_graph(graph_id: str, length: int) -> Graph:
    """``length`` no-op nodes one after the other, then Finish."""

    def policy(ctx: Context) -> Next | Finish:
        return Next("noop") if ctx.step < length else Finish({"steps": ctx.step})

    return Graph(id=graph_id, nodes={"noop": noop_node}, decision_policy=policy,
                 max_steps=length + 1, execution_timeout=600.0, node_timeout=60.0)


FANOUT_WIDTH = 100


def merge(state: dict[str, Any], outcomes: list[Outcome]) -> dict[str, Any]:
    return {"ok": sum(1 for o in outcomes if o.ok)}


def fanout_policy(ctx: Context) -> FanOut | Finish:
    if ctx.step == 0:
        return FanOut([Next("edge", i) for i in range(FANOUT_WIDTH)], reducer="merge")
    return Finish({"ok": ctx.state.get("ok")})


LLM_MODEL = "openai:gpt-bench"


def llm_node(state: dict[str, Any], input: Any, ctx: Any) -> dict[str, Any]:
    reply = ctx.llm(LLM_MODEL, [{"role": "user", "content": "Say ok."}])
    return {"text": reply.text}


def llm_policy(ctx: Context) -> Next | Finish:
    return Next("call") if ctx.step == 0 else Finish(ctx.state)


LLM = hypha.register(Graph(id="bench_llm", nodes={"call": Node(llm_node, models=[LLM_MODEL])},
                           decision_policy=llm_policy, execution_timeout=600.0,
                           node_timeout=300.0))
LINEAR = hypha.register(linear_graph("bench_linear20", 20))
SHORT = hypha.register(linear_graph("bench_linear5", 5))
PAIR = hypha.register(linear_graph("bench_pair", 2))
FANOUT = hypha.register(Graph(id="bench_fanout100", nodes={"edge": noop_node},
                              reducers={"merge": merge}, decision_policy=fanout_policy,
                              max_steps=3, execution_timeout=600.0))

# -- raw Celery tasks (same app, own queue) ---------------------------------

_counter: dict[int, Any] = {}


def counter_client() -> Any:
    client = _counter.get(os.getpid())
    if client is None:
        client = _counter[os.getpid()] = redis.Redis.from_url(REDIS_URL)
    return client


@celery.task(name="bench.noop", queue=RAW_QUEUE, ignore_result=True)
def noop() -> None:
    """A no-op whose only trace is one INCR, so the driver can count completions."""
    counter_client().incr(COUNTER_KEY)


@celery.task(name="bench.one", queue=RAW_QUEUE)
def one() -> int:
    """No-op with a stored result (a chord header needs results)."""
    return 1


@celery.task(name="bench.add", queue=RAW_QUEUE)
def add(x: int, y: int = 1) -> int:
    return x + y


@celery.task(name="bench.tsum", queue=RAW_QUEUE)
def tsum(xs: list[int]) -> int:
    return sum(xs)


# -- optional in-worker profiling ----------------------------------------------

PROFILE_DIR = os.environ.get("BENCH_PROFILE", "")
_prof: dict[str, Any] = {}


def _dump(kind: str = "worker") -> None:
    prof = _prof.get("p")
    if prof is not None:
        prof.dump_stats(os.path.join(PROFILE_DIR, f"{kind}-{os.getpid()}.prof"))
        prof.enable()  # dump_stats() disables the profiler


if PROFILE_DIR:

    @worker_init.connect
    def _start_main_profile(**_: Any) -> None:
        _prof["p"] = cProfile.Profile()
        _prof["p"].enable()

    @worker_shutdown.connect
    def _stop_main_profile(**_: Any) -> None:
        _dump("main")

    @worker_process_init.connect
    def _start_profile(**_: Any) -> None:
        _prof["p"] = cProfile.Profile()
        _prof["n"] = 0
        _prof["p"].enable()

    @task_postrun.connect
    def _count(**_: Any) -> None:
        _prof["n"] = _prof.get("n", 0) + 1
        if _prof["n"] % 200 == 0:
            _dump()

    @worker_process_shutdown.connect
    def _stop_profile(**_: Any) -> None:
        _dump()


# -- OpenTelemetry's own Celery instrumentation, and the spans exported -------------


def instrument_celery(provider: Any = None) -> Any:
    """``CeleryInstrumentor().instrument()`` on ``provider`` (default: a new
    :func:`dropping_provider`): the official instrumentation, a span per publish and per
    task run, the context in the message headers. Returns the instrumentor
    (``uninstrument()`` switches it off again)."""
    from opentelemetry.instrumentation.celery import CeleryInstrumentor

    instrumentor = CeleryInstrumentor()
    instrumentor.instrument(tracer_provider=provider or dropping_provider(),
                            skip_dep_check=True)
    return instrumentor


if os.environ.get("BENCH_OTEL_CELERY", "").strip() == "1":

    @worker_process_init.connect(weak=False)
    def _instrument_child(**_: Any) -> None:
        instrument_celery()


SPANS_DIR = os.environ.get("BENCH_SPANS_DIR", "")

if SPANS_DIR:

    @worker_process_shutdown.connect(weak=False)
    def _write_spans(**_: Any) -> None:
        for provider in _providers:
            provider.force_flush(5000)
        path = os.path.join(SPANS_DIR, f"spans-{os.getpid()}.json")
        with open(path, "w") as out:
            json.dump({"pid": os.getpid(), "spans": EXPORTED["spans"]}, out)
