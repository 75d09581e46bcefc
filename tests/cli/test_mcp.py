"""``hypha mcp list | inspect | accept`` against a real MCP server process and the real
store: discover, see the quarantined tools, accept one; bad input as one line."""

from __future__ import annotations

import json
import shlex
import sys
import uuid
from pathlib import Path

import pytest

from tests.cli.test_commands import invoke, one_line_error
from tests.mcp.conftest import SERVER


@pytest.fixture
def command(tmp_path: Path) -> str:
    return shlex.join([sys.executable, str(SERVER), "stdio"])


def test_inspect_discovers_list_shows_quarantine_and_accept_approves(
        store_url: str, command: str) -> None:
    sid = f"cli_{uuid.uuid4().hex[:8]}"
    found = invoke("mcp", "inspect", sid, "--command", command, "--trusted",
                   store_url=store_url)
    assert found.exit_code == 0, found.output
    header, *rows = found.stdout.splitlines()
    assert header.split()[:4] == ["TOOL", "STATE", "DECLARED", "SIDE_EFFECT"]
    echo = next(r.split() for r in rows if r.startswith("echo "))
    assert echo[1:5] == ["quarantined", "read", "read", "added"]
    listed = invoke("mcp", "list", "--server", sid, "--quarantined", "--json",
                    store_url=store_url)
    tools = {json.loads(line)["tool"] for line in listed.stdout.splitlines()}
    assert {"echo", "forecast"} <= tools
    accepted = invoke("mcp", "accept", sid, "echo", "--by", "alice", store_url=store_url)
    assert accepted.exit_code == 0 and accepted.stdout.startswith(f"accepted {sid}.echo (")
    shown = json.loads(invoke("mcp", "inspect", sid, "echo", store_url=store_url).stdout)
    assert (shown["status"], shown["decided_by"]) == ("approved", "alice")
    assert shown["contract"]["input_schema"]["required"] == ["text"]
    table = invoke("mcp", "list", "--server", sid, store_url=store_url).stdout.splitlines()
    assert table[0].split() == ["SERVER", "TOOL", "STATUS", "SIDE_EFFECT", "HASH", "UPDATED",
                                "DECIDED_BY"]
    assert any(line.split()[1:3] == ["echo", "approved"] for line in table[1:])


def test_bad_input_is_one_line_and_a_non_zero_exit(store_url: str) -> None:
    sid = f"cli_{uuid.uuid4().hex[:8]}"
    assert "no discovered tool 'nothing'" in one_line_error(
        invoke("mcp", "accept", sid, "nothing", store_url=store_url), 1)
    assert "has no discovered tools" in one_line_error(
        invoke("mcp", "inspect", sid, store_url=store_url), 1)
    assert "url" in one_line_error(
        invoke("mcp", "inspect", sid, "--url", "ftp://x", store_url=store_url), 1)
    assert "--pack, --command, --url" in one_line_error(
        invoke("mcp", "inspect", sid, "--url", "http://a", "--command", "x",
               store_url=store_url), 2)
    assert "mcp server" in one_line_error(invoke(
        "mcp", "inspect", sid, "--url", "http://127.0.0.1:9/mcp", store_url=store_url), 1)
