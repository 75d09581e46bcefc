"""The application the chaos tests (``test_chaos.py``) run in real worker processes::

    celery -A tests.integration.chaos_app:celery worker -P prefork -c 4 -E ...

``hypha = build(Settings.from_env())`` (HYPHA_BROKER_URL, HYPHA_RESULT_BACKEND,
HYPHA_STORE_URL, HYPHA_VISIBILITY_TIMEOUT, HYPHA_DELIVERY_LIMIT, HYPHA_LEASE_INTERVAL)
with the chaos graphs registered. The test process builds its client with
:func:`build` on explicit settings and the same graphs, and runs the recovery
supervisor's sweep itself.

Side channel (Redis, ``CHAOS_SIDE_CHANNEL`` or else the result backend): every node
function counts each time it really runs, keyed by execution id, so a test can tell
how often a node execution ran (a worker killed mid-node, a re-driven message).
The broker-restart test points it at a Redis that is *not* the one it restarts.

Every node timeout fits a small visibility timeout: ``hard_limit(timeout + local
budget)`` stays under 10 s (``Hypha.register`` checks it).
"""

from __future__ import annotations

import os
import random
import time
from typing import Any

import redis

from hypha_celery import (
    Context,
    FanOut,
    Finish,
    Graph,
    Hypha,
    Next,
    Node,
    NodeContext,
    Outcome,
    Settings,
)

SIDE_ENV = "CHAOS_SIDE_CHANNEL"
#: HINCRBY <execution_id>: runs of the linear and fan-out node functions.
EXECS = "chaos:execs"
#: HINCRBY <execution_id>: runs of the poison node (it kills its process each time).
POISON = "chaos:poison"
#: HINCRBY <execution_id>:<attempt>: runs of the at-most-once node.
EFFECTS = "chaos:effects"
#: Node timeout of the linear / fan-out graphs (hard limit 8.05 s).
NODE_TIMEOUT = 3.0
#: The poison node's timeout: its hard limit (9.55 s) comes well after the prefork
#: parent notices the dead child (its pool maintenance runs every 5 s), so the loss is
#: a WorkerLostError (requeued), never a TimeLimitExceeded (acked).
POISON_TIMEOUT = 4.5
#: The at-most-once node: its first attempt sleeps this long, within its timeout.
EFFECT_SLEEP = 4.0
EFFECT_TIMEOUT = 4.5
STEPS = 3
WIDTH = 3

_clients: dict[str, redis.Redis] = {}


def side_channel(url: str | None = None) -> redis.Redis:
    url = url or os.environ.get(SIDE_ENV) or os.environ["HYPHA_RESULT_BACKEND"]
    if url not in _clients:
        _clients[url] = redis.Redis.from_url(url)
    return _clients[url]


def pause(seed: Any, k: Any, low: float, high: float, scale: float) -> None:
    """A random 0.1-0.5 s model call, the same for the same (seed, k)."""
    time.sleep(random.Random(f"{seed}:{k}").uniform(low, high) * scale)


