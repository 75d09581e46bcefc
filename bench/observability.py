"""Observability: what hypha's tracing costs, against OpenTelemetry's own Celery
instrumentation, in ONE run (issue 27, point 6).

The question is not "how much slower is a traced step" (a few %, which one run on a
2-vCPU VM cannot resolve against the ±8 % that one pair of worker environments differs
from the next) but "does hypha's tracing cost more than the official instrumentation
costs raw Celery": a ratio of ratios,

    ours   = hypha traced / hypha untraced        (the 20-node linear graph, ms per step)
    theirs = raw traced / raw untraced            (a 20-hop ``chain`` of ``bench.add``)
    target: ours / theirs <= 1

and, with 10 % of runs sampled, hypha traced-10 % / hypha untraced <= 1.03.

Four worker environments per phase (:class:`SideEnv`: a Redis database, a PostgreSQL
database, a ``bench.app`` worker and a client of its own each), alike but for:

* ``off``: nothing traced; serves both untraced sides (``hypha_off`` and ``raw_off``),
  so its own speed cancels out of the ratio of ratios;
* ``hypha``: ``BENCH_OBSERVE=tracing``: ``TracingMiddleware`` in the worker and the client,
  every run sampled;
* ``hypha10``: the same with ``BENCH_TRACE_RATIO=0.1``: ``ParentBased(TraceIdRatioBased(0.1))``,
  decided once per run from its trace id;
* ``otel``: ``BENCH_OTEL_CELERY=1``: ``CeleryInstrumentor().instrument()`` in each pool
  process (``worker_process_init``), and in the driver around each of its chains (switched
  off again after it: the driver's other clients publish untraced).

Both tracers get the same provider (:func:`bench.app.dropping_provider`: an SDK
``TracerProvider``, sampler ``ParentBased(TraceIdRatioBased(r))``, a ``BatchSpanProcessor``
to an in-process exporter that counts the spans and drops them). Each worker's pool
processes write how many spans they exported at their shutdown (``BENCH_SPANS_DIR``):
``spans_per_run`` shows that both sides really trace.

The five sides run in interleaved rounds (forward, then backward), after a warm-up; the
rounds are split over ``BENCH_OBSERVE_PHASES`` phases, each with fresh environments built
in an order rotated from one phase to the next (A/A runs showed the second-built of two
environments ~3 % slower). Each phase gives its ratios from its own sides' wall time per
step, the mean of the middle 80 % of the runs (a tenth of the runs traced moves it as it
moves the mean, hardly the median; a run stalled by the host's other load does not); the
ratios reported are the geometric means over the phases, with those of medians
(``*_median``) and the medians of the rounds' own ratios (``*_paired``) beside them.
Worker CPU per step (``cpu_*``): each worker's pool processes' over all the rounds (the
tracing done off the task's thread included), its main process's within its own samples
(:func:`_phase`).

    python -m bench.observability          # or: bench/run_all.py observability
    BENCH_OBSERVE_REPEATS=480 BENCH_OBSERVE_PHASES=16 python -m bench.observability
    BENCH_OBSERVE_AA=1 python -m bench.observability   # A/A: nothing traced anywhere
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bench._harness import BenchEnv, standalone, summary, target
from bench.linear import STEPS, _in_worker_per_step

WARMUP = 4
REPEATS = int(os.environ.get("BENCH_OBSERVE_REPEATS", "240"))
#: Phases, each with environments of its own built in a rotated order.
PHASES = int(os.environ.get("BENCH_OBSERVE_PHASES", "8"))
#: ours / theirs (hypha traced / untraced over raw traced / untraced): at most 1.
TARGET_RATIO_OF_RATIOS = 1.0
#: hypha with 10 % of runs traced over hypha untraced.
TARGET_SAMPLED = 1.03
SAMPLED = 0.1
GRAPH = "bench_linear20"
#: ``BENCH_OBSERVE_AA=1``: every environment untraced (an A/A run: the ratios' noise floor).
AA = os.environ.get("BENCH_OBSERVE_AA", "").strip() == "1"

#: Worker environments: what each worker (and client) has switched on.
ENVS: dict[str, dict[str, str]] = {
    "off": {"BENCH_OBSERVE": "0", "BENCH_TRACE_RATIO": "1", "BENCH_OTEL_CELERY": "0"},
    "hypha": {"BENCH_OBSERVE": "tracing", "BENCH_TRACE_RATIO": "1", "BENCH_OTEL_CELERY": "0"},
    "hypha10": {"BENCH_OBSERVE": "tracing", "BENCH_TRACE_RATIO": str(SAMPLED),
                "BENCH_OTEL_CELERY": "0"},
    "otel": {"BENCH_OBSERVE": "0", "BENCH_TRACE_RATIO": "1", "BENCH_OTEL_CELERY": "1"},
}
#: Sides: name -> (environment, what runs: a hypha run of the graph or a raw chain).
SIDES: dict[str, tuple[str, str]] = {
    "hypha_off": ("off", "hypha"), "raw_off": ("off", "raw"),
    "hypha_traced": ("hypha", "hypha"), "hypha_traced10": ("hypha10", "hypha"),
    "raw_traced": ("otel", "raw"),
}


class SideEnv(BenchEnv):
    """A bench environment beside the first (its own Redis database, PostgreSQL database
    and worker), serving the linear graph and ``bench.add``, with ``ENVS[mode]`` in its
    worker's environment and the same switched on in its client."""

    def __init__(self, mode: str, spans_dir: str) -> None:
        super().__init__()
        self.mode = mode
        self.config = ENVS["off"] if AA else ENVS[mode]
        self.sampler: Any = None
        self.providers: list[Any] = []
        # one hash seed for every worker: a process's seed alone moves its speed by a few %
        self.worker_env = {**self.config, "PYTHONHASHSEED": "0", "BENCH_SPANS_DIR": spans_dir}
        self.spans_dir = spans_dir

    def __enter__(self) -> SideEnv:
        kept = {k: os.environ.get(k) for k in ("BENCH_REDIS_URL", "BENCH_STORE_URL")}
        os.environ.pop("BENCH_REDIS_URL", None)  # claim a database of its own
        try:
            super().__enter__()  # sets both for its worker
        finally:
            for key, value in kept.items():  # the first environment's, for the driver
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        return self

    def _load_app(self) -> Any:
        from bench import app
        from hypha_celery import Hypha

        env = self.config
        middleware: list[Any] = []
        if env["BENCH_OBSERVE"] == "tracing":  # as bench.app.observers("tracing")
            from hypha_celery.tracing import TracingMiddleware

            self.providers.append(app.dropping_provider(float(env["BENCH_TRACE_RATIO"])))
            middleware.append(TracingMiddleware(self.providers[0]))
            #: the client's tracing sampler (``None``: untraced): which runs were traced
            self.sampler = middleware[0].sampler
        hypha = Hypha(app.bench_settings(self.redis_url, self.store_url),
                      middleware=middleware)
        hypha.register(app.linear_graph(GRAPH, STEPS))
        celery = hypha.celery

        def add(x: int, y: int = 1) -> Any:  # the worker's bench.add (for its ready check)
            return celery.send_task("bench.add", (x, y), queue=app.RAW_QUEUE)

        hypha.store.migrate()
        return SimpleNamespace(hypha=hypha, celery=celery, add=SimpleNamespace(delay=add))

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        for provider in self.providers:  # the client's: its processor's thread ends
            provider.shutdown()

    def spans_exported(self) -> int:
        """The spans its pool processes exported (read after the worker stopped)."""
        total = 0
        for path in Path(self.spans_dir).glob("spans-*.json"):
            total += int(json.loads(path.read_text())["spans"])
        return total


