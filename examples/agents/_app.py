"""Where example agents find their app, and the small helpers the examples share.

Callbacks run in worker threads (or worker processes), built fresh with no arguments, so
an agent that must talk to other agents needs a way to reach ``hypha.agents``. In a real
deployment that is the module-level ``hypha = Hypha.from_env()`` of your app module; here
``use(hypha)`` records the app the examples run on (``run(hypha)`` calls it), and callbacks
call :func:`agents`. ``use`` also registers ``notify_later``'s Celery task, so call it
before the first agent starts (the worker learns its tasks when it starts).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypha_celery import Hypha, Settings
from hypha_celery.agents import Agents
from hypha_celery.backends import BackendEvent

NOTIFY_TASK = "examples.agents.notify_later"
_current: Hypha | None = None


def use(hypha: Hypha) -> Hypha:
    """Make ``hypha`` the app the example agents talk to."""
    global _current
    if NOTIFY_TASK not in hypha.celery.tasks:

        @hypha.celery.task(name=NOTIFY_TASK, shared=False, ignore_result=True)
        def notify_later(name: str, event: Any) -> None:
            hypha.agents.notify(name, event)

    _current = hypha
    return hypha


def app() -> Hypha:
    if _current is None:
        raise RuntimeError("call examples.agents._app.use(hypha) first")
    return _current


def agents() -> Agents:
    return app().agents


def notify_later(name: str, event: Any, delay_s: float) -> None:
    """``notify(name, event)`` in ``delay_s`` seconds, from a Celery countdown: the timer
    lives in the broker and a worker, never in the agent (which must not sleep)."""
    app().celery.tasks[NOTIFY_TASK].apply_async(args=[name, event], countdown=delay_s)


def result(text: str) -> list[dict[str, Any]]:
    """A data script: one successful turn answering ``text``."""
    return [BackendEvent.new("result", {"text": text}).to_json()]


def wait_for(predicate: Callable[[], Any], timeout: float = 15.0) -> Any:
    """Poll ``predicate`` until it returns something truthy, and return that."""
    end = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > end:
            raise TimeoutError(f"gave up after {timeout}s")
        time.sleep(0.01)
    return value


def halted(name: str) -> bool:
    return agents().status(name).halted


def state(name: str) -> Any:
    return agents().status(name).agent_state


@contextmanager
def demo() -> Iterator[Hypha]:
    """An embedded app (memory broker, in-process worker, SQLite in a temp dir)."""
    with tempfile.TemporaryDirectory() as tmp:
        hypha = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                               store_url=f"sqlite:///{Path(tmp) / 'hypha.db'}",
                               embedded=True))
        try:
            yield hypha
        finally:
            hypha.close()
