"""``ClaudeCodeBackend``: an agent on the Claude Code CLI, one ``claude -p`` run per turn.

Each turn runs ``claude -p --output-format stream-json --verbose`` (plus
``--include-partial-messages`` for token deltas, ``--model``, ``--resume <session_id>``
from the second turn on, and the tool and permission flags of the options below) with the
prompt on stdin, and reads its JSON lines (:mod:`.process`). Install the CLI with
``npm install -g @anthropic-ai/claude-code`` (the tests use ``scripts/install-clis``,
which pins the version they were written against: 2.1.332).

Start options (anything else is refused at start, as are a missing executable and a
missing key; nothing is written then):

========================  ==============================================================
``model``                 ``--model`` (the CLI's default otherwise)
``base_url``              ``ANTHROPIC_BASE_URL`` (a proxy, a gateway, a test server)
``key_env``               the variable holding the key (default ``ANTHROPIC_API_KEY``, or a
                          key source: :mod:`hypha_celery.backends.llm.keys`); the CLI
                          gets it as ``ANTHROPIC_API_KEY``
``auth``                  ``"key"`` (default) or ``"cli"``: no key, the CLI's own login
``config_dir``            ``CLAUDE_CONFIG_DIR``: where the CLI keeps its conversations
``cwd``                   the working directory of the CLI (and of its tools)
``system_prompt``         ``--system-prompt``; ``append_system_prompt``: ``--append-...``
``allowed_tools``         ``--allowedTools`` rules, e.g. ``["Bash(git *)", "Read"]``
``disallowed_tools``      ``--disallowedTools`` rules; ``tools``: ``--tools`` (built-ins)
``permission_mode``       ``--permission-mode`` (``default``, ``acceptEdits``, ``plan``,
                          ``auto``, ``dontAsk``, ``bypassPermissions``)
``max_turns``             ``--max-turns``: model round trips per prompt (``max_turns``)
``max_budget_usd``        ``--max-budget-usd`` (``budget_exhausted``)
``mcp_config``            ``--mcp-config`` files, with ``--strict-mcp-config``
``partial``               token deltas (``--include-partial-messages``), default true
``env``                   more variables for the CLI (not secrets: the session is stored)
``executable``            the ``claude`` to run (a name on ``PATH`` or a path)
``session_id``            continue an existing conversation of the CLI
``timeout``               seconds without a line before the turn fails (default 600)
``max_lines``             lines per turn (default 20,000); ``max_bytes``: bytes per turn
                          (64 MiB); ``max_line_bytes``: one line (4 MiB)
``extra_args``            more flags, as a list of strings (never the prompt or a key)
========================  ==============================================================

**Events** of a turn: ``session`` (``session_id``, as soon as the CLI's ``system/init``
line names it, after ``checkpoint(session_id)`` stored it), ``text`` deltas,
``tool_use`` (``id``, ``name``, ``input``), ``tool_result`` (``id``, ``is_error``,
``chars``: no content), ``reasoning`` (``chars``: never the thought), ``retry`` (the
CLI's own API retries), ``usage``, then ``result`` ``{"text", "session_id", "usage",
"cost_usd", "model", "num_turns", "stop_reason", "totals"}`` or ``error``.

**Errors** (``BackendError`` kinds, in the ``error`` event): an API failure as its HTTP
status (``authentication``, ``rate_limited``, ``invalid_request``, ``server_error``),
``max_turns``, ``budget_exhausted``, ``session_not_found`` (the CLI's store lacks the
conversation: another host, a lost volume), ``session_conflict``, ``cli_error``,
``cli_exit`` (with ``exit_code``), ``malformed_stream``, ``line_too_long``,
``stream_overflow``, ``incomplete_stream``, ``timeout``, ``cancelled``.

**Where the conversation lives, and its bound.** The CLI holds the conversation, in its
session store (``$CLAUDE_CONFIG_DIR/projects/...``, default ``~/.claude``); our session
keeps only its id (and the running cost). Any worker can serve the next turn when every
worker sees the same store (``config_dir`` on a shared volume); otherwise the turn fails
with ``session_not_found``. The CLI compacts a long conversation itself; our per-turn
bound is the line count and the bytes of output (``stream_overflow`` past it, the CLI is
killed).
"""

from __future__ import annotations

from typing import Any, ClassVar

from hypha_celery.backends.cli import CliBackend, LineParser, Turn, check_strings, error_event
from hypha_celery.backends.error import BackendError, classify_status
from hypha_celery.backends.event import BackendEvent
from hypha_celery.backends.process import CliCommand
from hypha_celery.jsontypes import json_object

__all__ = ["ClaudeCodeBackend"]