def _cpu_s(pid: int) -> tuple[float, float]:
    """User + system seconds of a worker's main process, and of its pool children."""
    import psutil

    def used(proc: psutil.Process) -> float:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            return 0.0
        return float(times.user + times.system)

    main = psutil.Process(pid)
    return used(main), sum(map(used, main.children(recursive=True)))


def _tmean(xs: list[float]) -> float:
    """The mean of the middle 80 % (a tenth cut at each end): a tenth of the runs traced
    moves it as it moves the mean, and a run stalled by the host's other load does not."""
    ys = sorted(xs)
    cut = len(ys) // 10
    return statistics.fmean(ys[cut:len(ys) - cut])


@dataclass
class Samples:
    """A side's samples: wall s per run, in-worker s per step (hypha runs only), whether
    each hypha run was sampled by its tracer; its worker's CPU s (:func:`_phase`), and the
    rounds."""

    wall: list[float] = field(default_factory=list)
    inner: list[float] = field(default_factory=list)
    traced: list[bool] = field(default_factory=list)
    window_main: float = 0.0  # the worker's main process's CPU within its own samples
    window_pool: float = 0.0  # its pool children's
    cpu: float = 0.0
    rounds: int = 0

    def extend(self, other: Samples) -> None:
        self.wall += other.wall
        self.inner += other.inner
        self.traced += other.traced
        self.cpu += other.cpu
        self.rounds += other.rounds

    def cpu_per_step(self) -> float:
        return self.cpu / (self.rounds * STEPS)

    def report(self) -> dict[str, Any]:
        out = {"wall_ms_per_step": summary(self.wall, 1000 / STEPS),
               "wall_ms_per_step_mean": round(statistics.fmean(self.wall) * 1000 / STEPS, 3),
               "wall_ms_per_step_tmean": round(_tmean(self.wall) * 1000 / STEPS, 3),
               "worker_cpu_ms_per_step": round(self.cpu_per_step() * 1000, 3)}
        if self.inner:
            out["in_worker_ms_per_step"] = summary(self.inner, 1000)
        if self.traced:
            out["runs_traced"] = sum(self.traced)
        return out


