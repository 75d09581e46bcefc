"""Alembic migrations: the schema they create is exactly schema.metadata."""

from __future__ import annotations

import threading
from pathlib import Path

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

import hypha_celery.store
from hypha_celery.store import EventStore
from hypha_celery.store.memory import MEMORY_SEARCH_OBJECTS
from hypha_celery.store.schema import metadata

TABLES = {*metadata.tables, "alembic_version"}
MIGRATIONS = Path(hypha_celery.store.__file__).parent / "migrations"


def head() -> str:
    """The one head of the migration scripts (two heads: a branch to merge)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    [only] = ScriptDirectory.from_config(cfg).get_heads()
    return str(only)


def diff(store: EventStore, target: sa.MetaData = metadata) -> list[object]:
    with store.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={
            "compare_type": True,  # the full-text index is outside the metadata (0010)
            "include_name": lambda name, *_: name not in MEMORY_SEARCH_OBJECTS})
        return list(compare_metadata(ctx, target))


def versions(store: EventStore) -> list[str]:
    with store.engine.connect() as conn:
        return list(conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars())


def test_migrate_on_fresh_database_matches_metadata(fresh_url: str) -> None:
    store = EventStore(fresh_url)
    try:
        assert sa.inspect(store.engine).get_table_names() == []
        store.migrate()
        tables = set(sa.inspect(store.engine).get_table_names())
        assert tables - MEMORY_SEARCH_OBJECTS == TABLES
        assert diff(store) == []
        assert versions(store) == [head()]
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
        assert versions(store) == [head()]
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
        assert versions(stores[0]) == [head()]
        assert diff(stores[0]) == []
    finally:
        for s in stores:
            s.dispose()


def test_the_scripts_have_one_head_and_every_table_is_migrated() -> None:
    """Every table of schema.metadata is created by some script (checked against a
    database above); the scripts form one line of revisions."""
    assert head() == sorted(p.name[:4] for p in (MIGRATIONS / "versions").glob("0*.py"))[-1]
