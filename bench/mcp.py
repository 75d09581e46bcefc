"""An MCP tool call through the gateway vs the raw SDK's ``call_tool``, same server, one run.

No services: one MCP server process per side (``tests/mcp/servers/tools_server.py``,
written with the same SDK, over stdio), its read-only ``echo`` tool (an input schema, an
output schema, structured content), warm connections.

* **raw**: ``await session.call_tool("echo", {"text": ...})`` on an ``mcp.ClientSession``
  over ``stdio_client``, each call timed inside the session's own event loop (the SDK
  checks the structured result against the output schema).
* **raw_send_request**: the bare ``tools/call`` request on the same session (what the
  gateway sends: no SDK-side output check), for the floor.
* **gateway_handler**: the gateway's tool handler (``McpGateway.registry()``): the call
  handed to the process's MCP loop thread, the result mapped and bounded.
* **gateway_governed** (the target): ``GovernedRunner.run`` over the gateway's registry:
  input schema, policy, the handler, output schema, the ``tool.call.*`` / ``mcp.call.*``
  events built (kept in a list), the result.

The sides alternate in ``ROUNDS`` batches of ``CALLS`` calls (after a warm-up) so a
drift of the machine hits both; p50 / p95 per side in µs, and the p50 each gateway side
adds over raw with their ratio. Target: the governed gateway call adds <= 1 ms p50.

    python -m bench.mcp
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: ``bench`` importable, its files not (a
    # bench/langgraph.py would hide the langgraph package)
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench._harness import run_bench, target

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "tests" / "mcp" / "servers" / "tools_server.py"
CALLS = int(os.environ.get("BENCH_MCP_CALLS", "500"))
ROUNDS = int(os.environ.get("BENCH_MCP_ROUNDS", "4"))
WARMUP = 100
ARGS = {"text": "hello from the bench"}
TARGETS = {"gateway_governed_added_p50_ms": ("<=", 1.0)}


async def _raw_batch(count: int, warmup: int) -> tuple[list[int], list[int]]:
    """``call_tool`` and bare ``send_request`` timings, alternating, on one session."""
    from mcp import ClientSession, types
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=[str(SERVER), "stdio"])
    request = types.ClientRequest(types.CallToolRequest(
        params=types.CallToolRequestParams(name="echo", arguments=ARGS)))
    calls: list[int] = []
    requests: list[int] = []
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for _ in range(warmup):
            await session.call_tool("echo", ARGS)
        clock = time.perf_counter_ns
        for _ in range(count):
            t0 = clock()
            result = await session.call_tool("echo", ARGS)
            calls.append(clock() - t0)
            assert result.structuredContent == ARGS
            t0 = clock()
            await session.send_request(request, types.CallToolResult)
            requests.append(clock() - t0)
    return calls, requests


def _timed(fn: Any, count: int) -> list[int]:
    clock = time.perf_counter_ns
    samples = []
    for _ in range(count):
        t0 = clock()
        fn()
        samples.append(clock() - t0)
    return samples


def _stats(samples: list[int]) -> dict[str, Any]:
    ordered = sorted(samples)
    return {"n": len(ordered), "p50_us": round(statistics.median(ordered) / 1000, 1),
            "p95_us": round(ordered[int(len(ordered) * 0.95)] / 1000, 1),
            "min_us": round(ordered[0] / 1000, 1)}


def bench() -> dict[str, Any]:
    from hypha_celery.mcp import McpGateway, McpServer, StdioTransport
    from hypha_celery.store import EventStore
    from hypha_celery.tools import GovernedRunner, ToolPolicy

    with tempfile.TemporaryDirectory() as tmp:
        store = EventStore(f"sqlite:///{tmp}/bench.db")
        server = McpServer(id="bench", trust="trusted", drift="accept", transport=StdioTransport(
            command=sys.executable, args=(str(SERVER), "stdio")))
        gateway = McpGateway([server], store)
        try:
            gateway.discover("bench")
            handler = gateway.registry().resolve("bench.echo").handler
            events: list[str] = []
            runner = GovernedRunner(gateway.registry(record=lambda k, p: events.append(k)),
                                    ToolPolicy.default(), lambda k, p: events.append(k))

            def governed() -> None:
                result = runner.run("bench.echo", ARGS)
                assert result.status == "completed", result.message
                events.clear()

            for _ in range(WARMUP):
                governed()
            raw: list[int] = []
            bare: list[int] = []
            direct: list[int] = []
            full: list[int] = []
            for round_ in range(ROUNDS):
                calls, requests = asyncio.run(_raw_batch(CALLS, WARMUP if round_ == 0 else 20))
                raw += calls
                bare += requests
                direct += _timed(lambda: handler(ARGS), CALLS)
                full += _timed(governed, CALLS)
            assert gateway.connection("bench").opened == 1  # one warm connection throughout
        finally:
            gateway.close()
            store.dispose()
    out: dict[str, Any] = {"server": str(SERVER.relative_to(ROOT)), "tool": "echo",
                           "transport": "stdio", "calls_per_side": CALLS * ROUNDS,
                           "raw": _stats(raw), "raw_send_request": _stats(bare),
                           "gateway_handler": _stats(direct),
                           "gateway_governed": _stats(full)}
    raw_p50, bare_p50 = out["raw"]["p50_us"], out["raw_send_request"]["p50_us"]
    for side in ("gateway_handler", "gateway_governed"):
        p50 = out[side]["p50_us"]
        out[f"{side}_added_p50_ms"] = round((p50 - raw_p50) / 1000, 3)
        out[f"{side}_ratio_p50"] = round(p50 / raw_p50, 3)
        out[f"{side}_added_over_send_request_p50_ms"] = round((p50 - bare_p50) / 1000, 3)
    out["targets"] = [target("gateway_governed_added_p50_ms",
                             out["gateway_governed_added_p50_ms"],
                             *TARGETS["gateway_governed_added_p50_ms"])]
    return out


def main() -> int:
    return run_bench("mcp", bench)


if __name__ == "__main__":
    sys.exit(main())
