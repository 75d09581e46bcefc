"""The event store: append-only events plus a run projection, on SQLAlchemy 2 Core.

The one place with SQL. Other packages use :class:`EventStore` and, inside one of its
transactions, :class:`Tx` (lane rows included); the rest here is what the exchange
format and the CLI need."""

from hypha_celery.store.engine import (
    STORE_ERRORS,
    display_url,
    scratch_database,
    store_error,
)
from hypha_celery.store.events import export_rows
from hypha_celery.store.facade import EventStore
from hypha_celery.store.imports import IDEM_MAX, RUN_ID_MAX, ImportResult, check_run, close_run
from hypha_celery.store.lanes import Item, LaneState
from hypha_celery.store.mcp import MAX_BASELINES, BaselineRow, BaselineStatus
from hypha_celery.store.projection import MAX_LIST, RunFilter, RunRow, parse_time
from hypha_celery.store.rows import gc_paused
from hypha_celery.store.sessions import MAX_SESSIONS, SessionRow, SessionStatus
from hypha_celery.store.stats import Bucket, GraphFailures, RunStats
from hypha_celery.store.tx import LIFECYCLE_WRITER, Tx, check_append

__all__ = [
    # the store and its transaction
    "EventStore", "Tx", "LIFECYCLE_WRITER", "check_append",
    # run listings
    "MAX_LIST", "RunFilter", "RunRow", "parse_time",
    # a window's figures (the console's first page)
    "Bucket", "GraphFailures", "RunStats",
    # lane rows
    "Item", "LaneState",
    # sessions
    "MAX_SESSIONS", "SessionRow", "SessionStatus",
    # the MCP gateway's baselines
    "MAX_BASELINES", "BaselineRow", "BaselineStatus",
    # export / import
    "IDEM_MAX", "RUN_ID_MAX", "ImportResult", "check_run", "close_run", "export_rows",
    "gc_paused",
    # errors and URLs, for messages
    "STORE_ERRORS", "display_url", "store_error",
    # a scratch database (tests, benches)
    "scratch_database",
]
