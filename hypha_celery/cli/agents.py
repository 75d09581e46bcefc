"""``hypha agents``: list, inspect and talk to conversational agents by name. Thin: every
command is one ``hypha.agents`` call. Nothing here prints an agent's state, session or
prompts except what was asked for (``ask`` prints its own response)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from hypha_celery.cli.common import app_option, echo_json, echo_line, opened
from hypha_celery.cli.follow import LiveLines
from hypha_celery.client.scoped import ScopedHypha
from hypha_celery.errors import AgentNotFound

_TIMEOUT = click.FloatRange(min=0, min_open=True)


@click.group()
def agents() -> None:
    """Long-running conversational agents: list them, read their status, ask and tell
    them, halt, resume, drain or stop them. Without a broker the command's own process
    serves the agent's turns (embedded) and waits for them."""


def _known(hypha: ScopedHypha, name: str) -> None:
    """Casts (``halt``, ``resume``) are silent no-ops for an unknown name; a typo on the
    command line is an error."""
    if hypha.agents.whereis(name) is None:
        raise AgentNotFound(name)


@contextmanager
def _serving(hypha: ScopedHypha, name: str, *, note: bool = True) -> Iterator[None]:
    """Embedded, a call that finds the agent not busy hands it to this process's worker:
    stay until the agent is no longer busy, or its turns would be left to the recovery
    sweep. A turn another process already serves is not waited for."""
    before = hypha.agents.whereis(name) if hypha.settings.embedded else None
    yield
    if before is None or before.phase == "busy":
        return
    info = hypha.agents.whereis(name)
    if info is None or info.phase != "busy":
        return
    if note:
        click.echo("hypha: note: no HYPHA_BROKER_URL, the agent's turns run in this "
                   "process; waiting for it to go idle", err=True)
    while (info := hypha.agents.whereis(name)) is not None and info.phase == "busy":
        time.sleep(0.05)  # ends: the agent's watchdog bounds every turn


@agents.command("list")
@app_option()
@click.option("--json", "as_json", is_flag=True, help="one JSON object a line")
def agents_list(app_spec: str | None, as_json: bool) -> None:
    """List the live agents: name, phase (idle / busy / halted) and kind."""
    with opened(app_spec) as hypha:
        found = [i for n in sorted(hypha.agents.list()) if (i := hypha.agents.whereis(n))]
    for info in found:
        if as_json:
            click.echo(echo_line({"name": info.name, "phase": info.phase, "kind": info.kind,
                                  "incarnation": info.incarnation}))
        else:
            click.echo(f"{info.name}  {info.phase:<7} {info.kind}")
    if not found and not as_json:
        click.echo("no agents", err=True)


@agents.command("status")
@click.argument("name")
@app_option()
@click.option("--json", "as_json", is_flag=True, help="one JSON object")
def agents_status(name: str, app_spec: str | None, as_json: bool) -> None:
    """Show an agent's runtime snapshot: phase, flags, queue depths, the current request's
    ids and timings (never its state, session or prompts)."""
    with opened(app_spec) as hypha:
        snapshot = {"name": name, **hypha.agents.runtime_snapshot(name)}
    if as_json:
        click.echo(echo_line(snapshot))
        return
    for line in _status_lines(snapshot):
        click.echo(line)


def _status_lines(s: dict[str, Any]) -> list[str]:
    flags = [f for f in ("halted", "halt_pending", "draining", "self_chain_pending") if s[f]]
    cur = s["current_request"]
    current = "-" if cur is None else (
        f"{cur['ref']} ({cur['origin']}, attempt {cur['attempt']}, "
        f"{cur['elapsed_ms']:.0f}ms of {cur['watchdog_ms']}ms watchdog)")
    rows: list[tuple[str, Any]] = [
        ("agent", s["name"]),
        ("phase", s["phase"]),
        ("flags", ", ".join(flags) or "-"),
        ("queued", f"{s['pending_prompts']} prompts, {s['pending_notifications']} "
                   "notifications"),
        ("current", current),
    ]
    return [f"{key:<8} {value}" for key, value in rows]


@agents.command("ask")
@click.argument("name")
@click.argument("text")
@app_option()
@click.option("--timeout", type=_TIMEOUT, metavar="SECONDS",
              help="give up waiting after this long (the ask stays queued or running)")
@click.option("--json", "as_json", is_flag=True,
              help="the whole response (prompt, events, usage, ...) as JSON")
