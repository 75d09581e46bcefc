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
* ``BENCH_PRELOAD``    a module imported first, in the driver and in the worker (for trying
  out a patched copy of a library function; never set by the scripts)
"""

from __future__ import annotations

import cProfile
import dataclasses
import importlib
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


def observers(which: str = "1") -> list[Any]:
    """Tracing and metrics as a production app has them: ``TracingMiddleware`` on an SDK
    ``TracerProvider`` whose ``BatchSpanProcessor`` (it survives the prefork fork) exports
    to an exporter that counts the spans and keeps nothing, and ``PrometheusMiddleware`` on
    prometheus_client's registry."""
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    from hypha_celery.metrics import PrometheusMiddleware
    from hypha_celery.tracing import TracingMiddleware

    class DroppedSpans(SpanExporter):
        """The spans are built, batched and handed over, then dropped."""

        count = 0

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            DroppedSpans.count += len(spans)
            return SpanExportResult.SUCCESS

    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    # BENCH_TRACE_RATIO: the share of runs traced (head sampling by the run's trace id)
    ratio = float(os.environ.get("BENCH_TRACE_RATIO", "1"))
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(ratio)))
    provider.add_span_processor(BatchSpanProcessor(DroppedSpans()))
    out: list[Any] = []
    if which in ("1", "tracing"):
        out.append(TracingMiddleware(provider))
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
