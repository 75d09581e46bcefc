from __future__ import annotations

import pytest


@pytest.fixture(params=["responses", "chat", "messages"])
def api(request: pytest.FixtureRequest) -> str:
    return str(request.param)