# -- chaos_linear: three slow steps -------------------------------------------------
def step(state: dict[str, Any], inp: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
    side_channel().hincrby(EXECS, ctx.execution_id, 1)
    pause(inp["seed"], inp["k"], 0.1, 0.5, inp.get("scale", 1.0))
    return {"trail": [*state.get("trail", []), f"{inp['seed']}-{inp['k']}"]}


def linear_policy(ctx: Context) -> Next | Finish:
    inp = ctx.input
    if ctx.step < STEPS:
        return Next("step", {"seed": inp["seed"], "k": ctx.step + 1,
                             "scale": inp.get("scale", 1.0)})
    return Finish({"trail": ctx.state["trail"]})


def linear_expected(seed: int) -> dict[str, Any]:
    return {"trail": [f"{seed}-{k}" for k in range(1, STEPS + 1)]}


def linear_graph() -> Graph:
    return Graph(id="chaos_linear", nodes={"step": step}, decision_policy=linear_policy,
                 max_steps=10, execution_timeout=300.0, node_timeout=NODE_TIMEOUT)


# -- chaos_fan: a fan-out of three leaves, a reducer, a last step ---------------------
def leaf(state: dict[str, Any], inp: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
    side_channel().hincrby(EXECS, ctx.execution_id, 1)
    pause(inp["seed"], f"leaf{inp['i']}", 0.1, 0.3, inp.get("scale", 1.0))
    return {"v": inp["seed"] * 10 + inp["i"]}


def gather(state: dict[str, Any], outcomes: list[Outcome]) -> dict[str, Any]:
    return {"values": [o.value["v"] if o.ok and o.value else None for o in outcomes]}


def fan_policy(ctx: Context) -> Next | FanOut | Finish:
    inp = ctx.input
    if ctx.last is None:
        return FanOut([Next("leaf", {"seed": inp["seed"], "i": i,
                                     "scale": inp.get("scale", 1.0)}) for i in range(WIDTH)],
                      reducer="gather")
    if ctx.last.node_id == "gather":
        return Next("step", {"seed": inp["seed"], "k": "tail", "scale": inp.get("scale", 1.0)})
    return Finish({"values": ctx.state["values"], "trail": ctx.state["trail"]})


def fan_expected(seed: int) -> dict[str, Any]:
    return {"values": [seed * 10 + i for i in range(WIDTH)], "trail": [f"{seed}-tail"]}


def fan_graph() -> Graph:
    return Graph(id="chaos_fan", nodes={"leaf": leaf, "step": step}, reducers={"gather": gather},
                 decision_policy=fan_policy, max_steps=10, execution_timeout=300.0,
                 node_timeout=NODE_TIMEOUT)


# -- chaos_poison: a node that kills its worker process every time --------------------
def poison(state: dict[str, Any], inp: Any, ctx: NodeContext) -> dict[str, Any]:
    side_channel().hincrby(POISON, ctx.execution_id, 1)
    os._exit(1)  # the prefork child dies mid-task: WorkerLostError in the parent


def poison_policy(ctx: Context) -> Next | Finish:
    if ctx.last is None:
        return Next("poison")
    return Finish({"survived": True})


def poison_graph() -> Graph:
    return Graph(id="chaos_poison", nodes={"poison": Node(poison, timeout=POISON_TIMEOUT)},
                 decision_policy=poison_policy,
                 max_steps=5, execution_timeout=120.0, node_timeout=NODE_TIMEOUT)


def poison_fan_policy(ctx: Context) -> FanOut | Finish:
    """A fan-out of a healthy leaf and the poison node (as an edge)."""
    if ctx.last is None:
        return FanOut([Next("leaf", {"seed": 1, "i": 0}), Next("poison")], reducer="gather")
    return Finish({"values": ctx.state["values"]})


def poison_fan_graph() -> Graph:
    return Graph(id="chaos_poison_fan",
                 nodes={"leaf": leaf, "poison": Node(poison, timeout=POISON_TIMEOUT)},
                 reducers={"gather": gather}, decision_policy=poison_fan_policy,
                 max_steps=5, execution_timeout=120.0, node_timeout=NODE_TIMEOUT)


# -- chaos_effect: an at-most-once node (an external effect) ---------------------------
def effect(state: dict[str, Any], inp: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
    side_channel().hincrby(EFFECTS, f"{ctx.execution_id}:{ctx.attempt}", 1)
    time.sleep(inp["sleep"] if ctx.attempt == 1 else 0.1)
    return {"sent": inp["what"], "attempt": ctx.attempt}


def effect_policy(ctx: Context) -> Next | Finish:
    if ctx.last is None:
        return Next("effect", ctx.input)
    return Finish({"sent": ctx.state["sent"], "attempt": ctx.state["attempt"]})


def effect_graph() -> Graph:
    return Graph(id="chaos_effect",
                 nodes={"effect": Node(effect, side_effect="external_effect",
                                       timeout=EFFECT_TIMEOUT)},
                 decision_policy=effect_policy, max_steps=5, execution_timeout=120.0,
                 node_timeout=NODE_TIMEOUT)


GRAPHS = (linear_graph, fan_graph, poison_graph, poison_fan_graph, effect_graph)


def build(settings: Settings) -> Hypha:
    """A Hypha with the chaos graphs registered."""
    hypha = Hypha(settings)
    for make in GRAPHS:
        hypha.register(make())
    return hypha


hypha = build(Settings.from_env())
celery = hypha.celery
