"""Real LLM: an agent on a hosted model (OpenAI, Anthropic or any OpenAI-compatible server)
that calls a tool running in the agent.

When to reach for this
    A conversation with an actual model, where the model may ask for a function the
    application runs (a lookup, a calculation) before it answers.

The pattern
    ``init_agent`` returns the backend options: the model, the system prompt and the tools
    (``ToolSpec`` JSON). ``handle_response`` looks at ``result.tool_calls``: when the model
    asked for tools it runs them here and returns ``Prompt(HostedBackend.tool_results(...))``
    (a self-chained turn answering the calls); otherwise it halts with the answer.
    ``handle_error`` halts with the error kind (``rate_limited``, ``authentication`` ...):
    a real application would retry the retryable ones (see ``retry.py``).

Using it
    ``OPENAI_API_KEY=... python -m examples.agents.real_llm "What is 17.5 * 23?"``, or
    ``--provider anthropic`` with ``ANTHROPIC_API_KEY``, or ``--provider openai-chat
    --base-url http://localhost:11434/v1 --model llama3.1`` for a local Ollama (any key).
    ``--model`` picks another model. The tests run it against the local fake server.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from examples.agents import _app
from hypha_celery import Hypha
from hypha_celery.agents import Agent, AgentDecision, Halt, Prompt, Response, TurnError
from hypha_celery.backends import AnthropicBackend, HostedBackend, OpenAIBackend

#: provider -> (backend, default model, key variable, extra backend options)
PROVIDERS: dict[str, tuple[type[HostedBackend], str, str, dict[str, Any]]] = {
    "openai": (OpenAIBackend, "gpt-4.1-mini", "OPENAI_API_KEY", {}),
    "openai-chat": (OpenAIBackend, "gpt-4.1-mini", "OPENAI_API_KEY", {"api": "chat"}),
    "anthropic": (AnthropicBackend, "claude-sonnet-4-5", "ANTHROPIC_API_KEY", {}),
}
MULTIPLY = {"id": "math.multiply", "description": "Multiply two numbers exactly.",
            "input_schema": {"type": "object", "required": ["a", "b"],
                             "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}
SYSTEM = "You are a careful calculator. Use the math.multiply tool for every product."
MAX_TOOL_ROUNDS = 4


def run_tool(name: str, arguments: dict[str, Any]) -> str:
    if name == "math.multiply":
        return repr(float(arguments["a"]) * float(arguments["b"]))
    return f"unknown tool {name}"


class Calculator(Agent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return dict(opts["llm"]), {"phase": "asking", "tool_rounds": 0, "answer": None}

    def handle_response(self, ref: str, response: Response, state: Any) -> AgentDecision:
        calls = response.terminal.data.get("tool_calls") or []
        if calls and state["tool_rounds"] < MAX_TOOL_ROUNDS:
            results = {c["id"]: run_tool(c["name"], c["arguments"]) for c in calls}
            return Prompt(HostedBackend.tool_results(results),
                          {**state, "tool_rounds": state["tool_rounds"] + 1})
        return Halt({**state, "phase": "done", "answer": response.text,
                     "usage": response.usage})

    def handle_error(self, ref: str, error: TurnError, state: Any) -> AgentDecision:
        return Halt({**state, "phase": "failed", "error": error.reason})


def run(hypha: Hypha, question: str, *, provider: str = "openai", model: str | None = None,
        base_url: str | None = None, name: str = "calculator") -> dict[str, Any]:
    """Ask ``question``; returns the agent's final state (``answer`` or ``error``)."""
    _app.use(hypha)
    backend, default_model, _, extra = PROVIDERS[provider]
    llm = {"model": model or default_model, "system": SYSTEM, "tools": [MULTIPLY],
           "max_output_tokens": 512, "base_url": base_url, **extra}
    hypha.agents.start(Calculator, name=name, backend=backend, llm=llm)
    hypha.agents.tell(name, question)
    _app.wait_for(lambda: _app.halted(name), timeout=120)
    return dict(_app.state(name))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("question", nargs="?", default="What is 17.5 * 23?")
    parser.add_argument("--provider", choices=sorted(PROVIDERS), default="openai")
    parser.add_argument("--model")
    parser.add_argument("--base-url")
    args = parser.parse_args()
    key_env = PROVIDERS[args.provider][2]
    if not os.environ.get(key_env):
        sys.exit(f"set {key_env} to run this example against {args.provider}")
    with _app.demo() as hypha:
        state = run(hypha, args.question, provider=args.provider, model=args.model,
                    base_url=args.base_url)
    print(state.get("answer") or f"failed: {state.get('error')}")


if __name__ == "__main__":
    main()
