"""A workflow as a decision policy: the FSM runs inside the coordinator.

Each decision walks the FSM from the state projected from its ``fsm.state.entered``
events (``ctx.fsm``): the node bound to a state runs once the state is entered (one
coordinator step); then the first declared transition whose guard holds is taken
(routing-only states are passed through in the same decision). Every transition and
state is recorded with the decision (``fsm.transition.accepted``, ``fsm.state.entered``,
``fsm.transition.rejected``). A target that needs human review parks the run in
``HumanReview`` (a ``Review`` decision); an approval resumes into the target, a
rejection or expiry ends in ``Failed``. A failed node or a transition no guard allows
ends in ``Failed`` with ``run.failed`` and a typed reason — unless the state declares
``recovery``: then the failure opens a recovery case (:mod:`hypha_celery.fsm._cases`),
which goes through ``Recovering``, ``Compensating``, ``Quarantined`` and ``HumanReview``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict, cast

from hypha_celery.errors import TransitionRejected
from hypha_celery.events import payloads as ev
from hypha_celery.fsm._cases import CaseSteps, open_case
from hypha_celery.fsm.machine import Fsm
from hypha_celery.fsm.spec import StateRetry
from hypha_celery.graph import Context, Fail, Finish, Graph, Next, Node, RetryPolicy, Review
from hypha_celery.graph.decisions import Decision
from hypha_celery.graph.model import NodeFn
from hypha_celery.jsontypes import JsonValue


class _LastOutcome(TypedDict):
    node_id: str
    ok: bool


class ScopeMetadata(TypedDict):
    """A guard's ``metadata.*``: the run's ids, step, the workflow's state, the last
    node outcome."""

    run_id: str
    user_id: str | None
    session_id: str | None
    step: int
    state: str
    last: _LastOutcome | None


class GuardScope(TypedDict):
    """What guards and output paths read: ``input.*``, ``variables.*`` (the run state),
    ``metadata.*``."""

    input: JsonValue
    variables: dict[str, object]
    metadata: ScopeMetadata


class WorkflowPolicy:
    """``WorkflowPolicy(fsm)(ctx)`` -> the decision for this step."""

    def __init__(self, fsm: Fsm) -> None:
        self.fsm = fsm
        self.max_hops = len(fsm.states) + 1  # routing-only states passed in one decision

    def __call__(self, ctx: Context) -> Decision:
        return _Walk(self.fsm, ctx, self.max_hops).decide()


class _Walk(CaseSteps):
    """One decision's walk over the FSM; records what it does on ``ctx``."""

    def __init__(self, fsm: Fsm, ctx: Context, max_hops: int) -> None:
        self.fsm, self.ctx, self.hops_left = fsm, ctx, max_hops
        self.state: str = (ctx.fsm.get("state") if ctx.fsm is not None else None) or ""

    def decide(self) -> Decision:
        snap = self.ctx.fsm
        if snap is None:
            self._enter(self.fsm.spec.initial_state, None)
            return self._settle()
        if self.state in ("HumanReview", "Quarantined"):
            return self._after_review()
        ran = self.ctx.step > int(snap.get("step") or 0)
        last, case = self.ctx.last, open_case(self.ctx)
        if ran and last is not None and case is not None and self.state == "Compensating":
            return self.compensation_done(case, last)
        if ran and last is not None and not last.ok:
            if self.recovers(case):
                return self.recover(case, last)
            err = last.error
            what = f"{last.node_id}: {err.type}: {err.message}" if err else last.node_id
            return self._fail("node_failed", what)
        if ran and case is not None:
            self.resolve(case)
        if ran or self.fsm.states[self.state].node is None:
            return self._move_on()
        return self._settle()

    # -- states -----------------------------------------------------------------------
    def _settle(self) -> Decision:
        """Just entered ``self.state``: end, run its node, or route on."""
        status = self.fsm.status_of(self.state)
        if status == "completed":
            return Finish(self._output())
        if status is not None:
            return Fail(f"workflow ended in {self.state}", f"workflow_{status}")
        node = self.fsm.states[self.state].node
        if node is not None:
            return Next(node, self.ctx.input)
        return self._move_on()

    def _move_on(self) -> Decision:
        self.hops_left -= 1
        if self.hops_left < 0:
            return self._fail("transition_rejected", "routing-only states loop")
        try:
            edge = self.fsm.choose(self.state, self._scope())
            self.fsm.check(self.state, edge.to, self._scope())
        except TransitionRejected as rejected:
            return self._rejected(rejected)
        self._accept(edge.to, edge.guard.expression if edge.guard else None)
        return self._settle()

    def _rejected(self, r: TransitionRejected) -> Decision:
        self.ctx.emit(ev.FsmTransitionRejected(workflow=self.fsm.id, from_=r.source,
                                               to=r.target, reason=r.reason,
                                               message=str(r)[:500]))
        if r.reason != "human_review_required":
            return self._fail("transition_rejected", str(r))
        review = self.fsm.states[r.target].human_review
        assert review is not None
        self._accept("HumanReview", None)
        return Review(review.reason, {"workflow": self.fsm.id, "from": r.source, "to": r.target},
                      review.expires_in)

    def _after_review(self) -> Decision:
        reviews = [r for r in self.ctx.reviews.values()
                   if isinstance(r.get("subject"), dict) and "to" in r["subject"]]
        review = max(reviews, key=lambda r: int(r.get("step") or 0), default=None)
        status = review["status"] if review else "missing"
        if status != "approved" or review is None:
            return self._fail(f"review_{status}", f"human review {status}")
        target = review["subject"]["to"]
        if self.state == "Quarantined":  # released: back through Recovering
            self._accept("Recovering", None)
        try:
            self.fsm.check(self.state, target, self._scope(), approved=True)
        except TransitionRejected as rejected:
            return self._rejected(rejected)
        self._accept(target, None)
        return self._settle()

    def _fail(self, reason: str, message: str) -> Decision:
        if self.state not in self.fsm.terminals:
            self._accept("Failed", None)
        return Fail(message[:500], reason)

    # -- facts ------------------------------------------------------------------------
    def _accept(self, target: str, guard: str | None) -> None:
        self.ctx.emit(ev.FsmTransitionAccepted(workflow=self.fsm.id, from_=self.state,
                                               to=target, guard=guard))
        self._enter(target, self.state)

    def _enter(self, state: str, source: str | None) -> None:
        self.ctx.emit(ev.FsmStateEntered(workflow=self.fsm.id, state=state, from_=source,
                                         step=self.ctx.step))
        self.state = state

    # -- data -------------------------------------------------------------------------
    def _scope(self) -> GuardScope:
        last = self.ctx.last
        meta: ScopeMetadata = {
            "run_id": self.ctx.run_id, "user_id": self.ctx.user_id,
            "session_id": self.ctx.session_id, "step": self.ctx.step, "state": self.state,
            "last": None if last is None else {"node_id": last.node_id, "ok": last.ok}}
        return {"input": self.ctx.input, "variables": self.ctx.state, "metadata": meta}

    def _output(self) -> object:
        path = self.fsm.spec.output
        return self.ctx.state if path is None else resolve(self._scope(), path)


