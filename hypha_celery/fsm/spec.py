"""``WorkflowSpec``: states (bound to a node, or routing-only), guarded transitions, the
initial and terminal states. Pydantic, ``extra="forbid"``; :func:`problems` lists every
rule a spec breaks, as ``(path, message)``."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from hypha_celery.errors import GuardError

#: The recovery envelope every workflow gets (hypha's), and which of them end a run.
RECOVERY_STATES = ("Recovering", "Compensating", "Quarantined", "HumanReview", "Failed",
                   "Cancelled")
ENVELOPE_TERMINALS = ("Failed", "Cancelled")
_ID = r"^[A-Za-z][A-Za-z0-9_.\-]{0,63}$"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class HumanReviewPolicy(_Model):
    """Entering the state needs a person's approval (``required``) — always, or only
    when the guard ``when`` holds (e.g. ``variables.policy.requires_review == true``);
    ``expires_in`` seconds after the request the supervisor expires it (the run fails)."""

    required: bool = False
    when: str | None = None
    reason: str = "approval required"
    expires_in: float | None = Field(default=None, gt=0)


class StateRetry(_Model):
    """The node's retry budget in this state (attempts, first backoff in seconds)."""

    max_attempts: int = Field(default=3, ge=1, le=100)
    backoff: float = Field(default=1.0, ge=0)


class RecoveryStrategy(StrEnum):
    """What a recovery case tries, in the order a :class:`StateRecovery` lists them:
    ``retry`` the state's node, ``fallback`` to another state, ``degrade`` (run the
    state's degrade node: a bounded, lesser result), ``escalate`` to a person."""

    RETRY = "retry"
    FALLBACK = "fallback"
    DEGRADE = "degrade"
    ESCALATE = "escalate"


#: hypha's order (``RecoveryConvergencePolicy``): retry, then fallback, then degrade, then
#: escalate to human review.
DEFAULT_STRATEGIES = (RecoveryStrategy.RETRY, RecoveryStrategy.FALLBACK,
                      RecoveryStrategy.DEGRADE, RecoveryStrategy.ESCALATE)


class StateRecovery(_Model):
    """A state's recovery case (hypha's ``RecoveryConvergencePolicy``; its defaults).

    A failure of the state's node opens a case; each cycle tries one strategy, in the
    order of ``strategies`` (those the state can use: ``fallback`` needs the state's
    ``fallback``, ``degrade`` its ``degrade`` node). A strategy is left for the next one
    after ``max_same_strategy`` attempts, or after ``max_no_progress_cycles`` failures in a
    row with the same fingerprint and evidence hash. Past ``max_cycles`` cycles or
    ``max_elapsed`` seconds since the case opened, or with no strategy left, the case
    escalates to human review (committed effects with a ``compensate`` handler are
    compensated first)."""

    strategies: list[RecoveryStrategy] = Field(default=list(DEFAULT_STRATEGIES),
                                               min_length=1, max_length=4)
    max_cycles: int = Field(default=8, ge=1, le=100)
    max_no_progress_cycles: int = Field(default=2, ge=1, le=100)
    max_same_strategy: int = Field(default=2, ge=1, le=100)
    max_elapsed: float = Field(default=300.0, gt=0, le=86_400)
    #: Seconds an escalated or quarantined case's review waits before the supervisor
    #: expires it (the run fails ``review_expired``); None: until a person decides.
    review_expires_in: float | None = Field(default=None, gt=0)


class StateSpec(_Model):
    """One state. ``node``: the node it runs once entered (None: routing-only, its
    transitions are taken at once). ``kind``: ``completed`` / ``failed`` / ``cancelled``
    for a terminal state (else from its id: ``fail`` / ``cancel`` in it, or completed)."""

    id: str = Field(pattern=_ID)
    node: str | None = None
    goal: str = ""
    kind: Literal["domain", "completed", "failed", "cancelled"] | None = None
    human_review: HumanReviewPolicy | None = None
    retry: StateRetry | None = None
    #: A failure of the node opens a recovery case (None: the run fails, as before).
    recovery: StateRecovery | None = None
    #: The state a case's ``fallback`` strategy enters.
    fallback: str | None = None
    #: The node a case's ``degrade`` strategy runs in this state (its output stands in).
    degrade: str | None = None
    #: The node that undoes this state's committed effect when a later case escalates:
    #: at most once with a receipt (``Node(side_effect="external_effect", receipt=...)``).
    compensate: str | None = None
    tools: list[str] | None = None  # allow-list of tool ids (None: the profile's)
    denied_tools: list[str] = []  # deny wins
    tool_profiles: list[str] = []
    policies: list[str] = []


class TransitionSpec(_Model):
    """``from`` -> ``to`` when ``guard`` holds (no guard: always). Transitions out of a
    state are tried in the order written; the first whose guard holds is taken."""

    source: str = Field(alias="from")
    to: str
    guard: str | None = None
    description: str = ""


class WorkflowSpec(_Model):
    id: str = Field(pattern=_ID)
    version: str = "1"
    description: str = ""
    initial_state: str
    terminal_states: list[str] = Field(min_length=1)
    states: list[StateSpec] = Field(min_length=1)
    transitions: list[TransitionSpec] = []
    #: A path (``variables.answer``) whose value is the run's result on a completed
    #: terminal state; None: the whole state.
    output: str | None = None

    def state(self, state_id: str) -> StateSpec | None:
        return next((s for s in self.states if s.id == state_id), None)


