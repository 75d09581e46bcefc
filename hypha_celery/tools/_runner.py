"""``GovernedRunner``: every tool call through hypha's governed steps, in hypha's order.

1. ``tool.call.requested`` (a call whose invocation id already has a stored result is
   served from it first: no event, no handler);
2. the execution scope's allow-list (``TOOL_NOT_ALLOWED_IN_SCOPE``, denied);
3. an idempotency key when the spec requires one — the invocation id
   (``TOOL_IDEMPOTENCY_KEY_REQUIRED``, denied);
4. the input schema (``TOOL_INPUT_INVALID``, failed);
5. the policy (``tool.policy.checked``; ``TOOL_POLICY_DENIED``, denied);
6. human review, when the decision or the spec asks for it: the first call records
   ``human.review.requested`` and returns ``human_review_required``
   (``TOOL_APPROVAL_REQUIRED``); a later call with the same invocation id goes on once
   approved (``tool.call.approved``), or stops ``TOOL_APPROVAL_REJECTED`` /
   ``TOOL_APPROVAL_EXPIRED`` / ``TOOL_APPROVAL_INVALID`` (approved for another tool or
   input);
7. ``tool.call.started``, the handler (an exception: ``TOOL_EXECUTION_FAILED``);
8. the output: JSON, and its schema when there is one (``tool.output.validated`` /
   ``tool.output.invalid``, ``TOOL_OUTPUT_INVALID``);
9. ``tool.call.completed``.

A denial is recorded ``tool.call.rejected``, a failure ``tool.call.failed``. Once the
handler has run, the result (completed or failed) is stored under the invocation id, so
the handler runs at most once per invocation id. Every payload carries ``call_id`` (the
invocation id), ``tool``, ``source`` and ``side_effect``; the input itself is never
recorded, only ``input_hash`` (and schema issues by path, without their messages).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypedDict, cast

from hypha_celery.backends.tools import ToolAnswer, ToolRequest
from hypha_celery.errors import InvalidCall, ToolCallRejected
from hypha_celery.events import payloads as ev
from hypha_celery.events.payloads import trusted
from hypha_celery.events.view import ErrorJson
from hypha_celery.graph.calls import request_hash
from hypha_celery.graph.jsonsafe import error_json
from hypha_celery.graph.model import ApprovedReview
from hypha_celery.tools._approvals import (
    ApprovalStore,
    MemoryApprovals,
    ReviewRecord,
    ReviewRequest,
    review_status,
)
from hypha_celery.tools._policy import PolicyDecision, ToolPolicy, tool_matches
from hypha_celery.tools._registry import Handler, Tool, ToolRegistry
from hypha_celery.tools._result import Phase, ToolResult, ToolStatus
from hypha_celery.tools._spec import ToolSpec

__all__ = ["GovernedRunner", "Recorder", "ToolEventType"]

ToolEventType = Literal[
    "tool.call.requested", "tool.call.rejected", "tool.policy.checked", "tool.call.approved",
    "tool.call.started", "tool.call.completed", "tool.call.failed", "tool.output.validated",
    "tool.output.invalid", "human.review.requested",
]


class Recorder(Protocol):
    """Where the runner's events go: ``record(type, payload)``."""

    def __call__(self, type_: str, payload: Mapping[str, object], /) -> None: ...


@dataclass
class _Call:
    """One call on its way through the steps."""

    tool: Tool
    call_id: str
    keyed: bool
    input: Any
    input_hash: str | None
    scope_allow: Sequence[str] | None
    permission_scope: str | None
    decision: PolicyDecision | None = None
    review_id: str | None = None
    approval: ApprovedReview | None = None

    @property
    def spec(self) -> ToolSpec:
        return self.tool.spec

    def result(self, status: ToolStatus, **fields: Any) -> ToolResult:
        return ToolResult(status=status, tool=self.spec.id, call_id=self.call_id,
                          input_hash=self.input_hash, review_id=self.review_id, **fields)


def _hash(value: Any) -> str | None:
    try:
        return request_hash(value)
    except InvalidCall:
        return None


def _paths(issues: Sequence[tuple[str, str]]) -> list[str]:
    return sorted({path for path, _ in issues})


_Check = Callable[[_Call], ToolResult | None]