def resolve(scope: Mapping[str, object], path: str) -> JsonValue:
    """``variables.a.b`` (a bare ``a.b`` means ``variables.a.b``) in ``scope``; None if
    absent. Only dict keys and list indices are read."""
    parts = path.split(".")
    if parts[0] not in ("input", "variables", "metadata"):
        parts.insert(0, "variables")
    value: object = scope
    for part in parts:
        if isinstance(value, Mapping) and part in value and not part.startswith("__"):
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return cast(JsonValue, value)  # the scope is JSON: the run's input and state


def _with_retry(fn: Any, retry: StateRetry | None) -> Any:
    """The node with the state's retry budget (a node's own ``retry=`` wins)."""
    if retry is None or (isinstance(fn, Node) and fn.retry is not None):
        return fn
    policy = RetryPolicy(max_attempts=retry.max_attempts, backoff=retry.backoff)
    if not isinstance(fn, Node):
        return Node(fn, retry=policy)
    return Node(fn.fn, queue=fn.queue, timeout=fn.timeout, retry=policy,
                side_effect=fn.side_effect, receipt=fn.receipt, dependency=fn.dependency,
                models=fn.models)


def workflow_graph(fsm: Fsm, nodes: Mapping[str, NodeFn | Node], *, graph_id: str | None = None,
                   **graph_options: Any) -> Graph:
    """The :class:`Graph` that runs ``fsm``: the nodes its states bind (with a state's
    retry budget), :class:`WorkflowPolicy` as the decision policy, node errors handed to
    the policy (which ends in ``Failed``). Its id is the workflow's unless ``graph_id``
    names another (a session profile's variant); ``graph_options`` go to :class:`Graph`."""
    bound: dict[str, NodeFn | Node] = {}
    for state in fsm.spec.states:
        if state.node is None or state.node in bound:
            continue
        bound[state.node] = _with_retry(nodes[state.node], state.retry)
    for state in fsm.spec.states:  # a case's degrade and compensation nodes
        for node in (state.degrade, state.compensate):
            if node is not None and node not in bound:
                bound[node] = nodes[node]
    graph_options.setdefault("on_node_error", "policy")
    return Graph(graph_id or fsm.id, bound, WorkflowPolicy(fsm), **graph_options)
