"""Model calls, side by side with the raw SDKs in one process tree (issue 14).

    python -m bench.models [overhead] [first_token] [ratelimit] [concurrency]

``overhead``: one streamed call of 100 text deltas from a local provider (the test suite's
fake server, in its own process), through the raw SDK and through hypha's provider layer,
interleaved; p50 wall time of each, the difference per call and as a share of the raw
call, and the client process's CPU per call (steadier than wall time on a busy machine),
for each wire API (OpenAI Responses, Chat Completions, Anthropic Messages).

``first_token``: the provider stamps its first text delta with its clock when it sends it
(the fake server's ``STAMP``; one machine, one monotonic clock for every process). The
raw SDK reading that delta, and a ``hypha.agents.stream()`` client reading the same kind
of delta of an agent turn (OpenAI backend, run by a real ``celery worker`` process,
relayed over Redis pub/sub) each note how long after the send they saw it; the target is
the difference of the p50s.

``ratelimit``: one shared rate-limit decision (a Lua script run by its SHA on Redis),
p50 over ``bench.ratelimit``'s series.

``concurrency``: model calls in flight at once against a provider that takes 2 s per
answer: graph nodes (``bench/graph_io.py``) and, separately, agent turns
(``bench/agents_io.py``), each on ``hypha worker --profile io`` and on the default
prefork profile in the same run, with the workers' RSS (each in processes of its own).

Targets: overhead p50 <= 2 ms per call and <= 5 % of a 100-token stream; first token
<= 5 ms after the raw SDK sees it (p50); a rate-limit decision <= 1 ms p50; >= 500 model
calls in flight through graph nodes and through agent turns.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: ``bench`` importable, its files not (a
    # bench/langgraph.py would hide the langgraph package)
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench._harness import run_bench, target

ROOT = Path(__file__).resolve().parent.parent
CALLS = int(os.environ.get("BENCH_MODEL_CALLS", "200"))
DELTAS = 100
KEY = "sk-bench-local"
PROMPT = ({"role": "user", "content": "Say a hundred words."},)


@contextmanager
def provider_server(*args: str) -> Iterator[str]:
    """The fake provider in a child process; yields its root URL."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.fakes.llm_server", "--port", "0",
                             *args], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.kill()
        proc.wait()


def _stream_args() -> tuple[str, ...]:
    return ("--text", "tok " * DELTAS, "--chunks", str(DELTAS))


# -- the raw SDK calls -------------------------------------------------------------------
def raw_call(api: str, url: str) -> Callable[[], None]:
    if api == "anthropic":
        import anthropic

        messages = anthropic.Anthropic(api_key=KEY, base_url=url, max_retries=0).messages

        def run_messages() -> None:
            with messages.create(model="claude-bench", max_tokens=4096, messages=list(PROMPT),
                                 stream=True) as stream:
                for _ in stream:
                    pass
        return run_messages
    import openai

    client = openai.OpenAI(api_key=KEY, base_url=f"{url}/v1", max_retries=0)
    if api == "chat":
        def run_chat() -> None:
            with client.chat.completions.create(
                    model="gpt-bench", messages=list(PROMPT), stream=True,  # type: ignore[arg-type]
                    stream_options={"include_usage": True}) as stream:
                for _ in stream:
                    pass
        return run_chat

    def run_responses() -> None:
        with client.responses.create(model="gpt-bench", input=list(PROMPT),  # type: ignore[arg-type]
                                     stream=True, store=False) as stream:
            for _ in stream:
                pass
    return run_responses


# -- ours ---------------------------------------------------------------------------------
REFS = {"responses": "openai:gpt-bench", "chat": "openai-chat:gpt-bench",
        "anthropic": "anthropic:claude-bench"}


def provider_call(api: str, url: str) -> Callable[[], None]:
    """hypha's provider layer: ``provider(...).open_stream`` and its ``LLMStream``."""
    from hypha_celery.backends.llm import ModelRef, provider

    ref = ModelRef.parse(REFS[api])
    module = provider(ref.provider)
    base = url if api == "anthropic" else f"{url}/v1"
    request = ref.request(PROMPT)

    def run() -> None:
        with module.open_stream(request, key=KEY, base_url=base, timeout=60) as stream:
            for _ in stream:
                pass
        assert stream.result is not None
    return run