class Side:
    """One side in one phase: its environment's client and worker, its samples."""

    def __init__(self, name: str, env: SideEnv) -> None:
        assert env.app is not None and env.worker is not None
        self.name, self.env = name, env
        self.kind = SIDES[name][1]
        self.hypha, self.pid = env.app.hypha, env.worker.pid
        self.samples = Samples()
        self.run_ids: list[str] = []
        self.sampler = env.sampler
        self.run: Callable[[], None] = self._hypha_run if self.kind == "hypha" else self._chain
        self.otel = env.config["BENCH_OTEL_CELERY"] == "1"

    def sample(self) -> None:
        main0, pool0 = _cpu_s(self.pid)
        instrumentor = _driver_instrumentation() if self.otel else None
        try:
            t0 = time.perf_counter()
            self.run()
            dt = time.perf_counter() - t0
        finally:
            if instrumentor is not None:
                instrumentor.uninstrument()
        self.samples.wall.append(dt)
        main1, pool1 = _cpu_s(self.pid)
        self.samples.window_main += main1 - main0
        self.samples.window_pool += pool1 - pool0

    def _hypha_run(self) -> None:
        run = self.hypha.start(GRAPH)
        result = run.wait(timeout=60)
        assert result == {"steps": STEPS}, result
        self.run_ids.append(run.id)

    def _chain(self) -> None:
        from celery import chain

        from bench.app import RAW_QUEUE

        sig = self.hypha.celery.signature
        hops = [sig("bench.add", args=(0,), queue=RAW_QUEUE)]
        hops += [sig("bench.add", queue=RAW_QUEUE) for _ in range(STEPS - 1)]
        result = chain(*hops).apply_async().get(timeout=60)
        assert result == STEPS, result

    def clear(self) -> None:
        self.samples = Samples()
        self.run_ids.clear()

    def finished(self) -> Samples:
        """Its samples, with the in-worker ones and the sampling decisions (read while its
        store is up)."""
        self.samples.rounds = len(self.samples.wall)
        if self.kind == "hypha":
            self.samples.inner = [_in_worker_per_step(self.hypha, r) for r in self.run_ids]
            if self.sampler is not None:
                self.samples.traced = [_is_sampled(self.sampler, r) for r in self.run_ids]
        return self.samples


