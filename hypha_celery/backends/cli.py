"""``CliBackend``: what the Claude Code and Codex backends share — start options, the
session, the environment given to the CLI, the mid-turn checkpoint, cancellation and the
turn loop over a :class:`~hypha_celery.backends.process.CliProcess`.

A subclass supplies the command line (:meth:`CliBackend.command`) and a
:class:`LineParser` that turns the CLI's JSON lines into :class:`BackendEvent` s.

**Session.** ``{"opts": {...}, "session_id": str | None, "totals": {...}}``: the validated
options (no key), the CLI's conversation id (``None`` until the CLI acknowledges one) and
the running totals the CLI reports cumulatively (to report each turn's own share). Any
worker can serve the next turn, provided it can reach the CLI's own session store (see
the backends' docs: ``config_dir`` / ``codex_home``).

**Environment.** The CLI does not inherit the worker's environment: it gets a short list
of harmless variables (``PATH``, ``HOME``, locale, proxies, CA bundles), the vendor's
variables the backend sets (key, base URL), and the ``env`` option. The key is resolved at
each turn (:mod:`hypha_celery.backends.llm.keys`) and only ever goes into that
environment: never into argv, the session, events or exception text (every text taken
from the CLI is redacted of it).
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any, ClassVar
from urllib.parse import urlsplit

from hypha_celery.backends.base import Backend, Checkpoint, Session
from hypha_celery.backends.error import BackendError, BackendErrorJson
from hypha_celery.backends.event import BackendEvent
from hypha_celery.backends.llm.keys import check_env_name, resolve_key
from hypha_celery.backends.process import (
    CliCommand,
    CliProcess,
    StreamLimits,
    find_executable,
    redact,
    scrub,
)

__all__ = ["COMMON_OPTIONS", "CliBackend", "CliExit", "LineParser", "Turn"]

COMMON_OPTIONS = frozenset({"model", "base_url", "key_env", "auth", "executable", "cwd", "env",
                            "session_id", "timeout", "max_lines", "max_bytes",
                            "max_line_bytes", "extra_args"})
_PASS_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR",
             "TERM", "SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS",
             "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")


class CliExitJson(BackendErrorJson):
    exit_code: int


class CliExit(BackendError):
    """The CLI exited with a non-zero code (``kind="cli_exit"``)."""

    def __init__(self, provider: str, exit_code: int, message: str = "") -> None:
        super().__init__(provider, "cli_exit", False, message=message)
        self.exit_code = exit_code

    def to_json(self) -> CliExitJson:
        return {**super().to_json(), "exit_code": self.exit_code}


class Turn:
    """What a parser knows about the running turn."""

    def __init__(self, backend: CliBackend, opts: dict[str, Any], session_id: str | None,
                 totals: dict[str, Any], checkpoint: Checkpoint | None,
                 secrets: tuple[str, ...]) -> None:
        self.backend = backend
        self.opts = opts
        self.session_id = session_id
        self.totals = totals
        self.checkpoint = checkpoint
        self.secrets = secrets
        self.acknowledged: str | None = None
        self.terminal: BackendEvent | None = None

    def acknowledge(self, session_id: Any) -> BackendEvent:
        """The CLI named its conversation: check it against the session, checkpoint it
        (durably stored before the turn goes on), and say so in a ``session`` event."""
        sid = self.backend.check_session_id(session_id)
        if self.session_id is not None and sid != self.session_id:
            raise BackendError(self.backend.provider, "session_conflict", False,
                               message="the CLI answered in another conversation than the "
                                       "session's (its store lost it?)")
        if self.acknowledged is None and self.checkpoint is not None:
            try:
                self.checkpoint(sid)
            except BackendError:
                raise
            except Exception as exc:
                raise BackendError(self.backend.provider, "checkpoint_failed", True,
                                   message=type(exc).__name__) from None
        self.acknowledged = sid
        return BackendEvent.new("session", {"session_id": sid})

    def text(self, value: Any) -> str:
        """Model text for an event: the exact secrets removed."""
        return redact(value, self.secrets) if isinstance(value, str) else ""

    def data(self, value: Any) -> Any:
        """JSON from the CLI (tool inputs) for an event: the exact secrets removed."""
        encoded = json.dumps(value)
        cleaned = redact(encoded, self.secrets)
        return value if cleaned == encoded else json.loads(cleaned)

    def operator(self, value: Any) -> str:
        """CLI text for an error message (operators only)."""
        return scrub(value if isinstance(value, str) else json.dumps(value), self.secrets)


class LineParser(ABC):
    """Turns a CLI's JSON lines into events; sets ``turn.terminal`` at the last line."""

    def __init__(self, turn: Turn) -> None:
        self.turn = turn

    @abstractmethod
    def feed(self, line: dict[str, Any]) -> list[BackendEvent]:
        """The events of one line; may raise :class:`BackendError` (the turn fails)."""

    def end(self, exit_code: int, proc: CliProcess) -> BackendEvent:
        """The terminal event once the CLI exited with ``exit_code``."""
        terminal = self.turn.terminal
        if terminal is not None and (exit_code == 0 or terminal.kind == "error"):
            return terminal
        if exit_code != 0:
            return error_event(CliExit(self.turn.backend.provider, exit_code,
                                       proc.error("cli_exit", f"exit code {exit_code}").message))
        return error_event(proc.error("incomplete_stream",
                                      "the CLI exited without its final line", True))