def client_call(api: str, url: str) -> Callable[[], None]:
    """What a graph node's ``ctx.llm`` does on a worker with Redis: :class:`LLMClient`
    with the shared Redis rate limiter (limits set, never reached) and the call's deltas
    published to the Redis live bus (sent whether or not someone watches; a watcher would
    be another process)."""
    import uuid

    from bench.ratelimit import redis_url
    from hypha_celery.backends.llm.client import LiveSink, LLMClient
    from hypha_celery.backends.llm.ratelimit import Limit, RedisLimiter
    from hypha_celery.live import RedisLiveBus

    prefix = f"bench:models:{uuid.uuid4().hex[:8]}:"
    vendor = "anthropic" if api == "anthropic" else "openai"
    limiter = RedisLimiter(redis_url(), {vendor: Limit(rpm=10**9, tpm=10**12)}, prefix=prefix)
    client = LLMClient(limiter=limiter, base_urls={vendor: url if api == "anthropic"
                                                   else f"{url}/v1"})
    bus = RedisLiveBus(redis_url(), prefix=prefix)
    sink = LiveSink(bus, "run:bench", {"execution_id": "e1", "call_id": "c1"})
    os.environ.setdefault("OPENAI_API_KEY", KEY)
    os.environ.setdefault("ANTHROPIC_API_KEY", KEY)

    def run() -> None:
        client.call(REFS[api], PROMPT, live=sink)
    return run


def _timed(fn: Callable[[], None]) -> tuple[float, float]:
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def side_by_side(calls: dict[str, Callable[[], None]], n: int) -> dict[str, dict[str, float]]:
    """Warm each, then ``n`` interleaved rounds: p50 wall and mean CPU ms of each."""
    for fn in calls.values():
        for _ in range(10):
            fn()
    wall: dict[str, list[float]] = {k: [] for k in calls}
    cpu: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(n):
        for name, fn in calls.items():
            w, c = _timed(fn)
            wall[name].append(w)
            cpu[name].append(c)
    return {k: {"p50_ms": round(statistics.median(wall[k]) * 1000, 3),
                "cpu_ms": round(statistics.fmean(cpu[k]) * 1000, 3)} for k in calls}


def overhead(extra: dict[str, Callable[[str, str], Callable[[], None]]] | None = None
             ) -> dict[str, Any]:
    """Raw SDK vs the provider layer (and ``extra`` paths) for each wire API."""
    paths = {"provider": provider_call, "ctx_llm_path": client_call, **(extra or {})}
    out: dict[str, Any] = {"calls": CALLS, "deltas": DELTAS, "targets": []}
    with provider_server(*_stream_args()) as url:
        for api in REFS:
            calls = {"raw_sdk": raw_call(api, url)}
            calls.update({name: make(api, url) for name, make in paths.items()})
            res = side_by_side(calls, CALLS)
            raw = res["raw_sdk"]
            for name in paths:
                ours = res[name]
                ours["overhead_ms"] = round(ours["p50_ms"] - raw["p50_ms"], 3)
                ours["overhead_pct"] = round(100 * ours["overhead_ms"] / raw["p50_ms"], 2)
                ours["cpu_overhead_ms"] = round(ours["cpu_ms"] - raw["cpu_ms"], 3)
                ours["ratio_to_raw"] = round(ours["p50_ms"] / raw["p50_ms"], 4)
            out[api] = res
            top = res[list(paths)[-1]]
            out["targets"] += [
                target(f"{api}_overhead_p50_ms", top["overhead_ms"], "<=", 2.0),
                target(f"{api}_overhead_pct_of_100_token_stream", top["overhead_pct"], "<=",
                       5.0)]
    return out


# -- first token --------------------------------------------------------------------------
FIRST_TOKENS = int(os.environ.get("BENCH_FIRST_TOKENS", "100"))
LLM_KEY_ENV = "BENCH_LLM_KEY"


def raw_first_token(url: str, n: int) -> list[float]:
    """Seconds from the provider's send to the raw SDK's first text delta."""
    import openai

    client = openai.OpenAI(api_key=KEY, base_url=f"{url}/v1", max_retries=0)
    seen: list[float] = []
    for _ in range(n):
        with client.responses.create(model="gpt-bench", input=list(PROMPT),  # type: ignore[arg-type]
                                     stream=True, store=False) as stream:
            for event in stream:
                if event.type == "response.output_text.delta":
                    seen.append(time.monotonic() - float(event.delta))
                    break
    return seen


