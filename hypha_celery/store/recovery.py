"""Recovery records: dead letters, execution leases, circuit breakers, and the
supervisor's sweep query (stale runs)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, TypedDict, cast

import sqlalchemy as sa
from sqlalchemy.sql import Select

from hypha_celery.jsontypes import JsonObject, JsonValue
from hypha_celery.store.engine import Engines, insert_for, inserted_id
from hypha_celery.store.schema import circuits, dead_letters, leases, runs
from hypha_celery.store.tx import Tx


class DeadLetterRow(TypedDict):
    """A row of ``hypha_dead_letters``."""

    id: int
    run_id: str | None
    execution_id: str | None
    task: str
    queue: str | None
    args: JsonValue  # the message's arguments
    reason: str
    error_class: str
    error: JsonObject
    attempts: int
    status: str
    created_at: float
    redriven_at: float | None


class LeaseRow(TypedDict):
    """A row of ``hypha_leases``: a long node execution's liveness."""

    execution_id: str
    run_id: str
    worker: str
    started_at: float
    heartbeat_at: float


class CircuitRow(TypedDict):
    """A row of ``hypha_circuits``: one dependency key's breaker."""

    key: str
    failures: int
    window_start: float
    open_until: float


CircuitState = Literal["closed", "open", "half_open"]


def circuit_state(open_until: float, now: float, reset: float) -> CircuitState:
    """``open`` until ``open_until``; then ``half_open`` for ``reset`` seconds (its probes
    run; a success closes it, a failure re-opens it); ``closed`` before it ever opened,
    once a success closed it (``open_until`` 0), or when no probe told anything within
    that time (a probe lost with its worker does not hold the circuit)."""
    if now < open_until:
        return "open"
    if open_until > 0 and now < open_until + reset:
        return "half_open"
    return "closed"


class StaleRun(TypedDict):
    """A run the supervisor's sweep looks at (:meth:`Recovery.stale_runs`)."""

    run_id: str
    status: str
    seq: int
    waiting: str | None
    deadline: float | None
    updated_at: float | None


