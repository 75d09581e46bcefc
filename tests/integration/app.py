"""The application the integration tests run in real worker processes::

    celery -A tests.integration.app:celery worker -P prefork -c 2 -E ...

``hypha = Hypha.from_env()`` (HYPHA_BROKER_URL, HYPHA_RESULT_BACKEND, HYPHA_STORE_URL,
HYPHA_INLINE_COORDINATOR) with the test graphs registered. The test process builds its
client with :func:`build` on explicit settings and the same graphs.

Fault injection: with ``HYPHA_TEST_DUPLICATE=1`` every task message this app publishes
(kickoff, coordinator, node, edge, reducer, chain continuation) goes to the broker twice
with identical headers and body (same task id): real duplicate delivery through the real
broker. Each task delivery is then counted in the Redis hash :data:`DELIVERIES`.

Side channels (Redis, on the result backend's database): nodes announce that they have
started (:func:`started_key`), and :func:`notify_sink` is the ``notify=`` subscriber.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable
from typing import Any

import redis
from celery import Celery
from celery.app.amqp import AMQP
from celery.signals import task_prerun

from hypha_celery import Context, FanOut, Finish, Graph, Hypha, Next, Node, Outcome, Settings

DUPLICATE_ENV = "HYPHA_TEST_DUPLICATE"
DELIVERIES = "itest:deliveries"
NOTIFY_TASK = "itest_sink.notify"
ANSWER_QUEUE = "itest.answers"
#: Node timeout of ``itest_slow.slow`` (the stale-result tests sleep past it).
SLOW_TIMEOUT = 0.5


# -- side channels ------------------------------------------------------------
_clients: dict[str, redis.Redis] = {}


def side_channel(url: str | None = None) -> redis.Redis:
    """A Redis client on the result backend (``HYPHA_RESULT_BACKEND`` in a worker)."""
    url = url or os.environ["HYPHA_RESULT_BACKEND"]
    if url not in _clients:
        _clients[url] = redis.Redis.from_url(url)
    return _clients[url]


def started_key(token: str) -> str:
    return f"itest:started:{token}"


def _announce(inp: Any) -> None:
    if isinstance(inp, dict) and inp.get("token"):
        side_channel().rpush(started_key(inp["token"]), json.dumps({"at": time.time()}))


# -- itest: classify -> fan-out of lookups (+ failing edges) -> merge -> answer ----------
def classify(state: dict[str, Any], question: Any) -> dict[str, Any]:
    return {"question": question, "category": "billing" if "charge" in str(question) else "other"}


def lookup(state: dict[str, Any], inp: dict[str, Any]) -> dict[str, Any]:
    _announce(inp)
    time.sleep(inp["sleep"])
    return {"name": inp["name"], "done_at": time.time()}


def boom(state: dict[str, Any], inp: dict[str, Any]) -> dict[str, Any]:
    time.sleep(inp["sleep"])
    raise ValueError(f"edge {inp['name']} failed")


def merge(state: dict[str, Any], outcomes: list[Outcome]) -> dict[str, Any]:
    """Collect-all: every edge, in the order the reducer received them."""
    return {
        "order": [o.value["name"] if o.ok and o.value else None for o in outcomes],
        "errors": [o.error.type if o.error else None for o in outcomes],
        "done_at": [o.value["done_at"] if o.ok and o.value else None for o in outcomes],
        "edge_nodes": [o.node_id for o in outcomes],
    }


def answer(state: dict[str, Any], inp: Any) -> dict[str, Any]:
    found = [n for n in state["order"] if n is not None]
    return {"answer": f"{state['category']}: {len(found)} sources"}


DEFAULT_EDGES = [["a", 0.3, False], ["b", 0.01, False], ["c", 0.1, False]]


def itest_policy(ctx: Context) -> Next | FanOut | Finish:
    inp = ctx.input or {}
    if ctx.last is None:
        return Next("classify", inp.get("question", ""))
    if ctx.last.node_id == "classify":
        edges = [Next("boom" if fail else "lookup",
                      {"name": name, "sleep": sleep, "token": inp.get("token")})
                 for name, sleep, fail in inp.get("edges", DEFAULT_EDGES)]
        return FanOut(edges, reducer="merge")
    if ctx.last.node_id == "merge":
        if inp.get("mode") == "fail_fast" and any(ctx.state["errors"]):
            return Finish({"aborted": True, "order": ctx.state["order"],
                           "errors": ctx.state["errors"]})
        return Next("answer")
    return Finish({"answer": ctx.state["answer"], "order": ctx.state["order"],
                   "errors": ctx.state["errors"], "done_at": ctx.state["done_at"],
                   "edge_nodes": ctx.state["edge_nodes"]})


def itest_graph() -> Graph:
    return Graph(
        id="itest",
        nodes={"classify": classify, "lookup": lookup, "boom": boom,
               "answer": Node(answer, queue=ANSWER_QUEUE)},
        reducers={"merge": merge},
        decision_policy=itest_policy,
        max_steps=10, execution_timeout=60.0, node_timeout=20.0,
    )


# -- itest_linear: n steps of one node (notify, lanes) -----------------------------------
def step(state: dict[str, Any], inp: dict[str, Any]) -> dict[str, Any]:
    _announce(inp)
    time.sleep(inp.get("sleep", 0.0))
    if inp["k"] == inp.get("fail_at"):
        raise RuntimeError(f"step {inp['k']} failed on purpose")
    return {"steps": [*state.get("steps", []), inp["k"]]}


def linear_policy(ctx: Context) -> Next | Finish:
    inp = ctx.input or {}
    if ctx.step < inp.get("n", 3):
        return Next("step", {**inp, "k": ctx.step + 1})
    return Finish({"steps": ctx.state["steps"]})


def linear_graph() -> Graph:
    return Graph(id="itest_linear", nodes={"step": step}, decision_policy=linear_policy,
                 max_steps=20, execution_timeout=60.0, node_timeout=20.0)


# -- itest_dup: inc, inc, fan-out of 3 + total, inc, finish (duplicate delivery) --------
def inc(state: dict[str, Any], inp: Any) -> dict[str, Any]:
    return {"n": state.get("n", 0) + 1}


def edge(state: dict[str, Any], inp: dict[str, Any]) -> dict[str, Any]:
    """Takes a random while (up to ``jitter`` s): the two copies of a duplicated
    edge finish at different times, like real model calls."""
    time.sleep(random.random() * inp.get("jitter", 0.0))
    return {"v": inp["k"] * 10}


def total(state: dict[str, Any], outcomes: list[Outcome]) -> dict[str, Any]:
    return {"sum": sum(o.value["v"] for o in outcomes if o.ok and o.value),
            "failed_edges": sum(not o.ok for o in outcomes)}


def dup_policy(ctx: Context) -> Next | FanOut | Finish:
    if ctx.step in (0, 1, 3):
        return Next("inc")
    if ctx.step == 2:
        jitter = (ctx.input or {}).get("jitter", 0.0)
        return FanOut([Next("edge", {"k": k, "jitter": jitter}) for k in (1, 2, 3)],
                      reducer="total")
    return Finish({"n": ctx.state["n"], "sum": ctx.state["sum"],
                   "failed_edges": ctx.state["failed_edges"]})


def dup_graph() -> Graph:
    return Graph(id="itest_dup", nodes={"inc": inc, "edge": edge}, reducers={"total": total},
                 decision_policy=dup_policy, max_steps=10, execution_timeout=60.0)


# -- itest_slow: one sleeping node, then Finish (timeouts, late results, cancel) --------
def sleepy(state: dict[str, Any], inp: dict[str, Any]) -> dict[str, Any]:
    _announce(inp)
    time.sleep(inp["sleep"])
    return {"slept": inp["sleep"]}


def slow_policy(ctx: Context) -> Next | Finish:
    if ctx.last is None:
        return Next(ctx.input["node"], ctx.input)
    return Finish({"state": ctx.state, "last_ok": ctx.last.ok,
                   "last_error": ctx.last.error.type if ctx.last.error else None})


def slow_graph() -> Graph:
    """``slow`` has a short node timeout; ``wait`` the graph's default (20 s)."""
    return Graph(id="itest_slow",
                 nodes={"slow": Node(sleepy, timeout=SLOW_TIMEOUT), "wait": sleepy},
                 decision_policy=slow_policy, on_node_error="policy",
                 max_steps=5, execution_timeout=60.0, node_timeout=20.0)