def _is_sampled(sampler: Any, run_id: str) -> bool:
    """Whether the run was traced: the decision every process makes for it."""
    from hypha_celery.tracing._middleware import _sampled

    return _sampled(sampler, run_id)


_DRIVER: dict[str, Any] = {}


def _driver_instrumentation() -> Any:
    """OpenTelemetry's Celery instrumentation switched on in the driver, for one chain (on
    one provider, made once)."""
    from bench.app import dropping_provider, instrument_celery

    if "provider" not in _DRIVER:
        _DRIVER["provider"] = dropping_provider(1.0)
    return instrument_celery(_DRIVER["provider"])


@dataclass
class Phase:
    """One phase's samples per side, and the spans each environment's workers exported."""

    samples: dict[str, Samples]
    spans: dict[str, int]


#: Seconds between two samples: a run's last work in its worker (the task's ack, its
#: events, ...) goes on after its client saw the result; without a pause it falls in the
#: next sample (an A/A run measured the raw chain 6 % slower right after a hypha run on the
#: same worker than on a worker of its own).
PAUSE_S = 0.03
#: Seconds the workers are left alone after the warm-up and after the rounds: hypha's span
#: sink hands spans over every 0.5 s.
SETTLE_S = 1.0


def _pool_cpu(envs: dict[str, SideEnv]) -> dict[str, float]:
    return {mode: _cpu_s(env.worker.pid)[1] for mode, env in envs.items()
            if env.worker is not None}


def _phase(index: int, repeats: int) -> Phase:
    """One phase: fresh environments, built in an order rotated by ``index``; the sides'
    rounds interleaved, forward then backward.

    Worker CPU: a worker's tracing is partly done off the task's thread, in its pool
    processes (hypha's span sink hands spans over every 0.5 s, the batch processor exports
    every 5 s), i.e. while other sides run: so the pool processes' CPU is taken over all
    the rounds (they do next to nothing idle), split between the sides of a worker as their
    own samples' windows split it; the main process's (the consumer: no tracing there, and
    a heartbeat when idle) within each side's own samples."""
    modes = list(ENVS)
    k = index % len(modes)
    order = modes[k:] + modes[:k]
    root = tempfile.mkdtemp(prefix="hypha-bench-spans-")
    envs: dict[str, SideEnv] = {}
    try:
        for mode in order:
            spans_dir = os.path.join(root, mode)
            os.mkdir(spans_dir)
            envs[mode] = SideEnv(mode, spans_dir).__enter__()
        sides = [Side(name, envs[SIDES[name][0]]) for name in SIDES]

        def rounds(n: int) -> None:
            for i in range(n):
                for side in (sides if i % 2 == 0 else sides[::-1]):
                    time.sleep(PAUSE_S)  # what the sample before still does ends first
                    side.sample()

        rounds(WARMUP)
        for side in sides:
            side.clear()
        time.sleep(SETTLE_S)
        start = _pool_cpu(envs)
        rounds(repeats)
        time.sleep(SETTLE_S)
        end = _pool_cpu(envs)
        samples = {side.name: side.finished() for side in sides}
        for mode in envs:
            mine = [samples[name] for name in SIDES if SIDES[name][0] == mode]
            windows = sum(s.window_pool for s in mine)
            for s in mine:
                share = s.window_pool / windows if windows else 1 / len(mine)
                s.cpu = s.window_main + (end[mode] - start[mode]) * share
    finally:
        for mode in reversed(order):
            if mode in envs:
                envs[mode].__exit__(None, None, None)
    spans = {mode: env.spans_exported() for mode, env in envs.items()}
    shutil.rmtree(root, ignore_errors=True)
    return Phase(samples, spans)


