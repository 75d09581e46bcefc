"""The MCP gateway's baselines (``hypha_mcp_baselines``): per server and capability, the
contract last discovered and the one approved. Discovery writes what it saw
(:meth:`McpBaselines.observe_mcp_capability`); an operator approves
(:meth:`McpBaselines.approve_mcp_capability`). The decision (new, same, changed) is the
gateway's (:mod:`hypha_celery.mcp`); this module is its SQL."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

import sqlalchemy as sa

from hypha_celery.jsontypes import JsonObject
from hypha_celery.store.engine import Engines
from hypha_celery.store.schema import mcp_baselines

__all__ = ["MAX_BASELINES", "BaselineRow", "BaselineStatus", "McpBaselines"]

BaselineStatus = Literal["approved", "quarantined"]
#: Most rows one listing returns.
MAX_BASELINES = 1000


@dataclass(frozen=True, slots=True)
class BaselineRow:
    """One capability's baseline: ``capability_hash`` is the contract last seen,
    ``approved_hash`` the one approved (None: never); callable when they are equal."""

    server: str
    capability: str
    capability_hash: str
    approved_hash: str | None
    status: BaselineStatus
    side_effect: str
    contract: JsonObject
    first_seen: float
    updated_at: float
    decided_by: str | None
    decided_at: float | None

    @classmethod
    def of(cls, row: Any) -> BaselineRow:
        return cls(**dict(row._mapping))


class McpBaselines(Engines):
    """The baselines of the MCP gateway's capabilities."""

    def mcp_baseline(self, server: str, capability: str) -> BaselineRow | None:
        self.ensure_schema()
        q = sa.select(mcp_baselines).where(mcp_baselines.c.server == server,
                                           mcp_baselines.c.capability == capability)
        with self.reader.connect() as conn:
            row = conn.execute(q).first()
        return BaselineRow.of(row) if row is not None else None

    def mcp_baselines(self, server: str | None = None, *,
                      status: BaselineStatus | None = None,
                      limit: int = MAX_BASELINES) -> list[BaselineRow]:
        """Baselines by server and capability (at most ``limit``, bounded by
        :data:`MAX_BASELINES`)."""
        self.ensure_schema()
        q = sa.select(mcp_baselines).order_by(mcp_baselines.c.server,
                                              mcp_baselines.c.capability)
        if server is not None:
            q = q.where(mcp_baselines.c.server == server)
        if status is not None:
            q = q.where(mcp_baselines.c.status == status)
        q = q.limit(max(0, min(limit, MAX_BASELINES)))
        with self.reader.connect() as conn:
            return [BaselineRow.of(r) for r in conn.execute(q)]

    def mcp_quarantined(self) -> dict[str, int]:
        """Quarantined capabilities by server, every server with a baseline (0: none);
        one ``GROUP BY`` (the metrics' gauge)."""
        self.ensure_schema()
        quarantined = sa.func.sum(sa.case((mcp_baselines.c.status == "quarantined", 1),
                                          else_=0))
        q = sa.select(mcp_baselines.c.server, quarantined).group_by(mcp_baselines.c.server)
        with self.reader.connect() as conn:
            return {server: int(n or 0) for server, n in conn.execute(q)}

    def observe_mcp_capability(self, server: str, capability: str, capability_hash: str,
                               contract: JsonObject, side_effect: str, *,
                               approve: bool, by: str | None = None) -> BaselineRow:
        """Record the contract discovery saw: approved when ``approve`` (the drift policy
        ``accept``) or when it is the approved one, else quarantined. One transaction
        (the row locked on PostgreSQL)."""
        self.ensure_schema()
        now = time.time()
        key = (mcp_baselines.c.server == server, mcp_baselines.c.capability == capability)
        with self.engine.begin() as conn:
            q = sa.select(mcp_baselines).where(*key)
            if self.dialect == "postgresql":
                q = q.with_for_update()
            found = conn.execute(q).first()
            approved = found.approved_hash if found is not None else None
            values: dict[str, Any] = {
                "capability_hash": capability_hash, "contract": contract,
                "side_effect": side_effect, "updated_at": now}
            if approve and approved != capability_hash:
                values.update(approved_hash=capability_hash, decided_by=by, decided_at=now)
                approved = capability_hash
            values["status"] = "approved" if approved == capability_hash else "quarantined"
            if found is None:
                conn.execute(mcp_baselines.insert().values(
                    server=server, capability=capability, first_seen=now,
                    **{"approved_hash": None, "decided_by": None, "decided_at": None,
                       **values}))
            else:
                conn.execute(mcp_baselines.update().where(*key).values(**values))
            row = conn.execute(sa.select(mcp_baselines).where(*key)).one()
        return BaselineRow.of(row)

    def approve_mcp_capability(self, server: str, capability: str, by: str | None, *,
                               capability_hash: str | None = None) -> BaselineRow | None:
        """Approve the contract last seen (only if it still has ``capability_hash``, when
        given: an operator approves what they inspected). None: no such baseline (or
        another hash)."""
        self.ensure_schema()
        now = time.time()
        key = [mcp_baselines.c.server == server, mcp_baselines.c.capability == capability]
        if capability_hash is not None:
            key.append(mcp_baselines.c.capability_hash == capability_hash)
        with self.engine.begin() as conn:
            done = conn.execute(mcp_baselines.update().where(*key).values(
                approved_hash=mcp_baselines.c.capability_hash, status="approved",
                decided_by=by, decided_at=now, updated_at=now))
            if done.rowcount != 1:
                return None
            row = conn.execute(sa.select(mcp_baselines).where(*key)).one()
        return BaselineRow.of(row)
