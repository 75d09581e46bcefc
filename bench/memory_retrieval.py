"""Memory retrieval: one user's top 10 by full text over many users' records.

PostgreSQL (a fresh database from :func:`~hypha_celery.store.scratch_database`):
``RECORDS`` (1,000,000) records across ``USERS`` (1,000) users, ~``WORDS`` (20) words
each drawn from a Zipf-distributed vocabulary of ``VOCAB`` (20,000) words, loaded with
COPY straight into ``hypha_memory`` (the table retrieval reads; its generated tsvector is
computed by the server, the GIN index built after the load). Then ``QUERIES`` (300)
searches through the public API (:meth:`MemoryManager.search`, ``limit=10``), each for a
random user, half a common word (rank < 100), a quarter a two-word AND, a quarter a rarer
word (rank 100-2,000): p50 / p95 in milliseconds, and the plan of one query.

SQLite (a file in a temporary directory): the same with ``SQLITE_RECORDS`` records
(``BENCH_MEMORY_SQLITE_RECORDS``; default 1,000,000) inserted in batches of 50,000 per
transaction (the triggers keep the FTS5 index as the API's writes do).

The records are loaded beside the API, not through it (no revisions, operation ids or
outbox rows: a search reads none of them), to load a million in a minute or two.

    python -m bench.memory_retrieval      # BENCH_MEMORY_RECORDS=100000 for a quick look
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import Any

from bench._harness import PG_ADMIN_URL, run_bench, target
from hypha_celery.memory import MemoryManager, MemoryScope
from hypha_celery.store import EventStore, scratch_database
from hypha_celery.store.memory import pg_owner_token, tsquery

RECORDS = int(os.environ.get("BENCH_MEMORY_RECORDS", "1000000"))
SQLITE_RECORDS = int(os.environ.get("BENCH_MEMORY_SQLITE_RECORDS", str(RECORDS)))
USERS = 1000
VOCAB = 20_000
WORDS = 20
QUERIES = 300
BATCH = 50_000
TARGET_P50_MS = 10.0
_COLUMNS = ("record_id, user_id, memory_type, status, revision, body, tags, operation_id, "
            "created_at, updated_at")


def _vocabulary(rng: random.Random) -> list[str]:
    syllables = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "zi", "pe", "sa", "do", "fu",
                 "gri", "hal", "jen", "kor", "lin", "mar", "nus", "pol"]
    words: set[str] = set()
    while len(words) < VOCAB:
        words.add("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def _rows(n: int, vocab: list[str], seed: int) -> Iterator[tuple[Any, ...]]:
    rng = random.Random(seed)
    cum, total = [], 0.0
    for rank in range(len(vocab)):
        total += 1.0 / (rank + 1)
        cum.append(total)
    now = time.time()
    for i in range(n):
        body = " ".join(rng.choices(vocab, cum_weights=cum, k=WORDS))
        yield (uuid.UUID(int=rng.getrandbits(128)).hex, f"user-{i % USERS:04d}", "semantic",
               "active", 1, body, "[]", f"load-{i}", now, now)


def _queries(vocab: list[str], seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    out = []
    for i in range(QUERIES):
        user = f"user-{rng.randrange(USERS):04d}"
        if i % 4 in (0, 1):
            q = vocab[rng.randrange(100)]
        elif i % 4 == 2:
            q = f"{vocab[rng.randrange(100)]} {vocab[rng.randrange(100)]}"
        else:
            q = vocab[rng.randrange(100, 2000)]
        out.append((user, q))
    return out


def _measure(manager: MemoryManager, queries: list[tuple[str, str]]) -> dict[str, Any]:
    for user, q in queries[:20]:  # warm the caches and the pool
        manager.search(MemoryScope(user), q)
    times, hits = [], []
    for user, q in queries:
        t0 = time.perf_counter()
        found = manager.search(MemoryScope(user), q)
        times.append((time.perf_counter() - t0) * 1000)
        hits.append(len(found))
    times.sort()
    return {"queries": len(times), "p50_ms": round(statistics.median(times), 3),
            "p95_ms": round(times[int(len(times) * 0.95) - 1], 3),
            "max_ms": round(times[-1], 3), "mean_hits": round(statistics.mean(hits), 2)}


def _load_pg(store: EventStore, n: int, vocab: list[str]) -> dict[str, float]:
    t0 = time.monotonic()
    conn = store.engine.raw_connection()
    try:
        driver: Any = conn.driver_connection
        with driver.cursor() as cur:
            cur.execute("DROP INDEX ix_hypha_memory_search")
            with cur.copy(f"COPY hypha_memory ({_COLUMNS}) FROM STDIN") as copy:
                for row in _rows(n, vocab, 1):
                    copy.write_row(row)
            loaded = time.monotonic()
            cur.execute("CREATE INDEX ix_hypha_memory_search ON hypha_memory USING gin "
                        "(search)")
            cur.execute("ANALYZE hypha_memory")
        driver.commit()
    finally:
        conn.close()
    return {"copy_s": round(loaded - t0, 1), "index_s": round(time.monotonic() - loaded, 1)}


def _plan(store: EventStore, user: str, q: str) -> list[str]:
    from hypha_celery.memory import parse_query

    text = tsquery(parse_query(q))
    conn = store.engine.raw_connection()
    try:
        with conn.driver_connection.cursor() as cur:  # type: ignore[union-attr]
            cur.execute(
                "EXPLAIN (ANALYZE, COSTS OFF) SELECT record_id, ts_rank_cd(search, q) AS s "
                "FROM hypha_memory, to_tsquery('simple'::regconfig, %s) q WHERE user_id = %s "
                "AND status = 'active' AND search @@ to_tsquery('simple'::regconfig, %s) "
                "ORDER BY s DESC LIMIT 10", (text, user, f"'{pg_owner_token(user)}' & ({text})"))
            return [r[0] for r in cur.fetchall()]
    finally:
        conn.close()


def _postgresql(vocab: list[str], queries: list[tuple[str, str]]) -> dict[str, Any]:
    with scratch_database(PG_ADMIN_URL, prefix="hypha_bench_memory_") as url:
        store = EventStore(url)
        try:
            store.migrate()
            load = _load_pg(store, RECORDS, vocab)
            out: dict[str, Any] = {"records": RECORDS, "users": USERS, "load": load}
            out["search"] = _measure(MemoryManager(store), queries)
            out["plan_of_a_common_word"] = _plan(store, *queries[0])
            return out
        finally:
            store.dispose()


def _sqlite(vocab: list[str], queries: list[tuple[str, str]]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hypha-bench-memory-") as tmp:
        store = EventStore(f"sqlite:///{tmp}/memory.db")
        try:
            store.migrate()
            t0 = time.monotonic()
            rows = _rows(SQLITE_RECORDS, vocab, 1)
            sql = f"INSERT INTO hypha_memory ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)"
            while batch := [r for _, r in zip(range(BATCH), rows, strict=False)]:
                with store.engine.begin() as conn:
                    conn.exec_driver_sql(sql, batch)
            load_s = time.monotonic() - t0
            return {"records": SQLITE_RECORDS, "users": USERS,
                    "load": {"insert_with_fts5_s": round(load_s, 1)},
                    "search": _measure(MemoryManager(store), queries)}
        finally:
            store.dispose()


def bench() -> dict[str, Any]:
    vocab = _vocabulary(random.Random(7))
    queries = _queries(vocab, 11)
    out: dict[str, Any] = {"vocabulary": VOCAB, "words_per_record": WORDS,
                           "postgresql": _postgresql(vocab, queries),
                           "sqlite": _sqlite(vocab, queries)}
    if SQLITE_RECORDS != RECORDS:
        out["sqlite"]["note"] = f"{SQLITE_RECORDS:,} records, not {RECORDS:,}"
    out["targets"] = [target("postgresql_top10_p50_ms", out["postgresql"]["search"]["p50_ms"],
                             "<=", TARGET_P50_MS)]
    return out


def main() -> int:
    return run_bench("memory_retrieval", bench)


if __name__ == "__main__":
    sys.exit(main())
