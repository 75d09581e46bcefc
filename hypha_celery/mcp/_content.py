"""A server's resources and prompts, read over the gateway's connection: ``resources/read``
and ``prompts/get`` as typed, bounded results.

Bound: the JSON of what the server answered (a resource's contents, a prompt's
messages) is at most the profile's ``max_result_bytes`` (default 1 MiB, at most 64
MiB), the bound of a tool's result; past it :class:`~hypha_celery.errors.McpResultTooLarge`
and nothing is returned. A resource or prompt the server does not have (its JSON-RPC
error) is :class:`~hypha_celery.errors.McpToolError`, as is a ``uri`` that is not a URI.
Resources and prompts are not judged against baselines (the MCP specification makes
them reads of the server's data): what a prompt says is the server's text, as
trustworthy as the server.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

from hypha_celery.errors import McpResultTooLarge, McpToolError
from hypha_celery.jsontypes import JsonObject
from hypha_celery.mcp._profile import McpServer

if TYPE_CHECKING:
    from mcp import ClientSession

__all__ = ["Prompt", "PromptMessage", "Resource", "ResourceContent", "get_prompt",
           "read_resource"]


@dataclass(frozen=True, slots=True)
class ResourceContent:
    """One content of a resource: ``text``, or ``blob`` (base64) for binary data."""

    uri: str
    mime_type: str | None = None
    text: str | None = None
    blob: str | None = None


@dataclass(frozen=True, slots=True)
class Resource:
    """A resource as read: its contents and ``size`` (bytes of their JSON)."""

    server: str
    uri: str
    contents: tuple[ResourceContent, ...]
    size: int

    @property
    def text(self) -> str:
        """The text contents, joined (binary ones left out)."""
        return "".join(c.text for c in self.contents if c.text is not None)


@dataclass(frozen=True, slots=True)
class PromptMessage:
    """One message of a prompt: ``role`` and its content block as JSON
    (``{"type": "text", "text": ...}``, an image, a resource ...)."""

    role: Literal["user", "assistant"]
    content: JsonObject

    @property
    def text(self) -> str | None:
        """A text block's text (None for another kind of block)."""
        text = self.content.get("text") if self.content.get("type") == "text" else None
        return text if isinstance(text, str) else None


@dataclass(frozen=True, slots=True)
class Prompt:
    """A prompt as the server rendered it with the arguments given: its messages and
    ``size`` (bytes of their JSON)."""

    server: str
    name: str
    description: str | None
    messages: tuple[PromptMessage, ...]
    size: int


async def read_resource(session: ClientSession, server: McpServer, uri: str) -> Resource:
    """``resources/read`` of ``uri`` (see the module)."""
    from pydantic import AnyUrl, ValidationError

    try:
        url = AnyUrl(uri)
    except ValidationError:
        raise McpToolError(server.id, f"not a resource URI: {uri[:200]!r}") from None
    result = await session.read_resource(url)
    dumped = [c.model_dump(mode="json", exclude_none=True) for c in result.contents]
    size = _bounded(server, f"resource {uri[:200]!r}", dumped)
    return Resource(server.id, uri, tuple(
        ResourceContent(str(c["uri"]), c.get("mimeType"), c.get("text"), c.get("blob"))
        for c in dumped), size)


async def get_prompt(session: ClientSession, server: McpServer, name: str,
                     arguments: dict[str, str]) -> Prompt:
    """``prompts/get`` of ``name`` with ``arguments`` (see the module)."""
    result = await session.get_prompt(name, arguments)
    dumped = [m.model_dump(mode="json", exclude_none=True) for m in result.messages]
    size = _bounded(server, f"prompt {name[:200]!r}", dumped)
    return Prompt(server.id, name, result.description, tuple(
        PromptMessage(m["role"], cast(JsonObject, m["content"])) for m in dumped), size)


def _bounded(server: McpServer, what: str, dumped: Any) -> int:
    size = len(json.dumps(dumped, separators=(",", ":"), ensure_ascii=False).encode())
    if size > server.max_result_bytes:
        raise McpResultTooLarge(server.id, f"{what} is {size} bytes of JSON, more than "
                                f"max_result_bytes={server.max_result_bytes}")
    return size
