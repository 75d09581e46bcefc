"""``CodexBackend``: an agent on the Codex CLI, one ``codex exec`` run per turn.

Each turn runs ``codex exec --json --skip-git-repo-check -`` (``codex exec resume --json
... <thread_id> -`` from the second turn on) with the prompt on stdin, and reads its JSON
lines (:mod:`.process`). Install the CLI with ``npm install -g @openai/codex`` (the tests
use ``scripts/install-clis``, which pins the version they were written against: 0.171.0).

With ``auth="key"`` (the default) the backend declares its own model provider through
``-c model_providers.hypha.*`` (Responses API at ``base_url``, default
``https://api.openai.com/v1``, the key in the CLI's environment as
``HYPHA_CODEX_API_KEY``), so the CLI's own login and config are not used for the model.

Start options (anything else is refused at start, as are a missing executable and a
missing key; nothing is written then):

========================  ==============================================================
``model``                 ``-m`` (the CLI's default otherwise)
``base_url``              the Responses endpoint of an OpenAI-compatible server
``key_env``               the variable holding the key (default ``OPENAI_API_KEY``, or a
                          key source: :mod:`hypha_celery.backends.llm.keys`)
``auth``                  ``"key"`` (default) or ``"cli"``: the CLI's own login/config
``codex_home``            ``CODEX_HOME``: where the CLI keeps its threads (made at the
                          first turn when missing)
``cwd``                   the working directory of the CLI (and of its commands)
``sandbox``               ``read-only`` (the CLI's default), ``workspace-write``,
                          ``danger-full-access``
``config``                more ``-c key=value`` overrides, ``{"key": JSON value}``
``env``                   more variables for the CLI (not secrets: the session is stored)
``executable``            the ``codex`` to run (a name on ``PATH`` or a path)
``session_id``            continue an existing thread of the CLI
``timeout``               seconds without a line before the turn fails (default 600)
``max_lines``             lines per turn (default 20,000); ``max_bytes``: bytes per turn
                          (64 MiB); ``max_line_bytes``: one line (4 MiB)
``extra_args``            more flags, as a list of strings (never the prompt or a key)
========================  ==============================================================

**Events** of a turn: ``session`` (``session_id``: the thread id of ``thread.started``,
after ``checkpoint(thread_id)`` stored it), ``text`` (one per agent message),
``reasoning`` (``chars``), ``tool_use`` (``id``, ``name``: ``command_execution``,
``file_change``, ``mcp:<server>.<tool>``, ``web_search``; ``input``), ``tool_result``
(``id``, ``status``, ``exit_code``, ``chars``), ``notice`` (the CLI's non-fatal warnings),
``retry``, ``usage`` (this turn's: the CLI reports the thread's running total), then
``result`` ``{"text", "session_id", "usage", "model", "totals"}`` or ``error``.

**Errors**: ``turn.failed`` classified from its message (an HTTP status in it gives
``authentication``, ``rate_limited``, ``invalid_request``, ``server_error``; a stream
cut gives ``incomplete_stream``; else ``turn_failed``), ``session_not_found`` (the CLI's
store does not have the thread: another host, a lost volume), ``session_conflict`` (the
CLI answered in another thread than the session's), ``cli_exit`` (with ``exit_code``),
``malformed_stream``, ``line_too_long``, ``stream_overflow``, ``incomplete_stream``,
``timeout``, ``cancelled``.

**Where the conversation lives, and its bound.** The CLI holds the thread, in
``$CODEX_HOME/sessions`` (default ``~/.codex``); our session keeps its id and the
running usage. Any worker can serve the next turn when every worker sees the same
``codex_home``. The CLI compacts a long thread itself; our per-turn bound is the line count
and the bytes of output (``stream_overflow`` past it, the CLI is killed).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, ClassVar

from hypha_celery.backends.cli import CliBackend, LineParser, Turn, error_event
from hypha_celery.backends.error import BackendError, classify_status
from hypha_celery.backends.event import BackendEvent
from hypha_celery.backends.llm.errors import from_payload
from hypha_celery.backends.process import CliCommand, CliProcess

__all__ = ["CodexBackend"]

SANDBOXES = ("read-only", "workspace-write", "danger-full-access")
DEFAULT_BASE_URL = "https://api.openai.com/v1"
KEY_VAR = "HYPHA_CODEX_API_KEY"
_PROVIDER = "hypha"
_STATUS = re.compile(r"\bstatus:?\s*(\d{3})\b")
_LOST = "no rollout found"
_CUT = ("stream disconnected", "stream closed before", "Reconnecting")
_USAGE = (("input_tokens", "input_tokens"), ("output_tokens", "output_tokens"),
          ("cache_read_tokens", "cached_input_tokens"),
          ("cache_write_tokens", "cache_write_input_tokens"))


class CodexBackend(CliBackend):
    provider: ClassVar[str] = "codex"
    executable: ClassVar[str] = "codex"
    install_hint: ClassVar[str] = ("install it with `npm install -g @openai/codex` "
                                   "(or scripts/install-clis in a checkout of hypha-celery), "
                                   "or set the executable option")
    vendor: ClassVar[str] = "openai"
    extra_options: ClassVar[frozenset[str]] = frozenset({"codex_home", "sandbox", "config"})

    def check_extra(self, opts: dict[str, Any]) -> None:
        if "codex_home" in opts and not isinstance(opts["codex_home"], str):
            raise ValueError("codex_home must be a string")
        if opts.get("sandbox", "read-only") not in SANDBOXES:
            raise ValueError(f"sandbox must be one of {', '.join(SANDBOXES)}")
        config = opts.get("config")
        if config is not None:
            if not isinstance(config, dict) or not all(
                    isinstance(k, str) and re.fullmatch(r"[A-Za-z0-9_.\-]+", k) for k in config):
                raise ValueError("config maps dotted keys to JSON values")
            own = opts.get("auth", "key") == "key"
            for key in config:
                if own and (key == "model_provider" or key.startswith("model_providers.")):
                    raise ValueError("with auth='key' the model provider is the "
                                         "backend's: use base_url, or auth='cli'")

    def command(self, opts: dict[str, Any], session_id: str | None, prompt: str,
                key: str | None, executable: str) -> CliCommand:
        argv = [executable, "exec"]
        if session_id is not None:
            argv.append("resume")
        argv += ["--json", "--skip-git-repo-check"]
        if "model" in opts:
            argv += ["-m", opts["model"]]
        config: dict[str, Any] = {"sandbox_mode": opts.get("sandbox", "read-only"),
                                  "analytics.enabled": False}
        if key is not None:
            config.update(_provider(opts.get("base_url", DEFAULT_BASE_URL)))
        config.update(opts.get("config") or {})
        for name, value in config.items():
            argv += ["-c", f"{name}={_toml(value)}"]
        argv += opts.get("extra_args", [])
        if session_id is not None:
            argv.append(session_id)
        argv.append("-")  # the prompt: stdin
        extra: dict[str, str] = {}
        if key is not None:
            extra[KEY_VAR] = key
        if "codex_home" in opts:  # the CLI refuses a CODEX_HOME that does not exist
            os.makedirs(opts["codex_home"], exist_ok=True)
            extra["CODEX_HOME"] = opts["codex_home"]
        return CliCommand(tuple(argv), self.environment(opts, extra), prompt, opts.get("cwd"))

    def parser(self, turn: Turn) -> LineParser:
        return _Parser(turn)


def _provider(base_url: str) -> dict[str, Any]:
    at = f"model_providers.{_PROVIDER}"
    return {"model_provider": _PROVIDER, f"{at}.name": "hypha", f"{at}.base_url": base_url,
            f"{at}.env_key": KEY_VAR, f"{at}.wire_api": "responses",
            f"{at}.requires_openai_auth": False, f"{at}.supports_websockets": False}


def _toml(value: Any) -> str:
    """A JSON value as a TOML literal (JSON strings, numbers, booleans and arrays of them
    are TOML too; objects become inline tables)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)


