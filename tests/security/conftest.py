"""Fixtures of the security tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

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
