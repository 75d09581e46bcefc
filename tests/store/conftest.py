from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import services


@pytest.fixture
def fresh_url(store_url: str, tmp_path: Path) -> Iterator[str]:
    """An empty database (no schema) of the same backend as ``store_url``."""
    if store_url.startswith("sqlite"):
        yield f"sqlite:///{tmp_path / 'fresh.db'}"
        return
    with services.postgres_server() as url:
        if url is None:
            services.unavailable("PostgreSQL (127.0.0.1:5432, database 'test')")
        assert url is not None
        yield url