class Recovery(Engines):
    """Dead letters, leases, circuits, stale runs."""

    # -- dead letters ------------------------------------------------------
    def add_dead_letter(self, record: Mapping[str, object], tx: Tx | None = None) -> int:
        """Store a dead-letter record (keys: run_id, execution_id, task, queue, args,
        reason, error_class, error, attempts), in ``tx`` or on its own; returns its id."""
        self.ensure_schema()
        row: dict[str, object] = {
               "run_id": None, "execution_id": None, "queue": None, "attempts": 1,
               "error": {}, "error_class": "unknown", **record, "status": "open",
               "created_at": time.time()}
        for key in ("run_id", "execution_id", "task", "queue", "reason", "error_class"):
            value = row[key]
            if isinstance(value, str):  # never fail on a column size (a hostile message)
                row[key] = value[:getattr(dead_letters.c[key].type, "length", None)]
        if tx is not None:
            return inserted_id(tx.conn.execute(dead_letters.insert().values(**row)))
        with self.engine.begin() as c:
            return inserted_id(c.execute(dead_letters.insert().values(**row)))

    def dead_letters(self, *, status: str | None = "open", run_id: str | None = None,
                     limit: int = 100) -> list[DeadLetterRow]:
        """Dead-letter records, newest first (``status=None``: all)."""
        self.ensure_schema()
        q = sa.select(dead_letters).order_by(dead_letters.c.id.desc()).limit(limit)
        if status is not None:
            q = q.where(dead_letters.c.status == status)
        if run_id is not None:
            q = q.where(dead_letters.c.run_id == run_id)
        q = self._owned_letters(q)
        with self.reader.connect() as conn:
            return [cast(DeadLetterRow, dict(r._mapping)) for r in conn.execute(q)]

    def dead_letter(self, dead_letter_id: int) -> DeadLetterRow | None:
        self.ensure_schema()
        q = self._owned_letters(
            sa.select(dead_letters).where(dead_letters.c.id == dead_letter_id))
        with self.reader.connect() as conn:
            row = conn.execute(q).first()
        return cast(DeadLetterRow, dict(row._mapping)) if row else None

    def _owned_letters(self, q: Select[Any]) -> Select[Any]:
        """``q`` narrowed to dead letters of the scoped owner's runs (a dead letter of no
        run, such as a malformed message, is an operator's)."""
        if self.owner is None:
            return q
        return q.where(dead_letters.c.run_id.in_(_runs_of(self.owner)))

    def mark_redriven(self, dead_letter_id: int, tx: Tx | None = None) -> bool:
        """Mark an open record redriven (in ``tx``, or on its own); False if it was not
        open."""
        q = dead_letters.update().where(
            dead_letters.c.id == dead_letter_id, dead_letters.c.status == "open"
        ).values(status="redriven", redriven_at=time.time())
        if tx is not None:
            return bool(tx.conn.execute(q).rowcount == 1)
        with self.engine.begin() as conn:
            return bool(conn.execute(q).rowcount == 1)

    def purge_dead_letters(self, ids: Iterable[int] | None = None) -> int:
        """Delete open dead-letter records (all, or ``ids``); returns how many."""
        self.ensure_schema()
        q = dead_letters.delete().where(dead_letters.c.status == "open")
        if ids is not None:
            q = q.where(dead_letters.c.id.in_(list(ids)))
        if self.owner is not None:
            q = q.where(dead_letters.c.run_id.in_(_runs_of(self.owner)))
        with self.engine.begin() as conn:
            return int(conn.execute(q).rowcount)

    # -- leases ------------------------------------------------------------
    def heartbeat(self, rows: Sequence[Mapping[str, object]]) -> None:
        """Upsert lease rows ``{execution_id, run_id, worker, started_at, heartbeat_at}``
        (unflushed: a lost heartbeat only delays recovery)."""
        if not rows:
            return
        self.ensure_schema()
        ins = insert_for(self.dialect)(leases)
        stmt = ins.on_conflict_do_update(index_elements=["execution_id"],
                                         set_={"heartbeat_at": ins.excluded.heartbeat_at,
                                               "worker": ins.excluded.worker})
        with self.unflushed.begin() as conn:
            conn.execute(stmt, rows)

    def drop_leases(self, execution_ids: list[str]) -> None:
        if not execution_ids:
            return
        self.ensure_schema()
        with self.unflushed.begin() as conn:
            conn.execute(leases.delete().where(leases.c.execution_id.in_(execution_ids)))

    def prune_leases(self, older_than: float) -> int:
        """Delete lease rows whose heartbeat is older than ``older_than`` (bounded table)."""
        self.ensure_schema()
        with self.unflushed.begin() as conn:
            done = conn.execute(leases.delete().where(leases.c.heartbeat_at < older_than))
            return int(done.rowcount)

    def leases(self, execution_ids: list[str]) -> dict[str, LeaseRow]:
        if not execution_ids:
            return {}
        q = sa.select(leases).where(leases.c.execution_id.in_(execution_ids))
        with self.reader.connect() as conn:
            return {r.execution_id: cast(LeaseRow, dict(r._mapping)) for r in conn.execute(q)}

    # -- circuit breakers --------------------------------------------------
    def circuit(self, key: str) -> CircuitRow | None:
        self.ensure_schema()
        with self.reader.connect() as conn:
            row = conn.execute(sa.select(circuits).where(circuits.c.key == key)).first()
        return cast(CircuitRow, dict(row._mapping)) if row else None

    def record_failure(self, key: str, now: float, threshold: int, reset: float
                       ) -> tuple[bool, float]:
        """Count one failure against ``key``'s circuit. Returns (opened_now, open_until).

        Closed: ``threshold`` failures within ``reset`` seconds open it for ``reset``
        seconds. Open (``now < open_until``): a failure of an attempt already under way
        counts nothing. Half-open (the ``reset`` seconds after ``open_until``, while its
        probes run): a failure re-opens it at once for ``reset`` seconds."""
        self.ensure_schema()
        with self.engine.begin() as conn:
            row = self._locked_circuit(conn, key, now)
            state = circuit_state(row.open_until, now, reset)
            if state == "open":
                return False, row.open_until
            if state == "half_open":
                until = now + reset
                conn.execute(circuits.update().where(circuits.c.key == key).values(
                    failures=0, window_start=now, open_until=until))
                return True, until
            failures = 1 if now - row.window_start > reset else row.failures + 1
            start = now if failures == 1 else row.window_start
            opened = failures >= threshold
            until = now + reset if opened else 0.0
            conn.execute(circuits.update().where(circuits.c.key == key).values(
                failures=0 if opened else failures, window_start=now if opened else start,
                open_until=until))
        return opened, until

    def claim_probe(self, key: str, now: float, probes: int, reset: float) -> float:
        """When a retry of a failure against ``key`` may run. Closed: now. Open or
        half-open: the first ``probes`` retries of this open period are its half-open
        probes and run at ``open_until``; the others wait one more ``reset`` (by then a
        probe has closed the circuit, or re-opened it with probes of its own). The probes
        granted are counted in ``failures`` while the circuit is open."""
        self.ensure_schema()
        with self.engine.begin() as conn:
            row = self._locked_circuit(conn, key, now)
            if circuit_state(row.open_until, now, reset) == "closed":
                return now
            start = max(float(row.open_until), now)
            if row.failures >= probes:
                return start + reset
            conn.execute(circuits.update().where(circuits.c.key == key).values(
                failures=row.failures + 1))
            return start

    def _locked_circuit(self, conn: sa.Connection, key: str, now: float) -> sa.Row[Any]:
        ins = insert_for(self.dialect)(circuits).values(key=key, failures=0,
                                                        window_start=now, open_until=0.0)
        conn.execute(ins.on_conflict_do_nothing(index_elements=["key"]))
        q = sa.select(circuits).where(circuits.c.key == key)
        if self.dialect == "postgresql":
            q = q.with_for_update()
        return conn.execute(q).one()

    def record_success(self, key: str) -> None:
        """A success against ``key``: its circuit closes (a half-open probe that worked)
        and its failures are forgotten."""
        self.ensure_schema()
        with self.unflushed.begin() as conn:
            conn.execute(circuits.update().where(
                circuits.c.key == key, sa.or_(circuits.c.failures > 0, circuits.c.open_until > 0))
                .values(failures=0, open_until=0.0))

    # -- recovery cases (hypha_celery.fsm) ---------------------------------
    def live_cases(self) -> dict[str, int]:
        """``{case status: runs}`` of the runs still running or waiting for a person
        whose workflow opened a recovery case (the projection's ``fsm.case.status``): one
        ``GROUP BY`` over the status index, what ``hypha_recovery_cases`` reads."""
        self.ensure_schema()
        status = runs.c.doc[("fsm", "case", "status")].as_string()
        q = (sa.select(status, sa.func.count())
             .where(runs.c.status.in_(("running", "waiting_human")), status.is_not(None))
             .group_by(status))
        with self.reader.connect() as conn:
            return {str(row[0]): int(row[1]) for row in conn.execute(q)}

    # -- the supervisor's sweep query -------------------------------------
    def stale_runs(self, *, idle_before: float, now: float, limit: int = 500
                   ) -> list[StaleRun]:
        """Running runs with no event since ``idle_before``, or past their deadline:
        ``{run_id, status, seq, waiting, deadline, updated_at}``, oldest first.
        Served by the status index (no per-step column is indexed). Quarantined and
        parked runs wait for a human and are not returned."""
        self.ensure_schema()
        c = runs.c
        q = (sa.select(c.run_id, c.status, c.seq, c.waiting, c.deadline, c.updated_at)
             .where(c.status == "running",
                    sa.or_(c.updated_at < idle_before, c.deadline < now))
             .order_by(c.updated_at).limit(limit))
        with self.reader.connect() as conn:
            return [cast(StaleRun, dict(r._mapping)) for r in conn.execute(q)]


def _runs_of(owner: str) -> Select[Any]:
    return sa.select(runs.c.run_id).where(runs.c.user_id == owner)
