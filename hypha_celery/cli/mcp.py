"""``hypha mcp list | inspect | accept``: the MCP gateway's capabilities, thin over
:mod:`hypha_celery.mcp` and the store's baselines (operator commands: a capability is
the deployment's, not a user's).

``list`` reads the baselines (no server is contacted); ``inspect SERVER`` discovers the
server of a profile (``--pack FILE`` names the pack whose ``mcp_profiles`` declares it,
or ``--command`` / ``--url`` give one here) and shows what discovery made of each tool,
or, without a profile, the stored baselines of that server (``inspect SERVER TOOL``: one
tool's contract as JSON); ``accept SERVER TOOL`` approves a quarantined tool as last
discovered (``--hash`` only if it still has that hash).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

import click

from hypha_celery.cli.common import aligned, app_option, echo_json, echo_line, iso, operator_only
from hypha_celery.cli.loading import app_from
from hypha_celery.errors import McpProfileError
from hypha_celery.mcp import Discovery, McpGateway, McpServer, accept
from hypha_celery.store import MAX_BASELINES, BaselineRow

__all__ = ["COMMANDS", "baselines_table", "discovery_table"]

HEADER = ("SERVER", "TOOL", "STATUS", "SIDE_EFFECT", "HASH", "UPDATED", "DECIDED_BY")


def baselines_table(rows: Sequence[BaselineRow]) -> list[str]:
    """Aligned columns, a header first."""
    return aligned([HEADER, *((r.server, r.capability, r.status, r.side_effect,
                              r.capability_hash[:12], iso(r.updated_at),
                              r.decided_by or "-") for r in rows)])


def discovery_table(found: Discovery) -> list[str]:
    """What one discovery made of each tool."""
    cells = [("TOOL", "STATE", "DECLARED", "SIDE_EFFECT", "CHANGE", "HASH", "PROBLEM"),
             *((t.name, t.state.value, t.declared or "-", t.side_effect or "-",
                t.change or "-", (t.capability_hash or "-")[:12], (t.problem or "")[:80])
               for t in found.tools)]
    return aligned(cells)


def _json(row: BaselineRow, *, contract: bool = False) -> dict[str, object]:
    out: dict[str, object] = {
        "server": row.server, "tool": row.capability, "status": row.status,
        "side_effect": row.side_effect, "capability_hash": row.capability_hash,
        "approved_hash": row.approved_hash, "first_seen": row.first_seen,
        "updated_at": row.updated_at, "decided_by": row.decided_by,
        "decided_at": row.decided_at}
    if contract:
        out["contract"] = row.contract
    return out


@click.group("mcp")
def mcp_cmd() -> None:
    """The MCP gateway's capabilities: list, inspect, accept."""


@mcp_cmd.command("list")
@click.option("--server", metavar="SERVER", help="only this server's tools")
@click.option("--quarantined", is_flag=True, help="only tools no operator accepted")
@click.option("--json", "as_json", is_flag=True, help="one JSON object a line")
@app_option()
def list_cmd(server: str | None, quarantined: bool, as_json: bool,
             app_spec: str | None) -> None:
    """The tools discovered so far, by server, with their status (from the store)."""
    operator_only("hypha mcp")
    hypha = app_from(app_spec)
    try:
        rows = hypha.store.mcp_baselines(
            server, status="quarantined" if quarantined else None, limit=MAX_BASELINES)
    finally:
        hypha.close()
    if as_json:
        for row in rows:
            click.echo(echo_line(_json(row)))
        return
    if not rows:
        click.echo("no MCP tools discovered", err=True)
        return
    for line in baselines_table(rows):
        click.echo(line)


def _profile(server_id: str, pack_file: str | None, command: str | None,
             url: str | None, trusted: bool) -> McpServer | None:
    if sum(x is not None for x in (pack_file, command, url)) > 1:
        raise click.UsageError("give one of --pack, --command, --url")
    if pack_file is not None:
        from hypha_celery.packs import load_pack

        found = load_pack(pack_file).mcp_profiles.get(server_id)
        if found is None:
            raise McpProfileError(f"pack {pack_file} declares no mcp profile {server_id!r}")
        return found
    trust = "trusted" if trusted else "untrusted"
    if command is not None:
        argv = shlex.split(command)
        if not argv:
            raise click.UsageError("--command is empty")
        return McpServer.model_validate({"id": server_id, "command": argv[0],
                                         "args": argv[1:], "trust": trust})
    if url is not None:
        return McpServer.model_validate({"id": server_id, "url": url, "trust": trust})
    return None


@mcp_cmd.command("inspect")
@click.argument("server_id", metavar="SERVER")
@click.argument("tool", required=False)
@click.option("--pack", "pack_file", metavar="FILE", help="the pack declaring SERVER "
              "(mcp_profiles): discover it now")
@click.option("--command", metavar="CMD", help="a stdio server to discover ('python s.py')")
@click.option("--url", metavar="URL", help="a streamable HTTP server to discover")
@click.option("--trusted", is_flag=True, help="with --command / --url: trust its levels")
@click.option("--json", "as_json", is_flag=True)
@app_option()
def inspect_cmd(server_id: str, tool: str | None, pack_file: str | None,
                command: str | None, url: str | None, trusted: bool, as_json: bool,
                app_spec: str | None) -> None:
    """Discover SERVER now (with a profile) or show its stored tools; TOOL: its contract."""
    operator_only("hypha mcp")
    profile = _profile(server_id, pack_file, command, url, trusted)
    hypha = app_from(app_spec)
    try:
        if profile is not None:
            gateway = McpGateway([profile], hypha.store)
            try:
                found = gateway.discover(server_id)
            finally:
                gateway.close()
            if not as_json and tool is None:
                for line in discovery_table(found):
                    click.echo(line)
                for kind, names in (("resources", found.resources),
                                    ("prompts", found.prompts)):
                    if names:
                        click.echo(f"{kind}: {', '.join(names)}")
                return
        rows = hypha.store.mcp_baselines(server_id)
    finally:
        hypha.close()
    _show(server_id, tool, rows, as_json)


def _show(server_id: str, tool: str | None, rows: list[BaselineRow], as_json: bool) -> None:
    if tool is not None:
        row = next((r for r in rows if r.capability == tool), None)
        if row is None:
            raise McpProfileError(f"mcp server {server_id!r} has no discovered tool {tool!r}")
        echo_json(_json(row, contract=True))
        return
    if not rows:
        raise McpProfileError(f"mcp server {server_id!r} has no discovered tools (inspect "
                              "it with --pack, --command or --url)")
    if as_json:
        for row in rows:
            click.echo(echo_line(_json(row)))
        return
    for line in baselines_table(rows):
        click.echo(line)


@mcp_cmd.command("accept")
@click.argument("server_id", metavar="SERVER")
@click.argument("tool")
@click.option("--hash", "capability_hash", metavar="SHA256",
              help="accept only if the tool still has this capability hash")
@click.option("--by", default="cli", show_default=True, help="who accepts")
@app_option()
def accept_cmd(server_id: str, tool: str, capability_hash: str | None, by: str,
               app_spec: str | None) -> None:
    """Approve a new or changed tool as last discovered: callable from the next discovery."""
    operator_only("hypha mcp accept")
    hypha = app_from(app_spec)
    try:
        row = accept(hypha.store, server_id, tool, by, capability_hash=capability_hash)
    finally:
        hypha.close()
    click.echo(f"accepted {server_id}.{tool} ({row.capability_hash[:12]}, "
               f"{row.side_effect}) by {by}")


COMMANDS = (mcp_cmd,)