def review_graph() -> Graph:
    """A workflow (FSM policy) whose ``Ship`` state needs a person's approval."""
    from hypha_celery.fsm import Fsm, WorkflowSpec, workflow_graph

    spec = WorkflowSpec.model_validate({
        "id": "itest_review", "initial_state": "Draft", "terminal_states": ["Done"],
        "output": "variables.n",
        "states": [{"id": "Draft", "node": "inc"}, {"id": "Done"},
                   {"id": "Ship", "node": "inc",
                    "human_review": {"required": True, "reason": "ship it?"}}],
        "transitions": [{"from": "Draft", "to": "Ship", "guard": "n == 1"},
                        {"from": "Ship", "to": "Done"}]})
    nodes = {"inc": inc}
    return workflow_graph(Fsm(spec, nodes), nodes, execution_timeout=60.0)


GRAPHS: tuple[Callable[[], Graph], ...] = (itest_graph, linear_graph, dup_graph, slow_graph,
                                           review_graph)


# -- fault injection ------------------------------------------------------------
class DuplicatingAMQP(AMQP):  # type: ignore[misc]
    """Publishes every task message twice: same headers, body and task id."""

    def _create_task_sender(self) -> Callable[..., Any]:
        send = super()._create_task_sender()

        def send_twice(*args: Any, **kwargs: Any) -> Any:
            send(*args, **kwargs)
            return send(*args, **kwargs)

        return send_twice


def duplicate_messages(app: Celery) -> None:
    """Make ``app`` publish each task message twice (before it first publishes)."""
    if "amqp" in vars(app):
        raise RuntimeError("duplicate_messages() must run before the app's first publish")
    app.amqp_cls = DuplicatingAMQP


def _count_delivery(task_id: str | None = None, **_: Any) -> None:
    if task_id:
        side_channel().hincrby(DELIVERIES, task_id, 1)


# -- the app ------------------------------------------------------------------
def notify_sink(outcome: dict[str, Any], key: str) -> None:
    """The ``notify=`` subscriber: ``notify_signature(key)``; Celery prepends the outcome."""
    side_channel().rpush(key, json.dumps(outcome))


def build(settings: Settings, *, duplicate: bool = False) -> Hypha:
    """A Hypha with the test graphs and the notify sink task registered."""
    hypha = Hypha(settings)
    if duplicate:
        duplicate_messages(hypha.celery)
    for make in GRAPHS:
        hypha.register(make())
    hypha.celery.task(name=NOTIFY_TASK, ignore_result=True, shared=False)(notify_sink)
    return hypha


DUPLICATE = os.environ.get(DUPLICATE_ENV) == "1"
hypha = build(Settings.from_env(), duplicate=DUPLICATE)
celery = hypha.celery
if DUPLICATE:
    task_prerun.connect(_count_delivery, weak=False)
