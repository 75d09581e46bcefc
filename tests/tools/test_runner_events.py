"""The runner's events are payload models: each type's JSON has exactly the keys the
hand-built dicts had, in their order (an earlier version's rows and a new one's alike)."""

from __future__ import annotations

from hypha_celery.events.payloads import model_of
from tests.tools.test_runner import CALLS_OUT, NOTE, SECRET, Rig

IDS = ["call_id", "tool", "source", "side_effect"]
KEYS = {
    "tool.call.requested": [*IDS, "input_hash", "permission_scope"],
    "tool.policy.checked": [*IDS, "decision", "permission_scope"],
    "tool.call.approved": [*IDS, "review_id", "approved_by"],
    "human.review.requested": [*IDS, "review_id", "reason", "input_hash", "expires_at"],
    "tool.call.started": [*IDS, "input_hash"],
    "tool.output.invalid": [*IDS, "issues"],
    "tool.output.validated": [*IDS, "output_hash"],
    "tool.call.completed": [*IDS, "output_hash"],
    "tool.call.rejected": [*IDS, "code", "phase", "message"],
    "tool.call.failed": [*IDS, "code", "phase", "message", "issues", "error"],
}


def test_each_event_has_the_keys_it_always_had_in_order_and_reads_back_as_its_model() -> None:
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
    rig.run("notes.bad", invocation_id="b")
    rig.run("fs.delete", invocation_id="d", scope_allow=["none"])
    assert set(rig.types()) == set(KEYS)
    for type_, payload in rig.events:
        assert list(payload) == KEYS[type_], type_
        assert model_of(type_).model_validate(payload).dump() == payload, type_
