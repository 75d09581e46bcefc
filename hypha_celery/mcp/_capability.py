"""A discovered MCP tool as a contract (canonical JSON, hashed) and as a ``ToolSpec``.

**The contract** of a tool is what a caller relies on: its name, description, input and
output JSON Schemas, annotations and declared side-effect level. Its
``capability_hash`` is the sha256 of the contract's canonical JSON (keys sorted, no
spaces, UTF-8): any change of any of these is a new hash, so a drift.

**The declared level.** A server declares a tool's side-effect level either explicitly,
``_meta: {"hypha/side_effect": "read"}`` (one of ``none``, ``read``, ``write``,
``external_effect``, ``irreversible``), or through MCP's tool annotations:
``readOnlyHint: true`` is ``read``; ``destructiveHint: false`` is ``write`` (additive),
or ``external_effect`` with ``openWorldHint: true``; ``destructiveHint: true`` is
``irreversible``; a tool that declares nothing is ``external_effect`` (MCP's defaults
say it may be destructive and open-world). The explicit ``_meta`` wins.

**Trust** (hypha's rule): a ``trusted`` server's declared level is used; an
``untrusted`` server's ``none`` / ``read`` becomes ``external_effect`` (denied by the
default policy), its ``write`` / ``external_effect`` / ``irreversible`` are kept.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from hypha_celery.graph.model import SIDE_EFFECTS, SideEffect
from hypha_celery.jsontypes import JsonObject
from hypha_celery.mcp._profile import McpServer, Trust
from hypha_celery.tools import ToolSpec

if TYPE_CHECKING:
    from mcp import types

__all__ = ["SIDE_EFFECT_META", "Contract", "capability_hash", "contract_of", "declared_level",
           "effective_level", "tool_spec"]

#: The ``_meta`` key a server declares a tool's side-effect level with.
SIDE_EFFECT_META = "hypha/side_effect"
_UNTRUSTED_RAISED = frozenset({"none", "read"})


@dataclass(frozen=True, slots=True)
class Contract:
    """One tool's contract (``body``: its canonical JSON object) and hash."""

    name: str
    body: JsonObject
    hash: str

    @property
    def declared(self) -> SideEffect:
        return cast(SideEffect, self.body["declared_side_effect"])


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def capability_hash(body: JsonObject) -> str:
    """sha256 (hex) of ``body``'s canonical JSON."""
    return hashlib.sha256(canonical(body).encode()).hexdigest()


def declared_level(annotations: JsonObject | None, meta: JsonObject | None) -> SideEffect:
    """The level a tool declares (see the module)."""
    explicit = (meta or {}).get(SIDE_EFFECT_META)
    if isinstance(explicit, str) and explicit in SIDE_EFFECTS:
        return cast(SideEffect, explicit)
    hints = annotations or {}
    if hints.get("readOnlyHint") is True:
        return "read"
    if hints.get("destructiveHint") is False:
        return "external_effect" if hints.get("openWorldHint") is True else "write"
    if hints.get("destructiveHint") is True:
        return "irreversible"
    return "external_effect"


def effective_level(declared: SideEffect, trust: Trust) -> SideEffect:
    """The level hypha uses: an untrusted ``none`` / ``read`` is ``external_effect``."""
    if trust is Trust.UNTRUSTED and declared in _UNTRUSTED_RAISED:
        return "external_effect"
    return declared


def contract_of(tool: types.Tool) -> Contract:
    """``tool`` (as the SDK parsed it) as a contract."""
    annotations = tool.annotations.model_dump(mode="json", exclude_none=True) \
        if tool.annotations is not None else None
    meta = cast(JsonObject | None, tool.meta)
    body: JsonObject = {
        "name": tool.name, "description": tool.description or "",
        "input_schema": cast(JsonObject, tool.inputSchema),
        "output_schema": cast(JsonObject | None, tool.outputSchema),
        "annotations": cast(JsonObject | None, annotations),
        "declared_side_effect": declared_level(annotations, meta)}
    return Contract(tool.name, body, capability_hash(body))


def tool_spec(server: McpServer, contract: Contract) -> ToolSpec:
    """The ``ToolSpec`` ``<server>.<tool>`` (``source="mcp"``); raises
    :class:`~hypha_celery.errors.ToolSpecError` for a malformed schema or name."""
    body = contract.body
    output = body.get("output_schema")
    return ToolSpec(id=f"{server.id}.{contract.name}", source="mcp",
                    description=str(body.get("description") or ""),
                    input_schema=cast(JsonObject, body["input_schema"]),
                    output_schema=cast(JsonObject, output) if output is not None else None,
                    side_effect=effective_level(contract.declared, server.trust))
