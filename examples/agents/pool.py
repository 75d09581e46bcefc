"""Pool: pre-started, long-lived workers behind round-robin dispatch.

When to reach for this
    Many independent requests of the same kind, and a fixed budget of sessions (rate
    limits, warm contexts) to serve them with.

The pattern
    :class:`Pool` starts ``size`` identical ``PoolWorker`` s once and hands each request
    to the next one with a thread-safe counter. It uses ``tell``: an agent's mailbox
    queues what arrives while it is busy, which is all the backpressure needed (bounded
    by ``max_pending_prompts``; a full mailbox raises ``Overloaded`` at submit). The pool
    is quiescent when every worker is idle with an empty queue (``status``).

Using it
    ``pool = Pool(hypha.agents, "w", size=3, scripts_for=...)``;
    ``worker, ref = pool.submit(prompt)``; ``pool.result(worker, ref)``;
    ``wait until pool.quiescent()``; ``pool.close()``.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

from examples.agents import _app
from hypha_celery import Hypha
from hypha_celery.agents import Agent, Agents, NoReply, Response
from hypha_celery.backends import MockBackend


class PoolWorker(Agent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts["scripts"]}, {"served": []}

    def handle_response(self, ref: str, response: Response, state: Any) -> NoReply:
        return NoReply({"served": [*state["served"], response.prompt]})


class Pool:
    def __init__(self, agents: Agents, prefix: str, size: int,
                 scripts_for: Callable[[str], list[Any]]) -> None:
        self.agents = agents
        self.names = [f"{prefix}-{i}" for i in range(size)]
        for name in self.names:
            agents.start(PoolWorker, name=name, backend=MockBackend, scripts=scripts_for(name))
        self._next = itertools.count()
        self._lock = threading.Lock()

    def submit(self, prompt: str) -> tuple[str, str]:
        with self._lock:
            name = self.names[next(self._next) % len(self.names)]
        return name, self.agents.tell(name, prompt)

    def result(self, name: str, ref: str) -> str | None:
        found = self.agents.poll(name, ref)
        return found.response.text if found.response else None

    def quiescent(self) -> bool:
        return all(s.state == "idle" and s.queued == 0
                   for s in map(self.agents.status, self.names))

    def close(self) -> None:
        for name in self.names:
            self.agents.stop(name)


def run(hypha: Hypha, size: int = 3, jobs: int = 7) -> dict[str, Any]:
    _app.use(hypha)
    per_worker = -(-jobs // size)
    pool = Pool(hypha.agents, "w", size,
                lambda name: [_app.result(f"{name} done {i}") for i in range(per_worker)])
    submitted = [pool.submit(f"job {i}") for i in range(jobs)]
    _app.wait_for(pool.quiescent)
    results = [_app.wait_for(partial(pool.result, name, ref)) for name, ref in submitted]
    served = {name: _app.state(name)["served"] for name in pool.names}
    pool.close()
    return {"assigned": [name for name, _ in submitted], "results": results,
            "served": served}


def main() -> None:
    with _app.demo() as hypha:
        print(run(hypha))


if __name__ == "__main__":
    main()