class _Parser(LineParser):
    def __init__(self, turn: Turn) -> None:
        super().__init__(turn)
        self.texts: list[str] = []
        self.started: set[str] = set()  # tool items announced by item.started
        self.last_error = ""

    def feed(self, line: dict[str, Any]) -> list[BackendEvent]:
        kind = line.get("type")
        if kind == "thread.started":
            return [self.turn.acknowledge(line.get("thread_id"))]
        if kind in ("item.started", "item.updated", "item.completed"):
            item = line.get("item")
            return self._item(str(kind), item) if isinstance(item, dict) else []
        if kind == "error":
            self.last_error = str(line.get("message", ""))
            cut = any(c in self.last_error for c in _CUT)
            return [BackendEvent.new("retry", {})] if cut else []
        if kind == "turn.completed":
            return self._completed(line.get("usage") or {})
        if kind == "turn.failed":
            error = line.get("error") or {}
            message = error.get("message") if isinstance(error, dict) else None
            self.turn.terminal = error_event(self._failure(str(message or self.last_error)))
        return []

    def _item(self, kind: str, item: dict[str, Any]) -> list[BackendEvent]:
        item_type, item_id = item.get("type"), str(item.get("id"))
        done = kind == "item.completed"
        if item_type == "agent_message" and done:
            text = self.turn.text(item.get("text"))
            data: dict[str, Any] = {"text": text}
            if self.texts:
                data["message_boundary"] = True
            self.texts.append(text)
            return [BackendEvent.new("text", data)]
        if item_type == "reasoning" and done:
            return [BackendEvent.new("reasoning", {"chars": len(str(item.get("text", "")))})]
        if item_type == "error" and done:
            message = self.turn.operator(item.get("message"))
            return [BackendEvent.new("notice", {"message": message})]
        name, tool_input = _tool(item)
        if name is None or kind == "item.updated":
            return []
        events = []
        if item_id not in self.started:
            self.started.add(item_id)
            events.append(BackendEvent.new("tool_use", {"id": item_id, "name": name,
                                                 "input": self.turn.data(tool_input)}))
        if done:
            exit_code = item.get("exit_code")
            events.append(BackendEvent.new("tool_result", {
                "id": item_id, "status": str(item.get("status")),
                "exit_code": exit_code if isinstance(exit_code, int) else None,
                "chars": len(str(item.get("aggregated_output", "")))}))
        return events

    def end(self, exit_code: int, proc: CliProcess) -> BackendEvent:
        if exit_code != 0 and self.turn.terminal is None and _LOST in proc.stderr_tail():
            return error_event(proc.error("session_not_found", "the CLI's store has no such "
                                          "thread (another host, a lost volume)"))
        return super().end(exit_code, proc)

    def _completed(self, usage: dict[str, Any]) -> list[BackendEvent]:
        total = {ours: _count(usage.get(theirs)) for ours, theirs in _USAGE}
        before = self.turn.totals.get("usage") if isinstance(self.turn.totals, dict) else None
        turn_usage = {k: max(0, v - _count((before or {}).get(k))) for k, v in total.items()}
        self.turn.terminal = BackendEvent.new("result", {
            "text": "\n\n".join(self.texts),
            "session_id": self.turn.acknowledged or self.turn.session_id,
            "usage": turn_usage, "model": self.turn.opts.get("model"),
            "totals": {"usage": total}})
        return [BackendEvent.new("usage", turn_usage)]

    def _failure(self, message: str) -> BackendError:
        provider = self.turn.backend.provider
        text = self.turn.operator(message)
        status = _STATUS.search(message)
        if status is not None:
            kind, retryable = classify_status(int(status.group(1)))
            return BackendError(provider, kind, retryable, int(status.group(1)), message=text)
        if any(c in message for c in _CUT):
            return BackendError(provider, "incomplete_stream", True, message=text)
        try:
            body = json.loads(message)
        except ValueError:
            body = None
        if isinstance(body, dict):
            found = from_payload(provider, body, text)
            code = str((body.get("error") or {}).get("code", "")) if isinstance(
                body.get("error"), dict) else ""
            if found.kind == "provider_error" and code.isdigit():
                kind, retryable = classify_status(int(code))
                return BackendError(provider, kind, retryable, int(code), message=text)
            return found
        if "high demand" in message:
            return BackendError(provider, "server_error", True, message=text)
        return BackendError(provider, "turn_failed", False, message=text)


def _tool(item: dict[str, Any]) -> tuple[str | None, Any]:
    kind = item.get("type")
    if kind == "command_execution":
        return "command_execution", {"command": str(item.get("command", ""))}
    if kind == "file_change":
        return "file_change", {"changes": item.get("changes") or []}
    if kind == "mcp_tool_call":
        return f"mcp:{item.get('server')}.{item.get('tool')}", item.get("arguments") or {}
    if kind == "web_search":
        return "web_search", {"query": str(item.get("query", ""))}
    return None, None


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