def agent_first_token(hypha: Any, url: str, n: int) -> list[float]:
    """Seconds from the provider's send to a ``stream()`` client's first text item, over
    ``n`` turns of a new agent (a fresh history: each turn adds two messages)."""
    from bench.agents_app import Talker
    from hypha_celery.backends import OpenAIBackend

    name = f"talker-{len(MISSED)}-{time.monotonic_ns()}"
    hypha.agents.start(Talker, name=name, backend=OpenAIBackend, llm={
        "model": "gpt-bench", "base_url": f"{url}/v1", "key_env": LLM_KEY_ENV})
    seen: list[float] = []
    for _ in range(n):
        with hypha.agents.stream(name, timeout=30) as stream:
            hypha.agents.tell(name, "go")
            first: float | None = None
            for item in stream:
                if item["kind"] == "text" and first is None:
                    first = time.monotonic() - float(item["text"])
            if first is None:  # counted, not hidden: see "missed" in the output
                MISSED.append(1)
                continue
            seen.append(first)
    return seen


MISSED: list[int] = []


def first_token() -> dict[str, Any]:
    from bench.agents import AgentEnv
    from tests.fakes.llm_server import STAMP

    os.environ[LLM_KEY_ENV] = KEY  # the worker inherits it
    with provider_server("--text", f"{STAMP} ", "--chunks", "1") as url, AgentEnv() as env:
        hypha = env.hypha
        agent_first_token(hypha, url, 5)  # warm the worker: imports, SDK client, pub/sub
        ours: list[float] = []
        raw: list[float] = []
        for _ in range(FIRST_TOKENS // 10):  # interleaved in blocks of 10
            raw += raw_first_token(url, 10)
            ours += agent_first_token(hypha, url, 10)
        setup = env.setup()
    p50_raw, p50_ours = (statistics.median(x) * 1000 for x in (raw, ours))
    return {"n": len(ours), "missed": len(MISSED), "setup": setup,
            "raw_sdk_p50_ms": round(p50_raw, 3), "agent_stream_p50_ms": round(p50_ours, 3),
            "agent_stream_p95_ms": round(sorted(ours)[int(len(ours) * 0.95)] * 1000, 3),
            "after_raw_p50_ms": round(p50_ours - p50_raw, 3),
            "targets": [target("first_token_after_raw_sdk_p50_ms", p50_ours - p50_raw,
                               "<=", 5.0)]}


def ratelimit() -> dict[str, Any]:
    from bench.ratelimit import decision_ms

    p50 = decision_ms()
    return {"redis_decision_p50_ms": round(p50, 3),
            "targets": [target("ratelimit_decision_redis_p50_ms", p50, "<=", 1.0)]}


def concurrency() -> dict[str, Any]:
    from bench import agents_io, graph_io

    graph = graph_io.both([])
    agents = {"io": agents_io.measured("io", []), "default": agents_io.measured("default", [])}
    out: dict[str, Any] = {"targets": graph.pop("targets")}
    out["targets"].append(target("agents_io_peak_turns_in_flight",
                                 agents["io"]["peak_in_flight"], ">=",
                                 agents_io.TARGET_IN_FLIGHT))
    for name, doc in (("graph_nodes", graph), ("agent_turns", agents)):
        out[name] = {p: _brief(doc[p]) for p in ("io", "default")}
        out[name]["in_flight_ratio_io_to_default"] = round(
            doc["io"]["peak_in_flight"] / max(1, doc["default"]["peak_in_flight"]), 1)
    return out


def _brief(doc: dict[str, Any]) -> dict[str, Any]:
    """A profile's figures without the timeline and setup (kept in the scripts' own
    result files)."""
    return {k: v for k, v in doc.items() if k not in ("timeline_s_inflight_ended_rssmb",)}


SECTIONS: dict[str, Callable[[], dict[str, Any]]] = {
    "overhead": overhead, "first_token": first_token, "ratelimit": ratelimit,
    "concurrency": concurrency}


def bench() -> dict[str, Any]:
    chosen = [a for a in sys.argv[1:] if a in SECTIONS] or list(SECTIONS)
    doc: dict[str, Any] = {"targets": []}
    for name in chosen:
        part = SECTIONS[name]()
        doc["targets"] += part.pop("targets")
        doc[name] = part
    return doc


if __name__ == "__main__":
    sys.exit(run_bench("models", bench))