class GovernedRunner:
    """Runs tools under ``policy`` (default :meth:`ToolPolicy.default`), recording
    events with ``record`` and keeping reviews and results in ``approvals`` (default: a
    :class:`MemoryApprovals`). ``tools``: a :class:`ToolRegistry` or
    ``{tool_id: (spec, handler)}``."""

    def __init__(self, tools: ToolRegistry | Mapping[str, tuple[ToolSpec, Handler]],
                 policy: ToolPolicy | None, record: Recorder,
                 approvals: ApprovalStore | None = None, *,
                 now: Callable[[], float] = time.time) -> None:
        self.tools = tools if isinstance(tools, ToolRegistry) else ToolRegistry.of(tools)
        self.policy = policy if policy is not None else ToolPolicy.default()
        self.record = record
        self.approvals: ApprovalStore = approvals if approvals is not None \
            else MemoryApprovals(now)
        self.now = now

    def run(self, tool_id: str, input: Any, *, invocation_id: str | None = None,
            scope_allow: Sequence[str] | None = None,
            permission_scope: str | None = None,
            approval: ApprovedReview | None = None) -> ToolResult:
        """Call ``tool_id`` with ``input`` (JSON) as invocation ``invocation_id``.

        ``scope_allow``: the tool ids (or globs) the execution scope allows (``None``:
        any); ``permission_scope``: what policy rules' ``scopes`` match. Without an
        invocation id a fresh one is made, unless the spec requires one (then denied).
        An unknown tool raises ``ToolCallRejected`` ``TOOL_NOT_FOUND``. ``approval``
        (``{"review_id", "by"}``): a human review already approved this call (a workflow
        parked for it before the call's state was entered); the approval step accepts it.
        """
        call = _Call(self.tools.resolve(tool_id), invocation_id or uuid.uuid4().hex,
                     bool(invocation_id), input, _hash(input), scope_allow,
                     permission_scope, approval=approval)
        stored = self._stored(call)
        if stored is not None:
            return stored
        self._emit(_requested(**_ids(call), input_hash=call.input_hash,
                              permission_scope=permission_scope))
        checks: tuple[_Check, ...] = (self._check_scope, self._check_key, self._check_input,
                                      self._check_policy, self._check_approval)
        for check in checks:
            stopped = check(call)
            if stopped is not None:
                return stopped
        return self._execute(call)

    def execute(self, request: ToolRequest) -> ToolAnswer:
        """The tool-execution seam (:class:`~hypha_celery.backends.tools.ToolExecutor`):
        a model's call, through every step of :meth:`run` under the call's id (run at
        most once); an unknown tool is a ``denied`` answer, not an exception."""
        try:
            result = self.run(request.tool, request.input, invocation_id=request.call_id)
        except ToolCallRejected as exc:
            return ToolAnswer(request.call_id, "denied", message=str(exc))
        message = f"{result.code}: {result.message}" if result.code else result.message
        return ToolAnswer(request.call_id, result.status, result.output, message)

    # -- the steps ----------------------------------------------------------------------
    def _stored(self, call: _Call) -> ToolResult | None:
        found = self.approvals.result(call.call_id) if call.keyed else None
        if found is None:
            return None
        stored = ToolResult.from_json(found, reused=True)
        if (stored.tool, stored.input_hash) != (call.spec.id, call.input_hash):
            return call.result("conflict", code="TOOL_IDEMPOTENCY_CONFLICT",
                               phase="idempotency",
                               message=f"invocation {call.call_id} already ran "
                                       f"{stored.tool} with another input")
        return stored

    def _check_scope(self, call: _Call) -> ToolResult | None:
        if call.scope_allow is None or tool_matches(call.spec.id, call.scope_allow):
            return None
        return self._deny(call, "scope", "TOOL_NOT_ALLOWED_IN_SCOPE",
                          f"tool {call.spec.id} is not allowed in this scope")

    def _check_key(self, call: _Call) -> ToolResult | None:
        if call.keyed or not call.spec.idempotency_key_required:
            return None
        return self._deny(call, "idempotency", "TOOL_IDEMPOTENCY_KEY_REQUIRED",
                          f"tool {call.spec.id} ({call.spec.side_effect}) needs an "
                          "idempotency key: pass invocation_id")

    def _check_input(self, call: _Call) -> ToolResult | None:
        if call.input_hash is None:
            return self._fail(call, "input", "TOOL_INPUT_INVALID", "the input is not JSON")
        issues = call.spec.input_issues(call.input)
        if not issues:
            return None
        return self._fail(call, "input", "TOOL_INPUT_INVALID",
                          "the input does not match the input schema at "
                          + ", ".join(_paths(issues)), issues=tuple(issues))

    def _check_policy(self, call: _Call) -> ToolResult | None:
        decision = self.policy.decide(call.spec, call.permission_scope)
        call.decision = decision
        self._emit(_checked(**_ids(call), decision=decision.to_json(),
                            permission_scope=call.permission_scope))
        if decision.allowed:
            return None
        return self._deny(call, "policy", "TOOL_POLICY_DENIED", decision.reason)

    def _check_approval(self, call: _Call) -> ToolResult | None:
        decision = call.decision
        by_policy = decision is not None and decision.requires_review
        if not (by_policy or call.spec.human_review):
            return None
        if call.approval is not None:
            call.review_id = str(call.approval.get("review_id"))
            self._emit(_approved(**_ids(call), review_id=call.review_id,
                                 approved_by=call.approval.get("by")))
            return None
        call.review_id = f"{call.call_id}:review"
        review = self.approvals.review(call.review_id)
        if review is None:
            reason = decision.reason if decision is not None and by_policy \
                else f"tool {call.spec.id} requires human review"
            return self._request_review(call, reason)
        return self._review_outcome(call, review)

    def _request_review(self, call: _Call, reason: str) -> ToolResult:
        assert call.review_id is not None
        expires_in = call.spec.review_expires_in
        info: ReviewRequest = {
            "call_id": call.call_id, "tool": call.spec.id, "input_hash": call.input_hash,
            "side_effect": call.spec.side_effect, "reason": reason, "requested_at": self.now(),
            "expires_at": None if expires_in is None else self.now() + expires_in}
        self.approvals.request_review(call.review_id, info)
        self._emit(_review_requested(**_ids(call), review_id=call.review_id, reason=reason,
                                     input_hash=call.input_hash,
                                     expires_at=info["expires_at"]))
        return self._waiting(call)

    def _review_outcome(self, call: _Call, review: ReviewRecord) -> ToolResult | None:
        status = review_status(review, self.now())
        if status == "pending":
            return self._waiting(call)
        if (review.get("tool"), review.get("input_hash")) != (call.spec.id, call.input_hash):
            return self._deny(call, "approval", "TOOL_APPROVAL_INVALID",
                              f"review {call.review_id} is for another tool or input")
        if status == "approved":
            self._emit(_approved(**_ids(call), review_id=call.review_id,
                                 approved_by=review.get("decided_by")))
            return None
        if status == "rejected":
            reason = review.get("reason") or ""
            return self._deny(call, "approval", "TOOL_APPROVAL_REJECTED",
                              f"review {call.review_id} was rejected"
                              + (f": {reason}" if reason else ""))
        if status == "expired":
            return self._deny(call, "approval", "TOOL_APPROVAL_EXPIRED",
                              f"review {call.review_id} expired")
        return self._deny(call, "approval", "TOOL_APPROVAL_INVALID",
                          f"review {call.review_id} has status {status!r}")

    def _execute(self, call: _Call) -> ToolResult:
        self._emit(_started(**_ids(call), input_hash=call.input_hash))
        try:
            output = call.tool.handler(call.input)
        except Exception as exc:
            error = error_json(exc)
            result = self._fail(call, "execute", "TOOL_EXECUTION_FAILED",
                                f"{error['type']}: {error['message']}", error=error)
        else:
            output_hash = _hash(output)
            result = (self._check_output(call, output, output_hash)
                      or self._complete(call, output, output_hash))
        if call.keyed:
            self.approvals.store_result(call.call_id, result.to_json())
        return result

    def _check_output(self, call: _Call, output: Any, output_hash: str | None
                      ) -> ToolResult | None:
        issues = [("$", "the output is not JSON")] if output_hash is None \
            else call.spec.output_issues(output)
        if issues:
            self._emit(_invalid(**_ids(call), issues=_paths(issues)))
            return self._fail(call, "output", "TOOL_OUTPUT_INVALID",
                              "the output does not match the output schema at "
                              + ", ".join(_paths(issues)), issues=tuple(issues))
        if call.spec.output_schema is not None:
            self._emit(_validated(**_ids(call), output_hash=output_hash))
        return None

    def _complete(self, call: _Call, output: Any, output_hash: str | None) -> ToolResult:
        self._emit(_completed(**_ids(call), output_hash=output_hash))
        return call.result("completed", output=output)

    # -- outcomes and events ------------------------------------------------------------
    def _waiting(self, call: _Call) -> ToolResult:
        return call.result("human_review_required", code="TOOL_APPROVAL_REQUIRED",
                           phase="approval",
                           message=f"tool {call.spec.id} waits for review {call.review_id}")

    def _deny(self, call: _Call, phase: Phase, code: str, message: str) -> ToolResult:
        self._emit(_rejected(**_ids(call), code=code, phase=phase, message=message))
        return call.result("denied", code=code, phase=phase, message=message)

    def _fail(self, call: _Call, phase: Phase, code: str, message: str,
              issues: tuple[tuple[str, str], ...] = (),
              error: dict[str, str] | None = None) -> ToolResult:
        self._emit(_failed(**_ids(call), code=code, phase=phase, message=message,
                           issues=_paths(issues), error=cast(ErrorJson | None, error)))
        return call.result("failed", code=code, phase=phase, message=message, issues=issues,
                           error=error)

    def _emit(self, event: ev.Payload) -> None:
        self.record(event.kind, event.dump())


class _Ids(TypedDict):
    """What every event of a governed call says first."""

    call_id: str
    tool: str
    source: str
    side_effect: str


def _ids(call: _Call) -> _Ids:
    return {"call_id": call.call_id, "tool": call.spec.id, "source": call.spec.source,
            "side_effect": call.spec.side_effect}


# The runner's events, built unvalidated (they run on the node path: see trusted).
_requested = trusted(ev.ToolCallRequested)
_checked = trusted(ev.ToolPolicyChecked)
_approved = trusted(ev.ToolCallApproved)
_review_requested = trusted(ev.HumanReviewRequested)
_started = trusted(ev.ToolCallStarted)
_invalid = trusted(ev.ToolOutputInvalid)
_validated = trusted(ev.ToolOutputValidated)
_completed = trusted(ev.ToolCallCompleted)
_rejected = trusted(ev.ToolCallRejected)
_failed = trusted(ev.ToolCallFailed)
