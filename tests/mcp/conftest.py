"""Real MCP server processes (tests/mcp/servers/tools_server.py, the same SDK) over stdio
and streamable HTTP on 127.0.0.1, and gateways over the real store."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hypha_celery.mcp import HttpTransport, McpGateway, McpServer, StdioTransport
from hypha_celery.store import EventStore
from tests import services

SERVER = Path(__file__).parent / "servers" / "tools_server.py"


def stdio_transport(state: Path) -> StdioTransport:
    return StdioTransport(command=sys.executable, args=(str(SERVER), "stdio"),
                          env={"MCP_TEST_STATE": str(state)})


def _wait_for_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the MCP HTTP server exited"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("the MCP HTTP server did not listen within 20s")


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """The file the server reads its tool list variant from (``v1`` / ``v2``)."""
    path = tmp_path / "variant"
    path.write_text("v1")
    return path


@pytest.fixture
def http_server(tmp_path: Path, state: Path) -> Iterator[str]:
    """A streamable HTTP MCP server process; its URL."""
    port = services.free_port()
    proc = subprocess.Popen([sys.executable, str(SERVER), "http", str(port)],
                            env={"MCP_TEST_STATE": str(state), "PATH": "/usr/bin:/bin"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest, state: Path) -> StdioTransport | HttpTransport:
    if request.param == "stdio":
        return stdio_transport(state)
    return HttpTransport(url=request.getfixturevalue("http_server"))


def server_id() -> str:
    """A server id of its own (the PostgreSQL database is the session's)."""
    return f"t_{uuid.uuid4().hex[:10]}"


class Recorded(list[tuple[str, dict[str, object]]]):
    """A recorder keeping what it is told."""

    def __call__(self, type_: str, payload: object, /) -> None:
        assert isinstance(payload, dict)
        self.append((type_, dict(payload)))

    def kinds(self) -> list[str]:
        return [k for k, _ in self]


@pytest.fixture
def make_gateway(store: EventStore) -> Iterator[Callable[..., McpGateway]]:
    made: list[McpGateway] = []

    def make(*servers: McpServer, record: Recorded | None = None) -> McpGateway:
        gateway = McpGateway(servers, store, record=record)
        made.append(gateway)
        return gateway

    yield make
    for gateway in made:
        gateway.close()
