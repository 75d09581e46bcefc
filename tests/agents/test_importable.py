"""An agent or backend class a worker cannot import (defined in ``__main__``, in a
function) is refused at ``start`` when workers run in other processes: the worker would
fail to find it and the caller's ``ask`` would wait out its timeout. In-process workers
(the embedded runtime, a ``memory://`` broker) have the registered class and accept it."""

from __future__ import annotations

from typing import Any

import pytest

from hypha_celery import Hypha, Settings
from hypha_celery.agents import Agent, AgentSpecError, NoReply, Response
from hypha_celery.backends import MockBackend
from tests.runtime.support import embedded


class Importable(Agent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {}, {}

    def handle_response(self, ref: str, response: Response, state: Any) -> NoReply:
        return NoReply(state)


class InMain(Importable):
    """As if defined in a script (``python app.py``): its module is ``__main__``."""


InMain.__module__ = "__main__"


def in_a_function() -> type[Agent]:
    class Local(Importable):
        pass

    return Local


class MainBackend(MockBackend):
    pass


MainBackend.__module__ = "__main__"


@pytest.fixture
def remote(redis_url: str, sqlite_url: str) -> Any:
    """Workers in other processes (none runs here: nothing is consumed)."""
    h = Hypha(Settings(broker_url=redis_url, result_backend=redis_url, store_url=sqlite_url,
                       embedded=False))
    h.store.migrate()
    try:
        yield h
    finally:
        h.close()


def test_a_class_workers_cannot_import_is_refused_at_start(remote: Hypha) -> None:
    with pytest.raises(AgentSpecError, match=r"agent class __main__:InMain .*__main__.*"
                                             r"workers import it"):
        remote.agents.start(InMain, name="a", backend=MockBackend)
    with pytest.raises(AgentSpecError, match=r"in_a_function.<locals>.Local.*a function"):
        remote.agents.start(in_a_function(), name="a", backend=MockBackend)
    with pytest.raises(AgentSpecError, match=r"backend class __main__:MainBackend"):
        remote.agents.start(Importable, name="a", backend=MainBackend)
    assert remote.agents.list() == []  # nothing kept
    info = remote.agents.start(Importable, name="a", backend=MockBackend)
    assert info.kind == "tests.agents.test_importable:Importable"


def test_in_process_workers_accept_any_class(sqlite_url: str) -> None:
    h = embedded(sqlite_url)
    try:
        h.agents.start(InMain, name="main", backend=MainBackend)
        h.agents.start(in_a_function(), name="local", backend=MockBackend)
        assert sorted(h.agents.list()) == ["local", "main"]
    finally:
        h.close()
