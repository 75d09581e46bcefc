"""Alembic migrations: the schema they create is exactly schema.metadata."""

from __future__ import annotations

import threading

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from hypha_celery.store import EventStore
from hypha_celery.store.schema import metadata

TABLES = {"hypha_runs", "hypha_events", "hypha_lanes", "hypha_outcomes", "hypha_dead_letters",
          "hypha_lane_items", "hypha_agents", "hypha_agent_results", "hypha_agent_outbox",
          "hypha_leases", "hypha_circuits", "alembic_version"}


def diff(store: EventStore, target: sa.MetaData = metadata) -> list[object]:
    with store.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        return list(compare_metadata(ctx, target))


def versions(store: EventStore) -> list[str]:
    with store.engine.connect() as conn:
        return list(conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars())


def test_migrate_on_fresh_database_matches_metadata(fresh_url: str) -> None:
    store = EventStore(fresh_url)
    try:
        assert sa.inspect(store.engine).get_table_names() == []
        store.migrate()
        assert set(sa.inspect(store.engine).get_table_names()) == TABLES
        assert diff(store) == []
        assert versions(store) == ["0004"]
    finally:
        store.dispose()


def test_compare_detects_a_schema_difference(fresh_url: str) -> None:
    """The check above can fail: a metadata with one more column differs."""
    store = EventStore(fresh_url)
    try:
        store.migrate()
        other = sa.MetaData()
        for table in metadata.tables.values():
            table.to_metadata(other)
        other.tables["hypha_lanes"].append_column(sa.Column("extra", sa.Integer))
        assert [d[0] for d in diff(store, other)] == ["add_column"]  # type: ignore[index]
    finally:
        store.dispose()


def test_migrate_twice_is_a_noop(fresh_url: str) -> None:
    store = EventStore(fresh_url)
    try:
        store.migrate()
        with store.engine.begin() as conn:
            conn.exec_driver_sql("INSERT INTO hypha_lanes (lane, active_run_id) VALUES ('l', 'r')")
        store.migrate()
        again = EventStore(fresh_url)  # a new process would do this
        again.migrate()
        again.dispose()
        assert versions(store) == ["0004"]
        assert diff(store) == []
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT lane, active_run_id FROM hypha_lanes").all() == [
                ("l", "r")]
    finally:
        store.dispose()


def test_concurrent_migrations_all_succeed(fresh_url: str) -> None:
    stores = [EventStore(fresh_url) for _ in range(4)]
    barrier = threading.Barrier(len(stores))
    errors: list[BaseException] = []

    def migrate(store: EventStore) -> None:
        try:
            store.engine.dispose()  # connect inside the thread, all at once
            barrier.wait()
            store.migrate()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=migrate, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert errors == []
        assert versions(stores[0]) == ["0004"]
        assert diff(stores[0]) == []
    finally:
        for s in stores:
            s.dispose()
