"""MCP server profiles from Python and from a DomainPack (``mcp_profiles``, both
spellings), and the trust and declaration rules on their own."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from hypha_celery.errors import PackError
from hypha_celery.mcp import (
    DriftPolicy,
    McpGateway,
    McpServer,
    StdioTransport,
    ToolState,
    Trust,
    capability_hash,
    declared_level,
    effective_level,
)
from hypha_celery.packs import parse_pack
from hypha_celery.store import EventStore
from tests.mcp.conftest import SERVER

WORKFLOW = {"id": "w", "initial_state": "A", "terminal_states": ["B"],
            "states": [{"id": "A"}, {"id": "B"}], "transitions": [{"from": "A", "to": "B"}]}


def pack(profiles: dict[str, Any]) -> dict[str, Any]:
    return {"id": "tools-pack", "version": "1", "name": "Tools", "workflows": [WORKFLOW],
            "mcp_profiles": profiles}


def test_a_pack_declares_mcp_servers_in_either_spelling(store: EventStore,
                                                        state: Path) -> None:
    snake = parse_pack(pack({"tests": {
        "command": sys.executable, "args": [str(SERVER), "stdio"],
        "env": {"MCP_TEST_STATE": str(state)}, "trust": "trusted",
        "drift_policy": "accept", "allowed_tools": ["echo"], "call_timeout": 5}}))
    camel = parse_pack({**pack({"tests": {
        "command": sys.executable, "args": [str(SERVER), "stdio"],
        "env": {"MCP_TEST_STATE": str(state)}, "trust": "trusted",
        "driftPolicy": "accept", "allowedTools": ["echo"], "callTimeout": 5}})})
    assert snake.mcp_profiles == camel.mcp_profiles
    server = snake.mcp_profiles["tests"]
    assert isinstance(server, McpServer) and server.id == "tests"
    assert isinstance(server.transport, StdioTransport) and server.call_timeout == 5
    assert (server.trust, server.drift) == (Trust.TRUSTED, DriftPolicy.ACCEPT)
    gateway = McpGateway(snake.mcp_profiles.values(), store)
    try:
        found = gateway.discover("tests")
    finally:
        gateway.close()
    assert [t.name for t in found.of_state(ToolState.CALLABLE)] == ["echo"]


def test_a_bad_mcp_profile_in_a_pack_is_a_pack_problem_at_its_place() -> None:
    with pytest.raises(PackError) as caught:
        parse_pack(pack({"broken": {"url": "ftp://nowhere", "trust": "maybe"}}))
    text = str(caught.value)
    assert "mcp_profiles: broken: " in text and "trust" in text and "url" in text


def test_a_profile_from_python_takes_a_flat_command_or_url() -> None:
    stdio = McpServer.model_validate({"id": "a", "command": "srv", "args": ["x"]})
    assert stdio.transport == StdioTransport(command="srv", args=("x",))
    http = McpServer.model_validate({"id": "b", "url": "http://127.0.0.1:9/mcp"})
    assert http.transport.kind == "http"
    assert (http.trust, http.drift) == (Trust.UNTRUSTED, DriftPolicy.QUARANTINE)


@pytest.mark.parametrize(("annotations", "meta", "level"), [
    ({"readOnlyHint": True}, None, "read"),
    ({"destructiveHint": False}, None, "write"),
    ({"destructiveHint": False, "openWorldHint": True}, None, "external_effect"),
    ({"destructiveHint": True}, None, "irreversible"),
    (None, None, "external_effect"),
    ({"readOnlyHint": True}, {"hypha/side_effect": "none"}, "none"),
    (None, {"hypha/side_effect": "bogus"}, "external_effect"),
])
def test_a_declared_level(annotations: Any, meta: Any, level: str) -> None:
    assert declared_level(annotations, meta) == level


def test_hyphas_trust_rule() -> None:
    for declared in ("none", "read"):
        assert effective_level(declared, Trust.UNTRUSTED) == "external_effect"
        assert effective_level(declared, Trust.TRUSTED) == declared
    for declared in ("write", "external_effect", "irreversible"):
        assert effective_level(declared, Trust.UNTRUSTED) == declared


def test_the_capability_hash_is_over_canonical_json() -> None:
    assert capability_hash({"b": 1, "a": [1, "é"]}) == capability_hash({"a": [1, "é"], "b": 1})
    assert capability_hash({"a": 1}) != capability_hash({"a": 2})