def _ratios(phase: Phase) -> dict[str, float]:
    """A phase's ratios, of the sides' trimmed means (:func:`_tmean`); ``*_median``: of
    their medians; ``*_paired``: the median of the rounds' own ratios."""
    smp = phase.samples
    out: dict[str, float] = {}
    for stat, how in (("", _tmean), ("_median", statistics.median)):
        v = {name: how(s.wall) for name, s in smp.items()}
        ours = v["hypha_traced"] / v["hypha_off"]
        theirs = v["raw_traced"] / v["raw_off"]
        out |= {f"ours{stat}": ours, f"theirs{stat}": theirs,
                f"ratio_of_ratios{stat}": ours / theirs,
                f"sampled10{stat}": v["hypha_traced10"] / v["hypha_off"]}
    w = {name: s.wall for name, s in smp.items()}
    out["ratio_of_ratios_paired"] = statistics.median(
        (h1 / h0) / (c1 / c0) for h0, c0, h1, c1 in zip(
            w["hypha_off"], w["raw_off"], w["hypha_traced"], w["raw_traced"], strict=True))
    out["sampled10_paired"] = statistics.median(
        h10 / h0 for h0, h10 in zip(w["hypha_off"], w["hypha_traced10"], strict=True))
    return out


def _geo(phases: list[dict[str, float]], key: str) -> float:
    return round(statistics.geometric_mean(p[key] for p in phases), 4)


