"""A compiled workflow: states with the recovery envelope, transitions with parsed guards,
and the checks a transition passes (declared edge, guard, policy, human review)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypedDict

from pydantic import Field, InstanceOf, PlainSerializer, TypeAdapter

from hypha_celery.errors import TransitionRejected, WorkflowSpecError
from hypha_celery.fsm.spec import (
    ENVELOPE_TERMINALS,
    RECOVERY_STATES,
    StateSpec,
    WorkflowSpec,
    problems,
)
from hypha_celery.guards import Guard, evaluate, parse

#: ``policy(capability) -> (allowed, reason)`` for capability ``fsm:<workflow>:<from>-><to>``.
TransitionPolicy = Callable[[str], tuple[bool, str]]

#: A transition as JSON (:meth:`Transition.to_json`).
TransitionJson = TypedDict("TransitionJson", {"from": str, "to": str, "guard": str | None})

_ENVELOPE_KIND: dict[str, Literal["failed", "cancelled"]] = {"Failed": "failed",
                                                             "Cancelled": "cancelled"}


def _expression(guard: Guard | None) -> str | None:
    return None if guard is None else guard.expression


@dataclass(frozen=True, slots=True)
class Transition:
    source: Annotated[str, Field(serialization_alias="from")]
    to: str
    #: Written as its expression.
    guard: Annotated[InstanceOf[Guard] | None, PlainSerializer(_expression)] = None
    #: False: an edge of the recovery envelope (not in the JSON).
    declared: Annotated[bool, Field(exclude=True)] = True

    def holds(self, scope: Mapping[str, object]) -> bool:
        return self.guard is None or self.guard.evaluate(scope)

    def to_json(self) -> TransitionJson:
        """``from``, ``to`` and the guard's expression (or null)."""
        json: TransitionJson = _TRANSITION.dump_python(self, by_alias=True)
        return json


_TRANSITION = TypeAdapter(Transition)


class Fsm:
    """``Fsm(spec, nodes=None, policy=None)``: validated at construction
    (:class:`WorkflowSpecError` lists every problem)."""

    def __init__(self, spec: WorkflowSpec, nodes: Any = None,
                 policy: TransitionPolicy | None = None) -> None:
        found = problems(spec, nodes)
        if found:
            raise WorkflowSpecError(found)
        self.spec, self.id, self.policy = spec, spec.id, policy
        self.states: dict[str, StateSpec] = {s.id: s for s in spec.states}
        for sid in RECOVERY_STATES:
            self.states.setdefault(sid, StateSpec(id=sid, kind=_ENVELOPE_KIND.get(sid)))
        self.terminals = frozenset(spec.terminal_states) | frozenset(ENVELOPE_TERMINALS)
        self.out: dict[str, list[Transition]] = {sid: [] for sid in self.states}
        for t in spec.transitions:
            guard = parse(t.guard) if t.guard is not None else None
            self.out[t.source].append(Transition(t.source, t.to, guard))
        self._add_envelope()

    def _add_envelope(self) -> None:
        work = [s for s in self.states if s not in self.terminals and s not in RECOVERY_STATES]
        ends = [s for s in RECOVERY_STATES if s != "Recovering"]
        for s in work:
            self._edges(s, ["Recovering", *ends])
        self._edges("Recovering", [*work, "Failed", "Cancelled"])
        self._edges("HumanReview", [*work, "Failed", "Cancelled"])
        self._edges("Compensating", ["HumanReview", "Failed", "Cancelled"])
        self._edges("Quarantined", ["Recovering", "Failed", "Cancelled"])

    def _edges(self, source: str, targets: list[str]) -> None:
        have = {t.to for t in self.out[source]}
        self.out[source] += [Transition(source, t, None, declared=False)
                             for t in targets if t not in have]

    # -- queries ----------------------------------------------------------------------
    def status_of(self, state: str) -> str | None:
        """``completed`` / ``failed`` / ``cancelled`` for a terminal state, else None."""
        if state not in self.terminals:
            return None
        kind = self.states[state].kind
        if kind in ("completed", "failed", "cancelled"):
            return kind
        low = state.lower()
        return "failed" if "fail" in low else "cancelled" if "cancel" in low else "completed"

    def edge(self, source: str, target: str) -> Transition | None:
        """The first declared-or-envelope edge ``source -> target`` (hypha: only the first
        matching edge is used)."""
        return next((t for t in self.out.get(source, ()) if t.to == target), None)

    # -- transitions ------------------------------------------------------------------
    def check(self, source: str, target: str, scope: Mapping[str, object], *,
              approved: bool = False) -> Transition:
        """The edge ``source -> target`` if it may be taken now, else
        :class:`TransitionRejected` with reason not_allowed, guard_rejected,
        policy_denied or human_review_required."""
        edge = self.edge(source, target)
        if edge is None:
            raise TransitionRejected("not_allowed", source, target, "no declared edge")
        if not edge.holds(scope):
            raise TransitionRejected("guard_rejected", source, target,
                                     edge.guard.expression if edge.guard else "")
        self._policy(source, target)
        if not approved and self.needs_review(target, scope):
            review = self.states[target].human_review
            assert review is not None
            raise TransitionRejected("human_review_required", source, target, review.reason)
        return edge

    def needs_review(self, state: str, scope: Mapping[str, object]) -> bool:
        """Entering ``state`` needs a person's approval now."""
        review = self.states[state].human_review
        if review is None or not review.required:
            return False
        return review.when is None or evaluate(review.when, scope)  # parse cached

    def choose(self, source: str, scope: Mapping[str, object]) -> Transition:
        """The first declared transition out of ``source`` whose guard holds."""
        declared = [t for t in self.out.get(source, ()) if t.declared]
        if not declared:
            raise TransitionRejected("not_allowed", source, "?", "no transition out")
        for t in declared:
            if t.holds(scope):
                return t
        guards = ", ".join(t.guard.expression for t in declared if t.guard)
        raise TransitionRejected("guard_rejected", source, "?", f"no guard held: {guards}")

    def _policy(self, source: str, target: str) -> None:
        if self.policy is None:
            return
        allowed, reason = self.policy(f"fsm:{self.id}:{source}->{target}")
        if not allowed:
            raise TransitionRejected("policy_denied", source, target, reason)
