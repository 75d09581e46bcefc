"""Graph LLM: a graph node that calls a real model with ``ctx.llm``, runs the tool the
model asks for, and answers; tokens stream to the caller while the node runs.

When to reach for this
    A step of a workflow that needs a model (classify, draft, extract) and must stay
    replayable and auditable: the call is recorded as ``model.call.*`` events with the
    provider, the token usage, the latency and the cost (when you configure prices),
    never the prompt; a replay serves the recorded answer and calls nothing.

The pattern
    ``Node(answer, models=[MODEL])`` declares the model the node calls (checked when the
    graph is defined; the node runs on the I/O queue, ``hypha.io``). The node calls
    ``ctx.llm(MODEL, messages, tools=[MULTIPLY])``; when the answer asks for the tool it
    runs it through ``ctx.tool`` (recorded too) and calls the model again with the result.
    The caller watches ``run.stream()``: text deltas as they arrive, then the run's end.

Using it
    ``OPENAI_API_KEY=... python -m examples.graph_llm "What is 17.5 * 23?"``, or
    ``--provider anthropic`` with ``ANTHROPIC_API_KEY``, or ``--provider openai-chat
    --base-url http://localhost:11434/v1 --model llama3.1`` for a local Ollama (any key).
    Without a key it prints how to run it. The tests run it against the local fake server.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from hypha_celery import Finish, Graph, Hypha, Next, Node, NodeContext, Settings
from hypha_celery.backends.llm.client import LLMClient
from hypha_celery.backends.llm.pricing import Price

#: provider -> (default model, key variable)
PROVIDERS: dict[str, tuple[str, str]] = {
    "openai": ("gpt-4.1-mini", "OPENAI_API_KEY"),
    "openai-chat": ("gpt-4.1-mini", "OPENAI_API_KEY"),
    "anthropic": ("claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
}
MULTIPLY = {"name": "math.multiply", "description": "Multiply two numbers exactly.",
            "parameters": {"type": "object", "required": ["a", "b"],
                           "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}
SYSTEM = "You are a careful calculator. Use the math.multiply tool for every product."
MAX_TOOL_ROUNDS = 3


def multiply(args: dict[str, Any]) -> str:
    return repr(float(args["a"]) * float(args["b"]))


def answer_node(model: str) -> Node:
    def answer(state: dict[str, Any], question: str, ctx: NodeContext) -> dict[str, Any]:
        from hypha_celery.backends.llm.types import ToolDecl

        messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                          {"role": "user", "content": question}]
        tools = [ToolDecl(**MULTIPLY)]
        usage = 0
        for _ in range(MAX_TOOL_ROUNDS + 1):
            reply = ctx.llm(model, messages, tools=tools, max_output_tokens=512)
            usage += reply.usage.total
            if not reply.tool_calls:
                return {"answer": reply.text, "tokens": usage}
            messages.append({"role": "assistant", "content": reply.text,
                             "tool_calls": [c.to_json() for c in reply.tool_calls]})
            for call in reply.tool_calls:
                output = ctx.tool(call.name, multiply, call.arguments)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
        return {"answer": None, "tokens": usage}
    return Node(answer, models=[model])


def policy(ctx: Any) -> Any:
    return Next("answer", ctx.input) if ctx.step == 0 else Finish(ctx.state)


def graph(model: str) -> Graph:
    return Graph("graph_llm", {"answer": answer_node(model)}, policy)


def app(base_url: str | None = None, provider: str = "openai",
        prices: dict[str, Price] | None = None) -> Hypha:
    """An embedded app whose model client points at ``base_url`` (None: the provider)."""
    urls = {provider: base_url} if base_url else {}
    llm = LLMClient(base_urls=urls, prices=prices)
    return Hypha(Settings.from_env(), llm=llm)


def run(hypha: Hypha, question: str, *, provider: str = "openai",
        model: str | None = None) -> dict[str, Any]:
    """Ask ``question``; returns the answer, the streamed text, token usage and cost."""
    ref = f"{provider}:{model or PROVIDERS[provider][0]}"
    if "graph_llm" not in hypha.graphs:
        hypha.register(graph(ref))
    handle = hypha.start("graph_llm", question)
    streamed = []
    with handle.stream(timeout=120) as items:
        for item in items:
            if item["kind"] == "text":
                streamed.append(item["text"])
    result = handle.wait(120)
    costs = [e.data.get("cost_usd") for e in handle.events()
             if e.kind == "model.call.completed"]
    return {**result, "streamed": "".join(streamed), "calls": len(costs),
            "cost_usd": None if None in costs else round(sum(costs), 8)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("question", nargs="?", default="What is 17.5 * 23?")
    parser.add_argument("--provider", choices=sorted(PROVIDERS), default="openai")
    parser.add_argument("--model")
    parser.add_argument("--base-url")
    args = parser.parse_args()
    key_env = PROVIDERS[args.provider][1]
    if not os.environ.get(key_env):
        print(f"set {key_env} to run this example against {args.provider}, e.g.\n"
              f"  {key_env}=... python -m examples.graph_llm --provider {args.provider} "
              f"{args.question!r}")
        return
    hypha = app(args.base_url, args.provider)
    try:
        out = run(hypha, args.question, provider=args.provider, model=args.model)
    finally:
        hypha.close()
    print(out["answer"])
    print(f"({out['tokens']} tokens in {out['calls']} calls)", file=sys.stderr)


if __name__ == "__main__":
    main()
