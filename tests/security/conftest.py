"""Fixtures of the security tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests import services
from tests.integration.helpers import claim_db, clear_db, release_db


@pytest.fixture
def claimed_redis(redis_base: str) -> Iterator[str]:
    """A Redis database of this test's own (claimed, emptied before and after)."""
    token = uuid.uuid4().hex
    url = claim_db(redis_base, token)
    try:
        yield url
    finally:
        clear_db(url)
        release_db(url, token)


@pytest.fixture
def fresh_pg() -> Iterator[str]:
    """A PostgreSQL database of this test's own (dropped after): what the test counts in
    it (dead letters, runs) is what it made, whatever other tests wrote before."""
    with services.postgres_server() as url:
        if url is None:
            services.unavailable("PostgreSQL (127.0.0.1:5432, database 'test')")
        assert url is not None
        yield url