def problems(spec: WorkflowSpec, nodes: Any = None) -> list[tuple[str, str]]:
    """Every rule ``spec`` breaks: duplicate states, unknown initial / terminal states,
    transitions from or to unknown states, duplicate ``(from, to, guard)``, a retry on a
    terminal state, a guard that does not parse, a node not in ``nodes`` (when given)."""
    out: list[tuple[str, str]] = []
    ids = [s.id for s in spec.states]
    for i, sid in enumerate(ids):
        if sid in ids[:i]:
            out.append((f"states[{i}].id", f"duplicate state {sid!r}"))
    known = set(ids) | set(RECOVERY_STATES)
    if spec.initial_state not in known:
        out.append(("initial_state", f"unknown state {spec.initial_state!r}"))
    terminals = set(spec.terminal_states) | set(ENVELOPE_TERMINALS)
    for i, t in enumerate(spec.terminal_states):
        if t not in known:
            out.append((f"terminal_states[{i}]", f"unknown state {t!r}"))
    for i, s in enumerate(spec.states):
        if s.retry is not None and s.id in terminals:
            out.append((f"states[{i}].retry", f"terminal state {s.id!r} cannot retry"))
        if s.node is not None and nodes is not None and s.node not in nodes:
            out.append((f"states[{i}].node", f"unknown node {s.node!r}"))
        if s.node is not None and s.id in terminals:
            out.append((f"states[{i}].node", f"terminal state {s.id!r} runs no node"))
        if s.human_review is not None and s.human_review.when is not None:
            out += _guard_problem(f"states[{i}].human_review.when", s.human_review.when)
        out += _recovery_problems(f"states[{i}]", s, terminals)
        out += _handler_problems(f"states[{i}]", s, nodes)
    out += _fallback_problems(spec, terminals)
    out += _transition_problems(spec, known, terminals)
    return out


def _recovery_problems(where: str, s: StateSpec, terminals: set[str]) -> list[tuple[str, str]]:
    """A state's ``recovery``: on a state that runs a node, its strategies usable."""
    rec = s.recovery
    if rec is None:
        return [(f"{where}.{f}", f"{f} without recovery does nothing")
                for f in ("fallback", "degrade") if getattr(s, f) is not None]
    out: list[tuple[str, str]] = []
    if s.id in terminals or s.node is None:
        out.append((f"{where}.recovery", f"state {s.id!r} runs no node to recover"))
    names = [str(x) for x in rec.strategies]
    if len(set(names)) != len(names):
        out.append((f"{where}.recovery.strategies", f"a strategy is listed twice: {names}"))
    if "escalate" in names and names.index("escalate") != len(names) - 1:
        out.append((f"{where}.recovery.strategies", "nothing can follow escalate"))
    for strategy, field in (("fallback", s.fallback), ("degrade", s.degrade)):
        if strategy in names and field is None:
            out.append((f"{where}.recovery.strategies",
                        f"strategy {strategy!r} needs the state's {strategy}"))
    return out


def _handler_problems(where: str, s: StateSpec, nodes: Any) -> list[tuple[str, str]]:
    """``degrade`` and ``compensate`` name nodes; a compensation is at most once with a
    receipt (so it runs exactly once, also when its worker dies)."""
    out: list[tuple[str, str]] = []
    for field in ("degrade", "compensate"):
        node = getattr(s, field)
        if node is None or nodes is None:
            continue
        if node not in nodes:
            out.append((f"{where}.{field}", f"unknown node {node!r}"))
            continue
        fn = nodes[node]
        if field == "compensate" and (getattr(fn, "receipt", None) is None
                                      or not getattr(fn, "at_most_once", False)):
            out.append((f"{where}.compensate",
                        f"compensation {node!r} must be Node(side_effect='external_effect', "
                        "receipt=...): at most once, with a receipt"))
    if s.compensate is not None and s.node is None:
        out.append((f"{where}.compensate", f"state {s.id!r} runs no node to compensate"))
    return out


def _fallback_problems(spec: WorkflowSpec, terminals: set[str]) -> list[tuple[str, str]]:
    ids = {s.id for s in spec.states}
    out: list[tuple[str, str]] = []
    for i, s in enumerate(spec.states):
        f = s.fallback
        if f is None:
            continue
        if f not in ids or f in terminals or f in RECOVERY_STATES or f == s.id:
            out.append((f"states[{i}].fallback",
                        f"fallback {f!r} is not another work state of the workflow"))
    return out


def _transition_problems(spec: WorkflowSpec, known: set[str], terminals: set[str]
                         ) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    seen: set[tuple[str, str, str]] = set()
    for i, t in enumerate(spec.transitions):
        where = f"transitions[{i}]"
        for field, state in (("from", t.source), ("to", t.to)):
            if state not in known:
                out.append((f"{where}.{field}", f"unknown state {state!r}"))
        if t.source in terminals:
            out.append((f"{where}.from", f"terminal state {t.source!r} has no way out"))
        key = (t.source, t.to, (t.guard or "").strip())
        if key in seen:
            out.append((where, f"duplicate transition {t.source} -> {t.to} "
                               f"(guard {t.guard!r})"))
        seen.add(key)
        if t.guard is not None:
            out += _guard_problem(f"{where}.guard", t.guard)
    return out


def _guard_problem(path: str, expression: str) -> list[tuple[str, str]]:
    from hypha_celery.guards import parse

    try:
        parse(expression)
    except GuardError as exc:
        return [(path, str(exc))]
    return []