def agents_ask(name: str, text: str, app_spec: str | None, timeout: float | None,
               as_json: bool) -> None:
    """Ask NAME and print the response text (a failed turn exits 1 with its reason)."""
    with opened(app_spec) as hypha, _serving(hypha, name, note=False):
        response = hypha.agents.ask(name, text, timeout=timeout)
    if as_json:
        echo_json(response.to_json())
    else:
        click.echo(response.text)


@agents.command("tell")
@click.argument("name")
@click.argument("text")
@app_option()
def agents_tell(name: str, text: str, app_spec: str | None) -> None:
    """Queue TEXT for NAME and print its ref (read the outcome with `poll`)."""
    with opened(app_spec) as hypha, _serving(hypha, name):
        ref = hypha.agents.tell(name, text)
        click.echo(ref)


@agents.command("poll")
@click.argument("name")
@click.argument("ref")
@app_option()
@click.option("--json", "as_json", is_flag=True, help="one JSON object (with the response)")
@click.pass_context
def agents_poll(ctx: click.Context, name: str, ref: str, app_spec: str | None,
                as_json: bool) -> None:
    """The outcome of a tell: `pending`, `completed` and the response text, or `error`
    and its reason (unknown and pruned refs are `error not_found`; exits 1)."""
    with opened(app_spec) as hypha:
        poll = hypha.agents.poll(name, ref)
    if as_json:
        click.echo(echo_line({"status": poll.status, "reason": poll.reason, "info": poll.info,
                              "response": None if poll.response is None
                              else poll.response.to_json()}))
    elif poll.response is not None:
        click.echo("completed")
        click.echo(poll.response.text)
    elif poll.status == "error":
        click.echo(f"error {poll.reason}")
    else:
        click.echo("pending")
    if poll.status == "error":
        ctx.exit(1)


@agents.command("halt")
@click.argument("name")
@app_option()
def agents_halt(name: str, app_spec: str | None) -> None:
    """Halt NAME: now when idle, after its current turn otherwise (queued work waits)."""
    with opened(app_spec) as hypha:
        _known(hypha, name)
        with _serving(hypha, name):
            hypha.agents.halt(name)
        s = hypha.agents.runtime_snapshot(name)
    if s["draining"]:
        click.echo(f"agent {name} is draining; halt ignored")
    elif s["halted"]:
        click.echo(f"halted {name}")
    elif s["halt_pending"]:
        click.echo(f"agent {name} halts after its current turn")
    else:
        click.echo(f"halt requested for {name}")


@agents.command("resume")
@click.argument("name")
@app_option()
def agents_resume(name: str, app_spec: str | None) -> None:
    """Resume a halted NAME (queued work runs) or cancel a pending halt."""
    with opened(app_spec) as hypha:
        _known(hypha, name)
        with _serving(hypha, name):
            hypha.agents.resume(name)
            click.echo(f"resumed {name}")


@agents.command("drain")
@click.argument("name")
@app_option()
@click.option("--timeout", type=_TIMEOUT, metavar="SECONDS",
              help="give up waiting after this long (the drain goes on)")
def agents_drain(name: str, app_spec: str | None, timeout: float | None) -> None:
    """Refuse new input, fail queued requests (`draining`), let the current turn finish,
    then stop NAME; returns once it is gone."""
    with opened(app_spec) as hypha:
        hypha.agents.drain(name, timeout=timeout)
    click.echo(f"drained {name}")


@agents.command("stop")
@click.argument("name")
@app_option()
def agents_stop(name: str, app_spec: str | None) -> None:
    """Stop NAME now: its active and queued asks fail `agent_terminated`."""
    with opened(app_spec) as hypha:
        hypha.agents.stop(name)
    click.echo(f"stopped {name}")


@agents.command("stream")
@click.argument("name")
@app_option()
@click.option("--timeout", type=_TIMEOUT, metavar="SECONDS",
              help="stop after this long (default: when the turn being streamed ends)")
@click.option("--json", "as_json", is_flag=True, help="the live items, one JSON object a line")
def agents_stream(name: str, app_spec: str | None, timeout: float | None,
                  as_json: bool) -> None:
    """Print what NAME's current or next turn streams (its text on one line), until that
    turn ends. Live items are never stored: what came before this command is not shown.
    Needs the app's live bus (Redis); an embedded app sees only its own process."""
    with opened(app_spec) as hypha:
        lines = LiveLines(click.echo, indent="")
        for item in hypha.agents.stream(name, timeout=timeout):
            if as_json:
                click.echo(json.dumps(item, ensure_ascii=False))
            else:
                lines.item(item)
        lines.close_line()


COMMANDS = (agents,)