PERMISSION_MODES = ("default", "acceptEdits", "plan", "auto", "dontAsk", "bypassPermissions",
                    "manual")
_RESULT_KINDS = {"error_max_turns": "max_turns", "error_max_budget_usd": "budget_exhausted",
                 "error_max_structured_output_retries": "invalid_output"}


class ClaudeCodeBackend(CliBackend):
    provider: ClassVar[str] = "claude_code"
    executable: ClassVar[str] = "claude"
    install_hint: ClassVar[str] = ("install it with `npm install -g @anthropic-ai/claude-code` "
                                   "(or scripts/install-clis in a checkout of hypha-celery), "
                                   "or set the executable option")
    vendor: ClassVar[str] = "anthropic"
    extra_options: ClassVar[frozenset[str]] = frozenset({
        "config_dir", "system_prompt", "append_system_prompt", "allowed_tools",
        "disallowed_tools", "tools", "permission_mode", "max_turns", "max_budget_usd",
        "mcp_config", "partial"})

    def check_extra(self, opts: dict[str, Any]) -> None:
        for name in ("allowed_tools", "disallowed_tools", "tools", "mcp_config"):
            check_strings(name, opts.get(name))
        for name in ("config_dir", "system_prompt", "append_system_prompt"):
            if name in opts and not isinstance(opts[name], str):
                raise ValueError(f"{name} must be a string")
        if opts.get("permission_mode", "default") not in PERMISSION_MODES:
            raise ValueError(f"permission_mode must be one of {', '.join(PERMISSION_MODES)}")
        turns = opts.get("max_turns")
        if turns is not None and (isinstance(turns, bool) or not isinstance(turns, int)
                                  or turns <= 0):
            raise ValueError("max_turns must be a positive integer")
        budget = opts.get("max_budget_usd")
        if budget is not None and (isinstance(budget, bool)
                                   or not isinstance(budget, int | float) or budget <= 0):
            raise ValueError("max_budget_usd must be a positive number")
        if not isinstance(opts.get("partial", True), bool):
            raise ValueError("partial must be true or false")

    def command(self, opts: dict[str, Any], session_id: str | None, prompt: str,
                key: str | None, executable: str) -> CliCommand:
        argv = [executable, "-p", "--output-format", "stream-json", "--verbose"]
        if opts.get("partial", True):
            argv.append("--include-partial-messages")
        for flag, name in (("--model", "model"), ("--system-prompt", "system_prompt"),
                           ("--append-system-prompt", "append_system_prompt"),
                           ("--permission-mode", "permission_mode"),
                           ("--max-turns", "max_turns"), ("--max-budget-usd", "max_budget_usd")):
            if name in opts:
                argv += [flag, str(opts[name])]
        if session_id is not None:
            argv += ["--resume", session_id]
        if opts.get("tools") is not None:
            argv += ["--tools", ",".join(opts["tools"])]
        if opts.get("mcp_config"):
            argv += ["--mcp-config", *opts["mcp_config"], "--strict-mcp-config"]
        for flag, name in (("--allowedTools", "allowed_tools"),
                           ("--disallowedTools", "disallowed_tools")):
            if opts.get(name):
                argv += [flag, *opts[name]]
        argv += opts.get("extra_args", [])
        extra = {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}
        if key is not None:
            extra["ANTHROPIC_API_KEY"] = key
        if "base_url" in opts:
            extra["ANTHROPIC_BASE_URL"] = opts["base_url"]
        if "config_dir" in opts:
            extra["CLAUDE_CONFIG_DIR"] = opts["config_dir"]
        return CliCommand(tuple(argv), self.environment(opts, extra), prompt, opts.get("cwd"))

    def parser(self, turn: Turn) -> LineParser:
        return _Parser(turn)


