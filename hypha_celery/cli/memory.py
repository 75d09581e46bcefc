"""``hypha memory``: governed memory from the terminal (add, search, show, history,
delete, list), thin over :class:`~hypha_celery.memory.MemoryManager` as the command's
principal sees it (with ``--as-user``, that user's memory only). ``--user`` names whose
memory; the narrower ids (``--session`` ...) make the scope. An error is one line and
exit status 1."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import click

from hypha_celery.cli.common import aligned, app_option, echo_json, echo_line, iso, opened
from hypha_celery.memory import MemoryProvenance, MemoryRecord, MemoryScope, MemoryType

__all__ = ["COMMANDS"]

_F = TypeVar("_F", bound=Callable[..., Any])
_TYPES = click.Choice([t.value for t in MemoryType])
_NARROWER = ("tenant", "workspace", "session", "agent", "pack")


def scope_options(fn: _F) -> _F:
    """``--user`` (required) and the optional narrower ids of a memory scope."""
    for name in reversed(_NARROWER):
        fn = click.option(f"--{name}", f"{name}_id", metavar="ID",
                          help=f"the scope's {name} id")(fn)
    return click.option("--user", "user_id", required=True, metavar="USER_ID",
                        help="whose memory")(fn)


def _scope(ids: dict[str, Any]) -> MemoryScope:
    return MemoryScope(ids.pop("user_id"), **{f"{n}_id": ids.pop(f"{n}_id") for n in _NARROWER})


def _line(r: MemoryRecord, width: int = 80) -> str:
    text = " ".join(r.text.split())
    return text if len(text) <= width else text[:width - 1] + "…"


def _table(records: list[MemoryRecord]) -> list[str]:
    cells = [("ID", "TYPE", "REV", "UPDATED", "TEXT"),
             *((r.id, r.memory_type.value, str(r.revision), iso(r.updated_at), _line(r))
               for r in records)]
    return aligned(cells)


@click.group("memory")
def memory_cmd() -> None:
    """Governed memory: records scoped by user, typed, revisioned (docs/memory.md)."""


@memory_cmd.command("add")
@click.argument("text")
@scope_options
@click.option("--type", "memory_type", type=_TYPES, default="semantic", show_default=True)
@click.option("--op", "operation_id", metavar="ID", help="the operation id (idempotency); "
              "default: a new one")
@click.option("--tag", "tags", multiple=True, help="a tag (repeat for more)")
@click.option("--run-id", help="provenance: the run it came from")
@click.option("--source", help="provenance: where it came from")
@click.option("--json", "as_json", is_flag=True, help="the record as JSON")
@app_option()
def add_cmd(text: str, memory_type: str, operation_id: str | None, tags: tuple[str, ...],
            run_id: str | None, source: str | None, as_json: bool, app_spec: str | None,
            **ids: Any) -> None:
    """Add a record (TEXT) to the scope."""
    provenance = MemoryProvenance(run_id, source) if run_id or source else None
    with opened(app_spec) as hypha:
        record = hypha.memory.add(_scope(ids), memory_type, text,
                                  operation_id=operation_id or uuid.uuid4().hex, tags=tags,
                                  provenance=provenance)
    if as_json:
        echo_json(record.json())
        return
    click.echo(f"memory {record.id} revision {record.revision}")


@memory_cmd.command("search")
@click.argument("query")
@scope_options
@click.option("--limit", type=click.IntRange(1, 100), default=10, show_default=True)
@click.option("--type", "memory_types", type=_TYPES, multiple=True,
              help="only records of this type (repeat for more)")
@click.option("--json", "as_json", is_flag=True, help="one JSON object a line")
@app_option()
def search_cmd(query: str, limit: int, memory_types: tuple[str, ...], as_json: bool,
               app_spec: str | None, **ids: Any) -> None:
    """Full-text search in the scope, best first. QUERY: words, "phrases", OR, -word."""
    with opened(app_spec) as hypha:
        hits = hypha.memory.search(_scope(ids), query, limit=limit,
                                   memory_types=list(memory_types) or None)
    if as_json:
        for h in hits:
            click.echo(echo_line({**h.record.json(), "score": h.score}))
        return
    if not hits:
        click.echo("no memory found", err=True)
        return
    for line in _table([h.record for h in hits]):
        click.echo(line)


@memory_cmd.command("show")
@click.argument("record_id")
@scope_options
@click.option("--json", "as_json", is_flag=True, help="the record as JSON")
@app_option()
def show_cmd(record_id: str, as_json: bool, app_spec: str | None, **ids: Any) -> None:
    """One record, with its text."""
    with opened(app_spec) as hypha:
        record = hypha.memory.get(_scope(ids), record_id)
    if as_json:
        echo_json(record.json())
        return
    for line in _table([record]):
        click.echo(line)
    click.echo("")
    click.echo(record.text)


@memory_cmd.command("history")
@click.argument("record_id")
@scope_options
@click.option("--json", "as_json", is_flag=True, help="one JSON object a line")
@app_option()
def history_cmd(record_id: str, as_json: bool, app_spec: str | None, **ids: Any) -> None:
    """A record's revisions, oldest first (a deleted record's: without text)."""
    with opened(app_spec) as hypha:
        revisions = hypha.memory.history(_scope(ids), record_id)
    if as_json:
        for r in revisions:
            click.echo(echo_line({"record_id": r.record_id, "revision": r.revision,
                                  "status": r.status.value, "text": r.text,
                                  "tags": list(r.tags), "operation_id": r.operation_id,
                                  "at": r.at}))
        return
    cells = [("REV", "STATUS", "AT", "OPERATION", "TEXT"),
             *((str(r.revision), r.status.value, iso(r.at), r.operation_id,
                "-" if r.text is None else " ".join(r.text.split())[:60])
               for r in revisions)]
    for line in aligned(cells):
        click.echo(line)


@memory_cmd.command("delete")
@click.argument("record_id")
@scope_options
@click.option("--op", "operation_id", metavar="ID", help="the operation id (idempotency); "
              "default: a new one")
@app_option()
def delete_cmd(record_id: str, operation_id: str | None, app_spec: str | None,
               **ids: Any) -> None:
    """Delete a record: gone from search, show, list and exports at once; its history
    keeps the revisions without text."""
    with opened(app_spec) as hypha:
        revision = hypha.memory.delete(_scope(ids), record_id,
                                       operation_id=operation_id or uuid.uuid4().hex)
    click.echo(f"memory {record_id} deleted (revision {revision})")


@memory_cmd.command("list")
@scope_options
@click.option("--type", "memory_type", type=_TYPES, help="only records of this type")
@click.option("--limit", type=click.IntRange(1, 500), default=50, show_default=True)
@click.option("--after", metavar="ID", help="the page after this record")
@click.option("--json", "as_json", is_flag=True, help="one JSON object a line")
@app_option()
def list_cmd(memory_type: str | None, limit: int, after: str | None, as_json: bool,
             app_spec: str | None, **ids: Any) -> None:
    """The scope's records, oldest first."""
    with opened(app_spec) as hypha:
        records = hypha.memory.list(_scope(ids), memory_type=memory_type, limit=limit,
                                    after=after)
    if as_json:
        for r in records:
            click.echo(echo_line(r.json()))
        return
    if not records:
        click.echo("no memory", err=True)
        return
    for line in _table(records):
        click.echo(line)


#: Registered on the ``hypha`` group by :mod:`hypha_celery.cli.main`.
COMMANDS: tuple[click.Command, ...] = (memory_cmd,)
