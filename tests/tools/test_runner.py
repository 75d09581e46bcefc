"""GovernedRunner: hypha's governed steps, events and exactly-once handlers
(hypha §4 scenario 18, and the rest of the flow)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, get_args

import pytest

from hypha_celery.errors import NoPendingReview, ReviewError, ToolCallRejected
from hypha_celery.events.envelope import EventType
from hypha_celery.tools import (
    GovernedRunner,
    MemoryApprovals,
    PolicyRule,
    SideEffect,
    ToolEventType,
    ToolPolicy,
    ToolRegistry,
    ToolResult,
    ToolSpec,
)

SECRET = "sk-live-do-not-record"
OBJECT = {"type": "object"}
NOTE = {"type": "object", "required": ["text"], "additionalProperties": False,
        "properties": {"text": {"type": "string"}, "n": {"type": "integer"}}}
CALLS_OUT = {"type": "object", "required": ["calls"],
             "properties": {"calls": {"type": "integer"}}}


class Clock:
    def __init__(self) -> None:
        self.t = 1_000.0

    def __call__(self) -> float:
        return self.t


@dataclass
class Rig:
    """A runner with a list recorder, in-memory approvals, a clock and counted tools."""

    policy: ToolPolicy | None = None
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    calls: dict[str, int] = field(default_factory=dict)
    clock: Clock = field(default_factory=Clock)
    tools: ToolRegistry = field(default_factory=ToolRegistry)

    def __post_init__(self) -> None:
        self.approvals = MemoryApprovals(self.clock)
        self.runner = GovernedRunner(self.tools, self.policy, self.record, self.approvals,
                                     now=self.clock)

    def record(self, type_: str, payload: dict[str, Any]) -> None:
        self.events.append((type_, payload))

    def add(self, tool_id: str, side_effect: SideEffect = "write", output: Any = None,
            **spec: Any) -> None:
        def handler(args: Any) -> Any:
            self.calls[tool_id] = self.calls.get(tool_id, 0) + 1
            if isinstance(output, Exception):
                raise output
            return {"calls": self.calls[tool_id]} if output is None else output

        spec.setdefault("input_schema", OBJECT)
        self.tools.register(ToolSpec(id=tool_id, side_effect=side_effect, **spec), handler)

    def run(self, tool_id: str, args: Any = None, **options: Any) -> ToolResult:
        return self.runner.run(tool_id, {"text": SECRET} if args is None else args, **options)

    def types(self) -> list[str]:
        return [type_ for type_, _ in self.events]

    def take(self) -> list[str]:
        types = self.types()
        self.events.clear()
        return types

    def payload(self, type_: str) -> dict[str, Any]:
        found = [p for t, p in self.events if t == type_]
        assert len(found) == 1, (type_, self.types())
        return found[0]


# -- hypha §4 scenario 18 ---------------------------------------------------------------
def test_irreversible_under_the_default_policy_is_denied() -> None:
    rig = Rig()
    rig.add("fs.delete", "irreversible")
    result = rig.run("fs.delete", invocation_id="c1")
    assert (result.status, result.code, result.phase) == ("denied", "TOOL_POLICY_DENIED",
                                                          "policy")
    assert result.message == "Side effect level irreversible requires an explicit policy " \
                             "override."
    assert rig.types() == ["tool.call.requested", "tool.policy.checked",
                           "tool.call.rejected"]
    rejected = rig.payload("tool.call.rejected")
    assert rejected["source"] == "local" and rejected["side_effect"] == "irreversible"
    assert rejected["code"] == "TOOL_POLICY_DENIED" and rejected["call_id"] == "c1"
    assert rig.payload("tool.policy.checked")["decision"] == {
        "allowed": False, "requires_review": False,
        "policy_id": "default-deny-external-effects", "rule_id": "deny-external-effects",
        "reason": result.message}
    assert rig.calls == {}


def test_human_review_then_approve_runs_the_handler_exactly_once() -> None:
    rig = Rig()
    rig.add("notes.write", "write", human_review=True, output_schema=CALLS_OUT)

    first = rig.run("notes.write", invocation_id="inv-1")
    assert (first.status, first.code, first.phase) == ("human_review_required",
                                                       "TOOL_APPROVAL_REQUIRED", "approval")
    assert first.review_id == "inv-1:review" and rig.calls == {}
    assert rig.take() == ["tool.call.requested", "tool.policy.checked",
                          "human.review.requested"]

    rig.approvals.approve("inv-1:review", by="alice")
    second = rig.run("notes.write", invocation_id="inv-1")
    assert second.status == "completed" and second.output == {"calls": 1}
    assert not second.reused and rig.calls == {"notes.write": 1}
    assert rig.types() == ["tool.call.requested", "tool.policy.checked", "tool.call.approved",
                           "tool.call.started", "tool.output.validated",
                           "tool.call.completed"]
    assert rig.payload("tool.call.approved")["approved_by"] == "alice"
    rig.events.clear()

    third = rig.run("notes.write", invocation_id="inv-1")
    assert third == second and third.reused
    assert rig.calls == {"notes.write": 1} and rig.events == []


def test_a_scope_that_allows_only_another_tool() -> None:
    rig = Rig()
    rig.add("notes.write", "write")
    result = rig.run("notes.write", invocation_id="c1", scope_allow=["tool.other"])
    assert (result.status, result.code, result.phase) == ("denied",
                                                          "TOOL_NOT_ALLOWED_IN_SCOPE", "scope")
    assert rig.types() == ["tool.call.requested", "tool.call.rejected"]
    assert rig.calls == {}


# -- scope, idempotency key, input ------------------------------------------------------
def test_scope_allow_lists_take_globs_and_none_allows_everything() -> None:
    rig = Rig()
    rig.add("notes.write", "write")
    assert rig.run("notes.write", invocation_id="a", scope_allow=["notes.*"]).ok
    assert rig.run("notes.write", invocation_id="b").ok
    assert rig.run("notes.write", invocation_id="c", scope_allow=[]).code \
        == "TOOL_NOT_ALLOWED_IN_SCOPE"


@pytest.mark.parametrize("invocation_id", [None, ""])
def test_a_write_without_an_invocation_id_is_denied(invocation_id: str | None) -> None:
    rig = Rig()
    rig.add("notes.write", "write")
    result = rig.run("notes.write", invocation_id=invocation_id)
    assert (result.status, result.code, result.phase) == (
        "denied", "TOOL_IDEMPOTENCY_KEY_REQUIRED", "idempotency")
    assert rig.types() == ["tool.call.requested", "tool.call.rejected"]
    assert rig.calls == {}


def test_a_read_without_an_invocation_id_gets_a_fresh_one_and_is_not_kept() -> None:
    rig = Rig()
    rig.add("notes.read", "read")
    one, two = rig.run("notes.read"), rig.run("notes.read")
    assert one.ok and two.ok and one.call_id != two.call_id
    assert rig.calls == {"notes.read": 2}
    assert rig.approvals.result(one.call_id) is None


def test_input_schema_failures_carry_json_paths() -> None:
    rig = Rig()
    rig.add("notes.write", "write", input_schema=NOTE)
    result = rig.run("notes.write", {"text": 7, "n": SECRET, "extra": 1}, invocation_id="c")
    assert (result.status, result.code, result.phase) == ("failed", "TOOL_INPUT_INVALID",
                                                          "input")
    assert [path for path, _ in result.issues] == ["$.extra", "$.n", "$.text"]
    assert result.message == "the input does not match the input schema at " \
                             "$.extra, $.n, $.text"
    assert rig.types() == ["tool.call.requested", "tool.call.failed"]
    assert rig.payload("tool.call.failed")["issues"] == ["$.extra", "$.n", "$.text"]
    assert rig.calls == {}
    assert rig.approvals.result("c") is None  # nothing ran: a corrected retry may reuse "c"
    assert rig.run("notes.write", {"text": "ok"}, invocation_id="c").ok


def test_an_input_that_is_not_json() -> None:
    rig = Rig()
    rig.add("notes.write", "write")
    result = rig.run("notes.write", {"when": object()}, invocation_id="c")
    assert (result.code, result.message, result.input_hash) == (
        "TOOL_INPUT_INVALID", "the input is not JSON", None)
    assert rig.payload("tool.call.requested")["input_hash"] is None


# -- policy -----------------------------------------------------------------------------
def test_policy_review_and_allow_overrides() -> None:
    policy = ToolPolicy(id="ops", default_effect="allow", rules=[
        PolicyRule(id="review-mail", effect="require_review", tools=["mail.*"],
                   reason="mail to customers needs a human")])
    rig = Rig(policy)
    rig.add("mail.send", "external_effect")
    result = rig.run("mail.send", invocation_id="m1")
    assert result.status == "human_review_required"
    assert rig.payload("human.review.requested")["reason"] == "mail to customers needs a human"
    assert rig.approvals.pending()[0]["reason"] == "mail to customers needs a human"

    override = Rig(ToolPolicy.default(allow=["fs.delete"]))
    override.add("fs.delete", "irreversible")
    assert override.run("fs.delete", invocation_id="d1").ok


def test_deny_list_wins_over_allow_list() -> None:
    rig = Rig(ToolPolicy.default(allow=["fs.*"], deny=["fs.delete"]))
    rig.add("fs.delete", "irreversible")
    result = rig.run("fs.delete", invocation_id="d1")
    assert (result.code, result.message) == ("TOOL_POLICY_DENIED",
                                             "tool fs.delete is on the deny list")
    assert rig.calls == {}


def test_permission_scope_reaches_the_policy() -> None:
    policy = ToolPolicy(id="p", rules=[
        PolicyRule(id="ops", effect="allow", scopes=["ops"])])
    rig = Rig(policy)
    rig.add("notes.write", "write")
    assert rig.run("notes.write", invocation_id="a", permission_scope="guest").code \
        == "TOOL_POLICY_DENIED"
    assert rig.run("notes.write", invocation_id="b", permission_scope="ops").ok
    assert rig.events[0][1]["permission_scope"] == "guest"


# -- human review: rejection, expiry, binding --------------------------------------------
def test_a_rejected_review() -> None:
    rig = Rig()
    rig.add("notes.write", "write", human_review=True)
    rig.run("notes.write", invocation_id="r")
    rig.approvals.reject("r:review", by="bob", reason="not today")
    rig.events.clear()
    result = rig.run("notes.write", invocation_id="r")
    assert (result.status, result.code, result.message) == (
        "denied", "TOOL_APPROVAL_REJECTED", "review r:review was rejected: not today")
    assert rig.types() == ["tool.call.requested", "tool.policy.checked", "tool.call.rejected"]
    assert rig.calls == {}
    with pytest.raises(ReviewError, match="already rejected"):
        rig.approvals.approve("r:review", by="carol")


def test_an_expired_review() -> None:
    rig = Rig()
    rig.add("notes.write", "write", human_review=True)
    rig.run("notes.write", invocation_id="e")
    rig.approvals.expire("e:review")
    result = rig.run("notes.write", invocation_id="e")
    assert (result.status, result.code) == ("denied", "TOOL_APPROVAL_EXPIRED")
    assert rig.calls == {}


def test_a_review_expires_after_review_expires_in() -> None:
    rig = Rig()
    rig.add("notes.write", "write", human_review=True, review_expires_in=60)
    rig.run("notes.write", invocation_id="t")
    assert rig.payload("human.review.requested")["expires_at"] == 1_060.0
    rig.clock.t += 59
    assert rig.run("notes.write", invocation_id="t").status == "human_review_required"
    rig.clock.t += 1
    assert rig.run("notes.write", invocation_id="t").code == "TOOL_APPROVAL_EXPIRED"
    with pytest.raises(ReviewError, match="already expired"):
        rig.approvals.approve("t:review", by="late")
    assert rig.calls == {}


def test_a_pending_review_is_requested_once() -> None:
    rig = Rig()
    rig.add("notes.write", "write", human_review=True)
    rig.run("notes.write", invocation_id="p")
    again = rig.run("notes.write", invocation_id="p")
    assert again.status == "human_review_required" and again.review_id == "p:review"
    assert rig.types().count("human.review.requested") == 1
    assert [r["review_id"] for r in rig.approvals.pending()] == ["p:review"]


def test_an_approval_is_bound_to_its_input() -> None:
    rig = Rig()
    rig.add("notes.write", "write", human_review=True)
    rig.run("notes.write", {"text": "approved text"}, invocation_id="b")
    rig.approvals.approve("b:review", by="alice")
    result = rig.run("notes.write", {"text": "something else"}, invocation_id="b")
    assert (result.status, result.code) == ("denied", "TOOL_APPROVAL_INVALID")
    assert rig.calls == {}
    assert rig.run("notes.write", {"text": "approved text"}, invocation_id="b").ok


# -- handler, output ---------------------------------------------------------------------
def test_a_handler_exception_fails_the_call_once() -> None:
    rig = Rig()
    rig.add("notes.write", "write", output=RuntimeError("disk full"))
    result = rig.run("notes.write", invocation_id="x")
    assert (result.status, result.code, result.phase) == ("failed", "TOOL_EXECUTION_FAILED",
                                                          "execute")
    assert result.message == "RuntimeError: disk full"
    assert result.error is not None and result.error["type"] == "RuntimeError"
    assert rig.types() == ["tool.call.requested", "tool.policy.checked", "tool.call.started",
                           "tool.call.failed"]
    assert rig.payload("tool.call.failed")["error"]["message"] == "disk full"
    again = rig.run("notes.write", invocation_id="x")  # the handler ran: the result is kept
    assert again == result and again.reused and rig.calls == {"notes.write": 1}


def test_output_schema_failures_carry_json_paths() -> None:
    rig = Rig()
    rig.add("notes.write", "write", output={"calls": "many", "n": [1]},
            output_schema={"type": "object", "properties": {
                "calls": {"type": "integer"},
                "n": {"type": "array", "items": {"type": "string"}}}})
    result = rig.run("notes.write", invocation_id="o")
    assert (result.status, result.code, result.phase) == ("failed", "TOOL_OUTPUT_INVALID",
                                                          "output")
    assert [path for path, _ in result.issues] == ["$.calls", "$.n[0]"]
    assert rig.types() == ["tool.call.requested", "tool.policy.checked", "tool.call.started",
                           "tool.output.invalid", "tool.call.failed"]
    assert rig.payload("tool.output.invalid")["issues"] == ["$.calls", "$.n[0]"]
    assert rig.run("notes.write", invocation_id="o").reused
    assert rig.calls == {"notes.write": 1}


def test_an_output_that_is_not_json() -> None:
    rig = Rig()
    rig.add("notes.read", "read", output={"at": {1, 2}})
    result = rig.run("notes.read")
    assert (result.code, result.issues) == ("TOOL_OUTPUT_INVALID",
                                            (("$", "the output is not JSON"),))


def test_completed_without_an_output_schema() -> None:
    rig = Rig()
    rig.add("notes.read", "read", output=["a", "b"])
    result = rig.run("notes.read", invocation_id="r")
    assert result.ok and result.output == ["a", "b"] and result.raise_for_status() is result
    assert rig.types() == ["tool.call.requested", "tool.policy.checked", "tool.call.started",
                           "tool.call.completed"]
    assert len(rig.payload("tool.call.completed")["output_hash"]) == 16


def test_the_same_invocation_id_with_another_input_conflicts() -> None:
    rig = Rig()
    rig.add("notes.write", "write")
    assert rig.run("notes.write", {"text": "a"}, invocation_id="k").ok
    rig.events.clear()
    result = rig.run("notes.write", {"text": "b"}, invocation_id="k")
    assert (result.status, result.code) == ("conflict", "TOOL_IDEMPOTENCY_CONFLICT")
    assert rig.calls == {"notes.write": 1} and rig.events == []


# -- events and results ------------------------------------------------------------------
def test_every_event_names_the_call_and_never_holds_the_input() -> None:
    rig = Rig()
    rig.add("notes.write", "write", human_review=True, input_schema=NOTE,
            output_schema=CALLS_OUT)
    rig.add("notes.fail", "write", output=ValueError("no"))
    rig.add("notes.bad", "read", output={"calls": "many"}, output_schema=CALLS_OUT)
    rig.add("fs.delete", "irreversible")
    rig.run("notes.write", {"text": SECRET, "n": SECRET}, invocation_id="bad")
    rig.run("notes.write", invocation_id="ok")
    rig.approvals.approve("ok:review", by="alice")
    rig.run("notes.write", invocation_id="ok")
    rig.run("notes.fail", invocation_id="f")
    rig.run("notes.bad")
    rig.run("fs.delete", invocation_id="d")
    rig.run("fs.delete", invocation_id="d", scope_allow=["none"])
    assert set(rig.types()) == set(get_args(ToolEventType))
    for type_, payload in rig.events:
        assert {"call_id", "tool", "source", "side_effect"} <= set(payload), type_
        assert SECRET not in json.dumps(payload), type_
        assert "input" not in payload


def test_the_event_types_are_in_the_taxonomy() -> None:
    assert set(get_args(ToolEventType)) <= set(get_args(EventType))


def test_every_started_call_ends() -> None:
    rig = Rig()
    rig.add("a.ok", "read")
    rig.add("a.boom", "read", output=KeyError("k"))
    rig.add("a.bad", "read", output={"x": 1}, output_schema={"type": "array"})
    for tool_id in ("a.ok", "a.boom", "a.bad"):
        rig.run(tool_id)
    ends = {"tool.call.completed", "tool.call.failed", "tool.call.rejected"}
    started = [p["call_id"] for t, p in rig.events if t == "tool.call.started"]
    ended = [p["call_id"] for t, p in rig.events if t in ends]
    assert len(started) == 3 and started == ended


def test_a_mapping_of_tools_and_the_default_policy() -> None:
    events: list[str] = []
    spec = ToolSpec(id="util.echo", input_schema={}, side_effect="none")
    runner = GovernedRunner({"util.echo": (spec, lambda a: a)}, None,
                            lambda type_, payload: events.append(type_))
    assert runner.run("util.echo", {"a": 1}).output == {"a": 1}
    assert runner.policy.id == "default-deny-external-effects"
    assert events[-1] == "tool.call.completed"


@pytest.mark.parametrize("result", [
    ToolResult("completed", "t.x", "c", output={"a": [1]}, input_hash="0" * 16),
    ToolResult("failed", "t.x", "c", code="TOOL_INPUT_INVALID", message="m", phase="input",
               issues=(("$.a", "bad"),)),
    ToolResult("failed", "t.x", "c", code="TOOL_EXECUTION_FAILED", phase="execute",
               error={"type": "E", "message": "m", "class": "permanent"}),
    ToolResult("human_review_required", "t.x", "c", code="TOOL_APPROVAL_REQUIRED",
               review_id="c:review"),
])
def test_results_round_trip_as_json(result: ToolResult) -> None:
    data = json.loads(json.dumps(result.to_json()))
    assert ToolResult.from_json(data) == result
    assert "reused" not in data


@pytest.mark.parametrize(("status", "code"), [
    ("denied", "TOOL_POLICY_DENIED"), ("human_review_required", "TOOL_APPROVAL_REQUIRED"),
    ("failed", "TOOL_OUTPUT_INVALID"), ("cancelled", None)])
def test_raise_for_status(status: Any, code: str | None) -> None:
    with pytest.raises(ToolCallRejected) as caught:
        ToolResult(status, "t.x", "c", code=code, message="why").raise_for_status()
    assert caught.value.code == (code or status.upper())
    assert str(caught.value).endswith(": why")


# -- MemoryApprovals ---------------------------------------------------------------------
def test_memory_approvals_decide_once() -> None:
    store = MemoryApprovals(Clock())
    with pytest.raises(NoPendingReview):
        store.approve("missing", by="a")
    store.request_review("r", {"tool": "t.x"})
    with pytest.raises(ReviewError, match="already requested"):
        store.request_review("r", {})
    store.approve("r", by="alice")
    review = store.review("r")
    assert review is not None
    assert (review["status"], review["decided_by"], review["decided_at"]) == (
        "approved", "alice", 1_000.0)
    with pytest.raises(ReviewError, match="already approved"):
        store.reject("r", by="b")
    with pytest.raises(ReviewError, match="already approved"):
        store.expire("r")
    assert store.pending() == []


def test_memory_approvals_keep_json_copies() -> None:
    store = MemoryApprovals()
    result: dict[str, Any] = {"output": {"a": [1]}}
    store.store_result("i", result)
    result["output"]["a"].append(2)
    kept = store.result("i")
    assert kept == {"output": {"a": [1]}}
    assert kept is not None
    kept["output"] = None
    assert store.result("i") == {"output": {"a": [1]}}
    with pytest.raises(TypeError):
        store.store_result("j", {"x": object()})
    assert store.result("missing") is None and store.review("missing") is None


def test_a_result_stored_by_the_previous_version_loads_and_writes_the_same_json() -> None:
    # what the hand-written to_json wrote: every key, issues as {"path", "message"}
    stored = {"status": "failed", "tool": "t.x", "call_id": "c", "output": None,
              "code": "TOOL_INPUT_INVALID", "message": "m", "phase": "input",
              "review_id": None, "input_hash": "0" * 16,
              "issues": [{"path": "$.a", "message": "bad"}], "error": None}
    result = ToolResult.from_json(stored, reused=True)
    assert (result.issues, result.reused) == ((("$.a", "bad"),), True)
    assert list(result.to_json().items()) == list(stored.items())
    assert ToolResult.from_json({"status": "completed", "tool": "t", "call_id": "c"}) \
        == ToolResult("completed", "t", "c")