def error_event(exc: BackendError) -> BackendEvent:
    data: dict[str, Any] = {"reason": exc.kind, "backend_error": exc.to_json()}
    if isinstance(exc, CliExit):
        data["exit_code"] = exc.exit_code
    return BackendEvent.new("error", data)


class CliBackend(Backend):
    """See the module docstring."""

    provider: ClassVar[str] = "cli"
    #: the executable's default name, and how to install it
    executable: ClassVar[str] = ""
    install_hint: ClassVar[str] = ""
    #: whose key (``resolve_key(vendor)``)
    vendor: ClassVar[str] = ""
    #: start options beyond :data:`COMMON_OPTIONS`
    extra_options: ClassVar[frozenset[str]] = frozenset()

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._turn: _Run | None = None

    # -- what a subclass provides ----------------------------------------------------------
    @abstractmethod
    def command(self, opts: dict[str, Any], session_id: str | None, prompt: str,
                key: str | None, executable: str) -> CliCommand:
        """The command of one turn."""

    @abstractmethod
    def parser(self, turn: Turn) -> LineParser:
        """A parser for one turn."""

    def check_extra(self, opts: dict[str, Any]) -> None:
        """Validate the subclass's options (``ValueError`` / ``TypeError``)."""

    # -- the Backend contract --------------------------------------------------------------
    def start_session(self, opts: dict[str, Any]) -> Session:
        clean = self.check_options(opts)
        self._executable(clean)
        self._key(clean)
        session_id = clean.pop("session_id", None)
        if session_id is not None:
            session_id = self.check_session_id(session_id)
        return {"opts": clean, "session_id": session_id, "totals": {}}

    def prompt(self, session: Session, prompt: str,
               checkpoint: Checkpoint | None = None) -> tuple[Iterator[BackendEvent], Session]:
        opts, session_id, totals = self._read(session)
        if not isinstance(prompt, str) or not prompt.strip():
            raise self._error("invalid_request", "a prompt is non-empty text")
        executable = self._executable(opts)
        key = self._key(opts)
        command = self.command(opts, session_id, prompt, key, executable)
        secrets = tuple(s for s in (key,) if s)
        command = CliCommand(command.argv, command.env, command.stdin, command.cwd, secrets)
        turn = Turn(self, opts, session_id, dict(totals), checkpoint, secrets)
        run = _Run(self, command, _limits(opts), turn)
        with self._lock:
            self._turn = run
        return run.events(), {"opts": opts, "session_id": session_id, "totals": dict(totals)}

    def update_session(self, session: Session, result_data: dict[str, Any]) -> Session:
        opts, session_id, totals = self._read(session)
        found = result_data.get("session_id")
        if isinstance(found, str) and found:
            session_id = found
        new_totals = result_data.get("totals")
        return {"opts": opts, "session_id": session_id,
                "totals": dict(new_totals) if isinstance(new_totals, dict) else totals}

    def checkpoint_session(self, session: Session, session_id: str) -> Session:
        opts, current, totals = self._read(session)
        sid = self.check_session_id(session_id)
        if current is not None and current != sid:
            raise self._error("session_conflict", "the session already holds another "
                              "conversation id")
        return {"opts": opts, "session_id": sid, "totals": totals}

    def reset_session(self, session: Session) -> Session:
        opts, _, _ = self._read(session)
        return {"opts": opts, "session_id": None, "totals": {}}

    def terminate_session(self, session: Session) -> None:
        """Nothing to release: the CLI's conversation files stay in its store."""

    def cancel(self) -> None:
        with self._lock:
            run = self._turn
        if run is not None:
            run.cancel()

    # -- options ----------------------------------------------------------------------------
    def check_options(self, opts: dict[str, Any]) -> dict[str, Any]:
        """The start options, validated, as stored in the session (JSON, no key)."""
        if not isinstance(opts, dict):
            raise self._error("invalid_option", "backend options are a dict")
        unknown = sorted(set(opts) - COMMON_OPTIONS - self.extra_options)
        if unknown:
            raise self._error("invalid_option", f"unknown backend option {unknown[0]!r}")
        clean = {k: v for k, v in opts.items() if v is not None}
        try:
            _check_common(clean)
            self.check_extra(clean)
            stored: dict[str, Any] = json.loads(json.dumps(clean, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise self._error("invalid_option", str(exc)) from None
        return stored

    def check_session_id(self, value: Any) -> str:
        """A conversation id as the CLIs make them: a UUID."""
        try:
            if isinstance(value, str):
                return str(uuid.UUID(value))
        except ValueError:
            pass
        raise self._error("invalid_session_id", "a CLI conversation id is a UUID")

    def environment(self, opts: dict[str, Any], extra: dict[str, str]) -> dict[str, str]:
        """The CLI's whole environment: harmless worker variables, then ``extra`` (the
        backend's own), then the ``env`` option."""
        env = {k: v for k, v in os.environ.items() if k in _PASS_ENV or k.startswith("LC_")}
        env.update(extra)
        env.update(opts.get("env") or {})
        return env

    # -- helpers ----------------------------------------------------------------------------
    def _executable(self, opts: dict[str, Any]) -> str:
        name = opts.get("executable") or self.executable
        path = (opts.get("env") or {}).get("PATH") or os.environ.get("PATH")
        return find_executable(self.provider, name, self.install_hint, path)

    def _key(self, opts: dict[str, Any]) -> str | None:
        if opts.get("auth", "key") == "cli":
            return None
        return resolve_key(self.vendor, opts.get("key_env"))

    def _read(self, session: Any) -> tuple[dict[str, Any], str | None, dict[str, Any]]:
        if (not isinstance(session, dict) or not isinstance(session.get("opts"), dict)
                or not isinstance(session.get("session_id"), str | None)):
            raise self._error("invalid_session", f"not a {type(self).__name__} session")
        totals = session.get("totals")
        return session["opts"], session["session_id"], totals if isinstance(totals, dict) else {}

    def _error(self, kind: str, message: str) -> BackendError:
        return BackendError(self.provider, kind, False, message=message)


class _Run:
    """One dispatched turn: spawns the CLI when first iterated; cancel from anywhere."""

    def __init__(self, backend: CliBackend, command: CliCommand, limits: StreamLimits,
                 turn: Turn) -> None:
        self.proc = CliProcess(backend.provider, command, limits)
        self.parser = backend.parser(turn)
        self.turn = turn

    def events(self) -> Iterator[BackendEvent]:
        proc = self.proc
        try:
            for line in proc.lines():
                yield from self._feed(line)
            code = proc.finish()
            yield self.parser.end(code, proc)
        except BackendError as exc:
            proc.kill(exc.kind)  # a no-op when it was killed already
            yield error_event(exc)
        finally:
            proc.close()

    def _feed(self, line: dict[str, Any]) -> list[BackendEvent]:
        try:
            return self.parser.feed(line)
        except BackendError:
            raise
        except (AttributeError, TypeError, ValueError, KeyError) as exc:
            # valid JSON, but not of a shape the parser knows (a string for an object...)
            raise self.proc.error("malformed_stream",
                                  f"unexpected line shape: {type(exc).__name__}") from None

    def cancel(self) -> None:
        self.proc.kill("cancelled")


def _limits(opts: dict[str, Any]) -> StreamLimits:
    base = StreamLimits()
    return StreamLimits(int(opts.get("max_line_bytes", base.max_line_bytes)),
                        int(opts.get("max_lines", base.max_lines)),
                        int(opts.get("max_bytes", base.max_bytes)),
                        float(opts.get("timeout", base.idle_timeout)))


_POSITIVE_INT = ("max_lines", "max_bytes", "max_line_bytes")
_TEXT = ("model", "executable", "cwd")


def _check_common(opts: dict[str, Any]) -> None:
    for name in _POSITIVE_INT:
        value = opts.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value <= 0):
            raise ValueError(f"{name} must be a positive integer")
    timeout = opts.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)
                                or timeout <= 0):
        raise ValueError("timeout must be a positive number of seconds")
    for name in _TEXT:
        if name in opts and (not isinstance(opts[name], str) or not opts[name]):
            raise ValueError(f"{name} must be a non-empty string")
    if opts.get("auth", "key") not in ("key", "cli"):
        raise ValueError("auth must be 'key' (an API key) or 'cli' (the CLI's own login)")
    check_env_name(opts.get("key_env"))
    if "cwd" in opts and not os.path.isdir(opts["cwd"]):
        raise ValueError("cwd must be an existing directory")
    _check_base_url(opts.get("base_url"))
    _check_env(opts.get("env"))
    check_strings("extra_args", opts.get("extra_args"))


def check_strings(name: str, value: Any) -> None:
    if value is not None and (not isinstance(value, list | tuple)
                              or not all(isinstance(v, str) for v in value)):
        raise ValueError(f"{name} must be a list of strings")


def _check_base_url(base_url: Any) -> None:
    if base_url is None:
        return
    if not isinstance(base_url, str):
        raise ValueError("base_url must be a string")
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("base_url must be an http(s) URL")
    if parts.username or parts.password:  # the session is stored: no secrets in it
        raise ValueError("base_url must not hold credentials (use key_env)")


def _check_env(env: Any) -> None:
    if env is None:
        return
    if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise ValueError("env maps variable names to strings")
    for name, value in env.items():
        check_env_name(name)
        if scrub(value, ()) != value[-2000:]:
            raise ValueError(f"env {name!r} looks like a secret: the session is stored, "
                             "keys come from key_env or a key source")