class _Parser(LineParser):
    def __init__(self, turn: Turn) -> None:
        super().__init__(turn)
        self.model: str | None = turn.opts.get("model")
        self.streamed: set[str] = set()  # message ids whose text came as deltas
        self.last_message: str | None = None
        self.any_text = False
        self.synthetic: list[str] = []  # the CLI's own error texts

    def feed(self, line: dict[str, Any]) -> list[BackendEvent]:
        kind = line.get("type")
        if kind == "system":
            return self._system(line)
        if line.get("parent_tool_use_id"):  # a sub-agent's inner work
            return []
        if kind == "stream_event":
            return self._delta(line)
        if kind == "assistant":
            return self._assistant(line.get("message") or {})
        if kind == "user":
            return self._tool_results(line.get("message") or {})
        if kind == "result":
            terminal = self.turn.terminal = self._result(line)
            if terminal.kind != "result":
                return []
            return [BackendEvent.new("usage", json_object(terminal.data["usage"]))]
        return []

    def _system(self, line: dict[str, Any]) -> list[BackendEvent]:
        subtype = line.get("subtype")
        if subtype == "init":
            if isinstance(line.get("model"), str):
                self.model = line["model"]
            return [self.turn.acknowledge(line.get("session_id"))]
        if subtype == "api_retry":
            return [BackendEvent.new("retry", {k: line[k] for k in (
                "attempt", "max_retries", "retry_delay_ms", "error_status")
                if isinstance(line.get(k), int | None) and k in line})]
        return []

    def _text(self, message_id: Any, text: str) -> BackendEvent:
        data: dict[str, Any] = {"text": self.turn.text(text)}
        if message_id != self.last_message and self.any_text:
            data["message_boundary"] = True
        self.last_message, self.any_text = message_id, True
        return BackendEvent.new("text", data)

    def _delta(self, line: dict[str, Any]) -> list[BackendEvent]:
        event = line.get("event") or {}
        delta = event.get("delta") or {}
        if event.get("type") == "content_block_delta" and delta.get("type") == "text_delta":
            message_id = line.get("api_message_id")
            self.streamed.add(str(message_id))
            return [self._text(message_id, str(delta.get("text", "")))]
        return []

    def _assistant(self, message: dict[str, Any]) -> list[BackendEvent]:
        if message.get("model") == "<synthetic>":  # the CLI speaking, e.g. "API Error: ..."
            self.synthetic += [str(b.get("text")) for b in message.get("content") or []
                               if isinstance(b, dict) and b.get("type") == "text"]
            return []
        events = []
        message_id = message.get("id")
        for block in message.get("content") or []:
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text" and str(message_id) not in self.streamed:
                events.append(self._text(message_id, str(block.get("text", ""))))
            elif kind == "tool_use":
                events.append(BackendEvent.new("tool_use", {
                    "id": str(block.get("id")), "name": str(block.get("name")),
                    "input": self.turn.data(block.get("input") or {})}))
            elif kind in ("thinking", "redacted_thinking"):
                events.append(BackendEvent.new("reasoning", {"chars": len(str(block.get("thinking",
                                                                                 "")))}))
        return events

    def _tool_results(self, message: dict[str, Any]) -> list[BackendEvent]:
        content = message.get("content")
        if not isinstance(content, list):
            return []
        return [BackendEvent.new("tool_result", {"id": str(b.get("tool_use_id")),
                                          "is_error": bool(b.get("is_error")),
                                          "chars": len(str(b.get("content", "")))})
                for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]

    def _result(self, line: dict[str, Any]) -> BackendEvent:
        if line.get("is_error") or line.get("subtype") != "success":
            return error_event(self._failure(line))
        usage = _usage(line.get("usage") or {})
        cost = _number(line.get("total_cost_usd"))
        before = _number(self.turn.totals.get("cost_usd")) or 0.0
        data: dict[str, Any] = {
            "text": self.turn.text(line.get("result")),
            "session_id": self.turn.acknowledged or self.turn.session_id,
            "usage": usage, "model": self.model,
            "cost_usd": None if cost is None else round(max(0.0, cost - before), 10),
            "num_turns": line.get("num_turns") if isinstance(line.get("num_turns"), int)
            else None,
            "stop_reason": line.get("stop_reason") if isinstance(line.get("stop_reason"), str)
            else None,
            "totals": {"cost_usd": cost} if cost is not None else dict(self.turn.totals)}
        return BackendEvent.new("result", data)

    def _failure(self, line: dict[str, Any]) -> BackendError:
        provider = self.turn.backend.provider
        found = line.get("errors")
        errors: list[Any] = found if isinstance(found, list) else []
        text = " | ".join(str(x) for x in [line.get("result") or "", *errors, *self.synthetic]
                          if x)
        message = self.turn.operator(text)
        subtype = line.get("subtype")
        status = line.get("api_error_status")
        if isinstance(status, int) and status >= 400:
            kind, retryable = classify_status(status)
            return BackendError(provider, kind, retryable, status, message=message)
        if subtype in _RESULT_KINDS:
            return BackendError(provider, _RESULT_KINDS[subtype], False, message=message)
        if "No conversation found" in text:
            return BackendError(provider, "session_not_found", False, message=message)
        if line.get("terminal_reason") == "prompt_too_long":
            return BackendError(provider, "invalid_request", False, message=message)
        return BackendError(provider, "cli_error", False, message=message)


def _usage(doc: dict[str, Any]) -> dict[str, int]:
    def count(name: str) -> int:
        value = doc.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    return {"input_tokens": count("input_tokens"), "output_tokens": count("output_tokens"),
            "cache_read_tokens": count("cache_read_input_tokens"),
            "cache_write_tokens": count("cache_creation_input_tokens")}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
