"""Graph, Node, the decision context and node outcomes."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hypha_celery.errors import GraphSpecError

NodeFn = Callable[[dict[str, Any], Any], Mapping[str, Any]]
ReducerFn = Callable[[dict[str, Any], list["Outcome"]], Mapping[str, Any]]
PolicyFn = Callable[["Context"], Any]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$")

#: Default bound on the JSON size of a run's state (bytes).
DEFAULT_MAX_STATE_BYTES = 1_048_576


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """A node / reducer error as data: exception type name and message."""

    type: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"type": self.type, "message": self.message}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ErrorInfo:
        return cls(type=str(data["type"]), message=str(data.get("message", "")))


@dataclass(frozen=True, slots=True)
class Outcome:
    """Result of one node execution: ``ok`` with ``value`` or not ok with ``error``."""

    node_id: str
    ok: bool
    value: dict[str, Any] | None = None
    error: ErrorInfo | None = None
    execution_id: str = ""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Outcome:
        err = data.get("error")
        return cls(
            node_id=str(data.get("node_id", "")),
            ok=bool(data["ok"]),
            value=data.get("value"),
            error=ErrorInfo.from_json(err) if err else None,
            execution_id=str(data.get("execution_id", "")),
        )


@dataclass(frozen=True, slots=True)
class Context:
    """What a decision policy sees. A copy: changing it changes nothing."""

    run_id: str
    graph_id: str
    step: int
    state: dict[str, Any]
    input: Any
    last: Outcome | None
    user_id: str | None = None
    session_id: str | None = None


class Node:
    """A node function plus its placement: ``Node(fn, queue="gpu", timeout=5.0)``."""

    __slots__ = ("fn", "queue", "timeout")

    def __init__(
        self, fn: NodeFn, *, queue: str | None = None, timeout: float | None = None
    ) -> None:
        if not callable(fn):
            raise GraphSpecError(f"node function must be callable, got {type(fn).__name__}")
        if timeout is not None and not timeout > 0:
            raise GraphSpecError("node timeout must be > 0")
        if queue is not None and not queue:
            raise GraphSpecError("node queue must be a non-empty string")
        self.fn = fn
        self.queue = queue
        self.timeout = timeout


class _Limits(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_steps: int = Field(default=25, gt=0)
    execution_timeout: float = Field(default=300.0, gt=0)
    node_timeout: float = Field(default=60.0, gt=0)
    max_state_bytes: int = Field(default=DEFAULT_MAX_STATE_BYTES, gt=0)
    on_node_error: Literal["fail", "policy"] = "fail"


class Graph:
    """A graph agent: named nodes, reducers and a deterministic decision policy.

    Everything is validated here, at definition time; an invalid graph raises
    :class:`~hypha_celery.errors.GraphSpecError` and is never registered.
    ``on_node_error="fail"`` (default) ends the run when a node fails;
    ``"policy"`` hands the failed outcome to the policy in ``ctx.last``.
    """

    def __init__(
        self,
        id: str,
        nodes: Mapping[str, NodeFn | Node],
        decision_policy: PolicyFn,
        reducers: Mapping[str, ReducerFn] | None = None,
        *,
        max_steps: int = 25,
        execution_timeout: float = 300.0,
        node_timeout: float = 60.0,
        max_state_bytes: int = DEFAULT_MAX_STATE_BYTES,
        on_node_error: Literal["fail", "policy"] = "fail",
    ) -> None:
        _check_name("graph id", id)
        self.id = id
        self.nodes = _check_nodes(nodes)
        self.reducers = _check_reducers(reducers or {}, self.nodes)
        if not callable(decision_policy):
            raise GraphSpecError("decision_policy must be callable: fn(ctx) -> Next|FanOut|Finish")
        self.decision_policy = decision_policy
        try:
            limits = _Limits(
                max_steps=max_steps,
                execution_timeout=execution_timeout,
                node_timeout=node_timeout,
                max_state_bytes=max_state_bytes,
                on_node_error=on_node_error,
            )
        except ValidationError as exc:
            first = exc.errors()[0]
            raise GraphSpecError(
                f"graph {id!r}: {'.'.join(map(str, first['loc']))}: {first['msg']}"
            ) from None
        self.max_steps = limits.max_steps
        self.execution_timeout = limits.execution_timeout
        self.node_timeout = limits.node_timeout
        self.max_state_bytes = limits.max_state_bytes
        self.on_node_error = limits.on_node_error

    def timeout_for(self, node_id: str) -> float:
        node = self.nodes[node_id]
        return node.timeout if node.timeout is not None else self.node_timeout

    def context(self, view: Mapping[str, Any]) -> Context:
        """Build the policy's context from a run projection (deep-copied)."""
        last = view.get("last")
        return Context(
            run_id=view["run_id"],
            graph_id=self.id,
            step=int(view["step"]),
            state=copy.deepcopy(view["state"]),
            input=copy.deepcopy(view["input"]),
            last=Outcome.from_json(last) if last else None,
            user_id=view.get("user_id"),
            session_id=view.get("session_id"),
        )

    def __repr__(self) -> str:
        return f"Graph(id={self.id!r}, nodes={list(self.nodes)}, reducers={list(self.reducers)})"


def _check_name(what: str, name: object) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise GraphSpecError(
            f"{what} must match {_NAME.pattern} (letters, digits, _ and -), got {name!r}"
        )


def _check_nodes(nodes: Mapping[str, NodeFn | Node]) -> dict[str, Node]:
    if not isinstance(nodes, Mapping) or not nodes:
        raise GraphSpecError("a graph needs at least one node: nodes={'id': fn}")
    checked: dict[str, Node] = {}
    for node_id, spec in nodes.items():
        _check_name("node id", node_id)
        checked[node_id] = spec if isinstance(spec, Node) else Node(spec)
    return checked


def _check_reducers(
    reducers: Mapping[str, ReducerFn], nodes: Mapping[str, Node]
) -> dict[str, ReducerFn]:
    for name, fn in reducers.items():
        _check_name("reducer name", name)
        if name in nodes:
            raise GraphSpecError(f"reducer {name!r} has the same name as a node")
        if not callable(fn):
            raise GraphSpecError(f"reducer {name!r} must be callable: fn(state, outcomes) -> dict")
    return dict(reducers)
