"""``McpServer``: one MCP server's profile (how to reach it, how far to trust it, what
to do when its tools change, which of them to use, and the bounds of a call)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AliasChoices,
    AliasGenerator,
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel

from hypha_celery.errors import McpProfileError

__all__ = ["DEFAULT_CALL_TIMEOUT", "DEFAULT_CONNECT_TIMEOUT", "DEFAULT_MAX_RESULT_BYTES",
           "MAX_CALL_TIMEOUT", "MAX_CONNECT_TIMEOUT", "MAX_RESULT_BYTES", "MAX_TOOLS",
           "DriftPolicy", "HttpTransport", "McpServer", "StdioTransport", "Transport", "Trust"]

#: A call's default bound in seconds, and the largest a profile may set.
DEFAULT_CALL_TIMEOUT = 30.0
MAX_CALL_TIMEOUT = 3600.0
#: Opening a session (starting a stdio server, the MCP handshake): default and largest.
DEFAULT_CONNECT_TIMEOUT = 30.0
MAX_CONNECT_TIMEOUT = 300.0
#: A result's default bound in bytes of JSON, and the largest a profile may set.
DEFAULT_MAX_RESULT_BYTES = 1 << 20
MAX_RESULT_BYTES = 64 << 20
#: Most tools (and, each, resources and prompts) one discovery takes from a server.
MAX_TOOLS = 512
_ID = r"^[A-Za-z_][A-Za-z0-9_-]*$"


class Trust(StrEnum):
    """``trusted``: the side-effect levels the server declares are used as declared;
    ``untrusted``: a declared ``none`` / ``read`` becomes ``external_effect``."""

    TRUSTED = "trusted"
    UNTRUSTED = "untrusted"


class DriftPolicy(StrEnum):
    """What a new or changed tool contract does: ``quarantine`` (not callable until an
    operator accepts it; the default) or ``accept`` (approved as discovered)."""

    QUARANTINE = "quarantine"
    ACCEPT = "accept"


class _Model(BaseModel):
    # hypha's camelCase keys (``allowedTools``, ``callTimeout`` ...) read as well as ours
    model_config = ConfigDict(extra="forbid", frozen=True, validate_by_name=True,
                              validate_by_alias=True, loc_by_alias=False,
                              alias_generator=AliasGenerator(validation_alias=to_camel))


class _Checked(_Model):
    """Every problem of the profile (nested ones included) as one ``McpProfileError``."""

    @model_validator(mode="wrap")
    @classmethod
    def _as_profile_error(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        try:
            return handler(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(profile)'}: {e['msg']}"
                for e in exc.errors())
            raise McpProfileError(f"mcp server profile: {problems}") from None


class StdioTransport(_Model):
    """A server started as a child process of the worker, spoken to over its stdin and
    stdout: ``command`` ``args``, with ``env`` added to a minimal environment (the SDK's
    default: ``HOME``, ``PATH``, ... never the worker's secrets) and ``cwd``."""

    kind: Literal["stdio"] = "stdio"
    command: str = Field(min_length=1)
    args: tuple[str, ...] = ()
    env: dict[str, str] = {}
    cwd: str | None = None


class HttpTransport(_Model):
    """A server reached over MCP's streamable HTTP at ``url`` (``headers`` sent with
    every request)."""

    kind: Literal["http"] = "http"
    url: str = Field(pattern=r"^https?://")
    headers: dict[str, str] = {}


Transport = Annotated[StdioTransport | HttpTransport, Field(discriminator="kind")]


class McpServer(_Checked):
    """One MCP server's profile::

        McpServer(id="weather", transport=StdioTransport(command="python",
                  args=("weather.py",)), trust="trusted", allowed_tools=("forecast",))

    or, as a DomainPack's ``mcp_profiles`` write it, ``command`` / ``args`` / ``env`` or
    ``url`` / ``headers`` at the top (hypha's camelCase keys too: ``allowedTools``,
    ``callTimeout``, ``driftPolicy`` ...).

    ``id`` prefixes its tools' ids (``weather.forecast``). ``allowed_tools``: the tool
    names (or ``fnmatch`` globs) taken from the server (empty: all of them).
    ``call_timeout`` bounds one call in seconds (``connect_timeout`` the opening of a
    session: a stdio server's start and the handshake); ``max_result_bytes`` the JSON of one
    result; ``max_tools`` how many tools (and resources, prompts) one discovery takes.
    """

    id: str = Field(pattern=_ID, max_length=100)
    transport: Transport
    trust: Trust = Trust.UNTRUSTED
    drift: DriftPolicy = Field(default=DriftPolicy.QUARANTINE, validation_alias=AliasChoices(
        "drift", "drift_policy", "driftPolicy"))
    allowed_tools: tuple[str, ...] = ()
    call_timeout: float = Field(default=DEFAULT_CALL_TIMEOUT, gt=0, le=MAX_CALL_TIMEOUT)
    connect_timeout: float = Field(default=DEFAULT_CONNECT_TIMEOUT, gt=0,
                                   le=MAX_CONNECT_TIMEOUT)
    max_result_bytes: int = Field(default=DEFAULT_MAX_RESULT_BYTES, gt=0,
                                  le=MAX_RESULT_BYTES)
    max_tools: int = Field(default=MAX_TOOLS, gt=0, le=MAX_TOOLS)
    description: str = ""

    @model_validator(mode="before")
    @classmethod
    def _flat_transport(cls, data: Any) -> Any:
        """``command`` (``args``, ``env``, ``cwd``) or ``url`` (``headers``) at the top, as
        a pack writes them, are the ``transport``."""
        if not isinstance(data, dict) or "transport" in data:
            return data
        keys = ("command", "args", "env", "cwd") if "command" in data else \
            ("url", "headers") if "url" in data else ()
        if not keys:
            return data
        rest = {k: v for k, v in data.items() if k not in keys}
        kind = "stdio" if "command" in data else "http"
        return {**rest, "transport": {"kind": kind, **{k: data[k] for k in keys if k in data}}}
