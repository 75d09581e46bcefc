"""``hypha bus list | show | depth | dead-letters | redrive``: the message bus, thin over
:class:`~hypha_celery.bus.Bus` (``search``, ``get``, ``redrive``) and, with
``--as-user``, that user's :class:`~hypha_celery.client.scoped_bus.ScopedBus`.

Payloads and metadata are content (a message to an agent is its prompt): no listing
prints them; ``show --payload`` does, for one message, on purpose. ``depth`` reads the
counts Prometheus exports (live messages by recipient kind and status, the oldest one's
age, the fullest queue): an operator's command.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import click
from pydantic import ValidationError

from hypha_celery.bus import Endpoint, EndpointKind, Message, MessageStatus
from hypha_celery.cli.common import (
    aligned,
    app_option,
    echo_json,
    echo_line,
    iso,
    opened,
    operator_only,
)
from hypha_celery.cli.loading import app_from
from hypha_celery.store import bus as bus_rows

__all__ = ["COMMANDS", "KindDepth", "age", "kind_depths", "messages_table"]

#: Messages one listing shows at most (the store's bound).
MAX_LISTED = bus_rows.MAX_LIST
HEADER = ("ID", "TYPE", "SCOPE", "FROM", "TO", "STATUS", "ATTEMPTS", "AGE", "BYTES",
          "REASON")
#: Fields of a message that are content: shown by ``show --payload`` only.
CONTENT = ("payload", "metadata")
_KINDS = ", ".join(k.value for k in EndpointKind)


def age(seconds: float) -> str:
    """``42s``, ``7m``, ``3h``, ``2d``: how long ago, coarsely."""
    s = max(0, int(seconds))
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


def messages_table(msgs: Sequence[Message], now: float) -> list[str]:
    """Aligned columns, a header first; no payload, no metadata."""
    return aligned([HEADER, *((m.id, m.type, f"{m.user_id}:{m.session_id}", str(m.from_),
                               str(m.to), m.status.value, str(m.attempt_count),
                               age(now - m.created_at), str(m.size()), m.reason or "-")
                              for m in msgs)])


def _json(msg: Message, *, content: bool) -> dict[str, object]:
    doc = msg.doc()
    doc["bytes"] = msg.size()
    if not content:
        for name in CONTENT:
            doc.pop(name, None)
    return doc


def _endpoint(_ctx: click.Context, _param: click.Parameter, value: str | None
              ) -> Endpoint | None:
    if value is None:
        return None
    try:
        return Endpoint.parse(value)
    except (ValueError, ValidationError):
        raise click.BadParameter(f"{value!r} is not KIND:ID (KIND one of {_KINDS}; ID "
                                 "without ':' or spaces)") from None


def _statuses(values: Sequence[str]) -> list[MessageStatus]:
    return [MessageStatus(v) for v in values]


def _listing(app_spec: str | None, *, to: Endpoint | None, user: str | None,
             session: str | None, run: str | None, statuses: Sequence[MessageStatus],
             limit: int, as_json: bool, empty: str) -> None:
    with opened(app_spec) as hypha:
        if session is not None and user is None and hypha.principal.is_admin:
            raise click.UsageError("--session needs --user")
        msgs = hypha.bus.search(run_id=run, user_id=user, session_id=session, to=to,
                                statuses=statuses, limit=limit)
    if as_json:
        for msg in msgs:
            click.echo(echo_line(_json(msg, content=False)))
        return
    if not msgs:
        click.echo(empty, err=True)
        return
    for line in messages_table(msgs, time.time()):
        click.echo(line)


def _filters(fn: click.decorators.FC) -> click.decorators.FC:
    for option in reversed((
            click.option("--to", "to", metavar="KIND:ID", callback=_endpoint,
                         help="only messages to this endpoint, e.g. agent:writer"),
            click.option("--user", metavar="USER_ID", help="only this user's messages"),
            click.option("--session", metavar="SESSION_ID",
                         help="only this session's (with --user)"),
            click.option("--run", metavar="RUN_ID", help="only this run's messages"),
            click.option("--limit", type=click.IntRange(1, MAX_LISTED), default=50,
                         show_default=True),
            click.option("--json", "as_json", is_flag=True,
                         help="one JSON object a line (no payload)"),
            app_option())):
        fn = option(fn)
    return fn


@click.group("bus")
def bus_cmd() -> None:
    """The message bus: list, show, depth, dead letters, redrive (no payloads unless
    asked for one message: show --payload)."""


@bus_cmd.command("list")
@_filters
@click.option("--status", "status", multiple=True,
              type=click.Choice([s.value for s in MessageStatus]),
              help="only messages in this status (repeatable)")
def list_cmd(to: Endpoint | None, user: str | None, session: str | None, run: str | None,
             limit: int, as_json: bool, app_spec: str | None, status: tuple[str, ...]) -> None:
    """Messages, newest first: type, scope, endpoints, status, attempts, age, bytes."""
    _listing(app_spec, to=to, user=user, session=session, run=run,
             statuses=_statuses(status), limit=limit, as_json=as_json, empty="no messages")


@bus_cmd.command("dead-letters")
@_filters
def dead_letters_cmd(to: Endpoint | None, user: str | None, session: str | None,
                     run: str | None, limit: int, as_json: bool, app_spec: str | None) -> None:
    """Dead-lettered messages, newest first, with their reason (redrive one: redrive ID)."""
    _listing(app_spec, to=to, user=user, session=session, run=run,
             statuses=[MessageStatus.DEAD_LETTERED], limit=limit, as_json=as_json,
             empty="no dead-lettered messages")


@bus_cmd.command("show")
@click.argument("message_id", metavar="ID")
@click.option("--payload", is_flag=True,
              help="also the payload and metadata (content: a prompt's text)")
@click.option("--json", "as_json", is_flag=True)
@app_option()
def show_cmd(message_id: str, payload: bool, as_json: bool, app_spec: str | None) -> None:
    """One message: every field but its payload and metadata (--payload: those too)."""
    with opened(app_spec) as hypha:
        msg = hypha.bus.get(message_id)
    if msg is None:
        raise click.ClickException(f"no message {message_id!r}")
    doc = _json(msg, content=payload)
    if as_json:
        echo_json(doc)
        return
    for line in aligned([(k, _cell(k, v)) for k, v in doc.items()]):
        click.echo(line)


def _cell(key: str, value: object) -> str:
    """A field of ``show``: endpoints as ``kind:id``, times ISO UTC (``0``: none)."""
    if value is None or value == [] or value == {} or (key.endswith("_at") and not value):
        return "-"
    if isinstance(value, dict) and set(value) == {"kind", "id"}:
        return f"{value['kind']}:{value['id']}"
    if isinstance(value, list):
        return " ".join(_cell("", v) for v in value)
    if key.endswith("_at") and isinstance(value, int | float):
        return iso(value)
    if isinstance(value, dict):
        return echo_line(value)
    return str(value)


@dataclass(frozen=True, slots=True)
class KindDepth:
    """Live messages to one kind of recipient (``hypha_bus_messages``,
    ``hypha_bus_oldest_age_seconds``)."""

    recipient_kind: str
    queued: int
    delivered: int
    oldest_age_seconds: float


def kind_depths(depths: Sequence[bus_rows.QueueDepth], now: float) -> list[KindDepth]:
    """Every recipient kind, 0 when none (as the gauges)."""
    found = {(d.to_kind, d.status): d for d in depths}
    out = []
    for kind in bus_rows.RECIPIENT_KINDS:
        queued, delivered = (found.get((kind, s)) for s in ("queued", "delivered"))
        oldest = [d.oldest for d in (queued, delivered) if d is not None and d.oldest]
        out.append(KindDepth(kind, queued.count if queued else 0,
                             delivered.count if delivered else 0,
                             round(max(0.0, now - min(oldest)), 3) if oldest else 0.0))
    return out


@bus_cmd.command("depth")
@click.option("--json", "as_json", is_flag=True)
@app_option()
def depth_cmd(as_json: bool, app_spec: str | None) -> None:
    """Live messages by recipient kind (queued, delivered), the oldest one's age, and
    the fullest queue against its bounds: what Prometheus exports."""
    operator_only("hypha bus depth")
    hypha = app_from(app_spec)
    try:
        depths = kind_depths(bus_rows.depths(hypha.store), time.time())
        count, nbytes = bus_rows.fullest(hypha.store)
        limits = hypha.bus.limits
    finally:
        hypha.close()
    if as_json:
        echo_json({"kinds": [asdict(d) for d in depths], "fullest_queue": {
            "messages": count, "bytes": nbytes, "max_messages": limits.max_queue_messages,
            "max_bytes": limits.max_queue_bytes}})
        return
    for line in aligned([("KIND", "QUEUED", "DELIVERED", "OLDEST"),
                         *((d.recipient_kind, str(d.queued), str(d.delivered),
                            age(d.oldest_age_seconds) if d.queued + d.delivered else "-")
                           for d in depths)]):
        click.echo(line)
    click.echo(f"fullest queue: {count} of {limits.max_queue_messages} messages, "
               f"{nbytes} of {limits.max_queue_bytes} bytes")


@bus_cmd.command("redrive")
@click.argument("message_id", metavar="ID")
@app_option()
def redrive_cmd(message_id: str, app_spec: str | None) -> None:
    """Publish a dead-lettered message again, as a new message (the dead letter stays)."""
    with opened(app_spec) as hypha:
        copy = hypha.bus.redrive(message_id)
    click.echo(f"redriven {message_id} as {copy.id} ({copy.status.value} for {copy.to})")


#: Registered on the ``hypha`` group by :mod:`hypha_celery.cli.main`.
COMMANDS: tuple[click.Command, ...] = (bus_cmd,)