def bench(env: BenchEnv) -> dict[str, Any]:
    each = max(1, REPEATS // PHASES)
    pooled = {name: Samples() for name in SIDES}
    spans = dict.fromkeys(ENVS, 0)
    ratios: list[dict[str, float]] = []
    for i in range(PHASES):
        phase = _phase(i, each)
        ratios.append(_ratios(phase))
        for name, samples in phase.samples.items():
            pooled[name].extend(samples)
        for mode, n in phase.spans.items():
            spans[mode] += n
    runs = PHASES * (each + WARMUP)  # every side's runs, warm-up included
    cpu = {name: pooled[name].cpu_per_step() for name in SIDES}
    result = {
        "graph": GRAPH, "steps": STEPS, "raw": f"chain of {STEPS} bench.add",
        "aa": AA, "repeats": PHASES * each, "phases": PHASES, "warmup": WARMUP,
        "sampled": SAMPLED,
        "sides": {name: pooled[name].report() for name in SIDES},
        # the worker processes' spans (the client's are not counted) per run, warm-up
        # included; the otel worker's include one for its ready check
        "spans_per_run": {"hypha_traced": round(spans["hypha"] / runs, 2),
                          "hypha_traced10": round(spans["hypha10"] / runs, 2),
                          "raw_traced": round(spans["otel"] / runs, 2),
                          "untraced": round(spans["off"] / (2 * runs), 2)},
        **{key: _geo(ratios, key) for key in ratios[0]},
        "cpu_ours": round(cpu["hypha_traced"] / cpu["hypha_off"], 3),
        "cpu_theirs": round(cpu["raw_traced"] / cpu["raw_off"], 3),
        "cpu_ratio_of_ratios": round(cpu["hypha_traced"] / cpu["hypha_off"]
                                     / (cpu["raw_traced"] / cpu["raw_off"]), 3),
        "cpu_sampled10": round(cpu["hypha_traced10"] / cpu["hypha_off"], 3),
        "phases_detail": [{k: round(v, 4) for k, v in p.items()} for p in ratios],
        "notes": "ours = hypha traced / untraced (TracingMiddleware, every run sampled); "
                 "theirs = raw chain traced / untraced (opentelemetry-instrumentation-celery"
                 "'s CeleryInstrumentor); both on the same kind of SDK provider with a "
                 "BatchSpanProcessor to an exporter that drops the spans. Per phase: ratios "
                 "of the sides' wall ms per step/hop, mean of the middle 80 % of the runs "
                 "(*_median: of medians; *_paired: median of the rounds' own ratios); the "
                 "values are the geometric means over the phases. sampled10: hypha with 10 % "
                 "of runs traced over untraced. cpu_*: the same over the workers' CPU per "
                 "step (the pool processes' over all the rounds, the main process's within "
                 "the side's own samples).",
    }
    result["context_ratios"] = [
        {"name": "ours: hypha traced / untraced", "value": result["ours"],
         "detail": "TracingMiddleware, every run sampled (wall per step)"},
        {"name": "theirs: raw Celery traced / untraced", "value": result["theirs"],
         "detail": "opentelemetry-instrumentation-celery (wall per hop)"}]
    result["targets"] = _targets(result)
    return result


def _targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [target("observability_ours_over_theirs", result["ratio_of_ratios"], "<=",
                   TARGET_RATIO_OF_RATIOS),
            target("observability_sampled10_ratio", result["sampled10"], "<=",
                   TARGET_SAMPLED)]


def report_section(result: dict[str, Any]) -> str:
    """Markdown for docs/performance.md: ``result`` is this bench's section (what
    :func:`bench` returns) or a whole document holding it under ``observability``."""
    r = result.get("observability", result)
    sides, spans = r["sides"], r["spans_per_run"]
    mark = {True: "✓", False: "✗"}
    t_rr, t_10 = _targets(r)
    rows = [("hypha, untraced", "hypha_off", "0"),
            ("hypha, `TracingMiddleware`, every run", "hypha_traced",
             spans["hypha_traced"]),
            (f"hypha, `TracingMiddleware`, {SAMPLED:.0%} of runs", "hypha_traced10",
             spans["hypha_traced10"]),
            ("raw Celery chain, untraced", "raw_off", "0"),
            ("raw Celery chain, `CeleryInstrumentor`", "raw_traced", spans["raw_traced"])]
    lines = [
        "Tracing: hypha's `TracingMiddleware` against OpenTelemetry's own Celery "
        f"instrumentation (`CeleryInstrumentor`). The {r['steps']}-node linear graph (ms "
        f"per step) and a {r['steps']}-hop raw "
        "`chain` (ms per hop), each untraced and traced, on the same kind of SDK "
        "`TracerProvider` (a `BatchSpanProcessor` to an exporter that drops the spans); "
        f"{r['repeats']} interleaved rounds over {r['phases']} phases of fresh workers. "
        "Each ratio is taken per phase over the mean of the middle 80 % of the runs, then "
        "the phases' geometric mean (medians and per-round pairs in brackets)."
        + (" **A/A run: nothing traced anywhere.**" if r.get("aa") else ""),
        "",
        "| side | wall ms/step, median | mean of the middle 80 % | worker CPU ms/step "
        "| spans per run (worker) |",
        "|---|---|---|---|---|",
    ]
    for label, key, per_run in rows:
        s = sides[key]
        lines.append(f"| {label} | {s['wall_ms_per_step']['median']:.3f} | "
                     f"{s['wall_ms_per_step_tmean']:.3f} | {s['worker_cpu_ms_per_step']:.3f} "
                     f"| {per_run} |")
    lines += [
        "",
        "| measure | wall (median; paired) | worker CPU | target |",
        "|---|---|---|---|",
        f"| ours: hypha traced / untraced | {r['ours']:.3f} ({r['ours_median']:.3f}) | "
        f"{r['cpu_ours']:.3f} | |",
        f"| theirs: raw traced / untraced | {r['theirs']:.3f} ({r['theirs_median']:.3f}) | "
        f"{r['cpu_theirs']:.3f} | |",
        f"| ours / theirs | {r['ratio_of_ratios']:.3f} ({r['ratio_of_ratios_median']:.3f}; "
        f"{r['ratio_of_ratios_paired']:.3f}) | {r['cpu_ratio_of_ratios']:.3f} | "
        f"≤ {t_rr['target']} {mark[t_rr['pass']]} |",
        f"| hypha {SAMPLED:.0%} traced / untraced | {r['sampled10']:.3f} "
        f"({r['sampled10_median']:.3f}; {r['sampled10_paired']:.3f}) | "
        f"{r['cpu_sampled10']:.3f} | ≤ {t_10['target']} {mark[t_10['pass']]} |",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    standalone("observability", bench)
