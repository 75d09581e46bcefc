from __future__ import annotations

from collections.abc import Iterator

import pytest

from hypha_celery import Hypha
from tests.cli import recovery_app
from tests.console.support import ECHO, GATE, Tokens, tokens
from tests.runtime.support import embedded


@pytest.fixture
def hypha(store_url: str) -> Iterator[Hypha]:
    h = embedded(store_url)
    for graph in (ECHO, recovery_app.PARK, recovery_app.EFFECT):
        h.register(graph)
    GATE.clear()
    yield h
    GATE.set()
    h.close()


@pytest.fixture
def t() -> Tokens:
    return tokens()
