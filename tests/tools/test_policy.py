"""ToolPolicy: deny list, allow list, rules in order, default effect."""

from __future__ import annotations

from typing import Any

import pytest

from hypha_celery.errors import ToolSpecError
from hypha_celery.tools import (
    DEFAULT_POLICY_ID,
    PolicyDecision,
    PolicyRule,
    SideEffect,
    ToolPolicy,
    ToolSpec,
)


def tool(tool_id: str = "fs.write", side_effect: SideEffect = "write") -> ToolSpec:
    return ToolSpec(id=tool_id, input_schema={}, side_effect=side_effect)


@pytest.mark.parametrize("level", ["none", "read", "write"])
def test_default_policy_allows_up_to_write(level: SideEffect) -> None:
    decision = ToolPolicy.default().decide(tool(side_effect=level))
    assert decision == PolicyDecision(True, False, DEFAULT_POLICY_ID, None,
                                      "no rule matched: default allow")


@pytest.mark.parametrize("level", ["external_effect", "irreversible"])
def test_default_policy_denies_the_two_highest_levels(level: SideEffect) -> None:
    decision = ToolPolicy.default().decide(tool(side_effect=level))
    assert not decision.allowed and not decision.requires_review
    assert decision.policy_id == "default-deny-external-effects"
    assert decision.rule_id == "deny-external-effects"
    assert decision.reason == f"Side effect level {level} requires an explicit policy override."


def test_the_allow_list_is_the_override_and_the_deny_list_wins() -> None:
    rm = tool("fs.delete", "irreversible")
    assert ToolPolicy.default(allow=["fs.delete"]).decide(rm).allowed
    assert ToolPolicy.default(allow=["fs.*"]).decide(rm).reason \
        == "tool fs.delete is on the allow list"
    both = ToolPolicy.default(allow=["fs.delete"], deny=["fs.delete"]).decide(rm)
    assert not both.allowed and both.reason == "tool fs.delete is on the deny list"
    assert not ToolPolicy.default(deny=["fs.*"]).decide(tool("fs.read", "read")).allowed
    assert not ToolPolicy(id="p", default_effect="allow", allow=["*"], deny=["x.y"]) \
        .decide(tool("x.y")).allowed


def test_rules_in_order_the_first_match_decides() -> None:
    policy = ToolPolicy(id="p", rules=[
        PolicyRule(id="review-mail", effect="require_review", tools=["mail.*"]),
        PolicyRule(id="no-writes", effect="deny", side_effects=["write"]),
        PolicyRule(id="writes-ok", effect="allow", side_effects=["write"]),
    ])
    mail = policy.decide(tool("mail.send"))
    assert (mail.allowed, mail.requires_review, mail.rule_id) == (True, True, "review-mail")
    assert mail.reason == "rule review-mail: require_review"
    write = policy.decide(tool("fs.write"))
    assert (write.allowed, write.rule_id) == (False, "no-writes")
    reordered = ToolPolicy(id="p", rules=list(reversed(policy.rules)))
    assert reordered.decide(tool("fs.write")).rule_id == "writes-ok"
    assert reordered.decide(tool("mail.send")).rule_id == "writes-ok"


def test_a_rule_matches_when_every_matcher_given_matches() -> None:
    rule = PolicyRule(id="r", effect="allow", side_effects=["write"], scopes=["ops"],
                      tools=["fs.*"])
    assert rule.matches(tool("fs.write"), "ops")
    assert not rule.matches(tool("fs.write"), "guest")
    assert not rule.matches(tool("fs.write"), None)
    assert not rule.matches(tool("db.write"), "ops")
    assert not rule.matches(tool("fs.read", "read"), "ops")
    assert PolicyRule(id="any", effect="deny").matches(tool("x", "none"))


def test_scopes_select_rules() -> None:
    policy = ToolPolicy(id="p", rules=[
        PolicyRule(id="ops-writes", effect="allow", scopes=["ops"], side_effects=["write"])])
    assert policy.decide(tool(), "ops").allowed
    guest = policy.decide(tool(), "guest")
    assert not guest.allowed and guest.rule_id is None
    assert guest.reason == "no rule matched: default deny"


def test_no_match_denies_unless_the_default_allows() -> None:
    assert not ToolPolicy(id="empty").decide(tool("x", "none")).allowed
    assert ToolPolicy(id="open", default_effect="allow").decide(tool("x", "none")).allowed


def test_reason_templates() -> None:
    rule = PolicyRule(id="r", effect="deny", reason="{tool} at {side_effect}: no {other}")
    assert rule.decision(tool(), "p").reason == "fs.write at write: no {other}"


def test_a_policy_loads_from_plain_data() -> None:
    policy = ToolPolicy.model_validate({
        "id": "from-yaml", "default_effect": "allow", "deny": ["shell.*"],
        "rules": [{"id": "r1", "effect": "require_review", "side_effects": ["irreversible"]}]})
    decision = policy.decide(tool("fs.delete", "irreversible"))
    assert decision.to_json() == {"allowed": True, "requires_review": True,
                                  "policy_id": "from-yaml", "rule_id": "r1",
                                  "reason": "rule r1: require_review"}


@pytest.mark.parametrize(("data", "where"), [
    ({"rules": [{"id": "a", "effect": "allow"}, {"id": "a", "effect": "deny"}]},
     "rules: duplicate rule ids: a"),
    ({"rules": [{"id": "a", "effect": "maybe"}]}, "'a': effect:"),
    ({"rules": [{"id": "a", "effect": "deny", "side_effects": ["catastrophic"]}]},
     "side_effects.0:"),
    ({"rules": [{"id": "a", "effect": "deny", "tools": []}]}, "tools: an empty list"),
    ({"default_effect": "require_review"}, "default_effect:"),
    ({"id": ""}, "id:"),
    ({"allow_all": True}, "allow_all:"),
])
def test_a_bad_policy_is_a_tool_spec_error_naming_the_field(data: dict[str, Any],
                                                            where: str) -> None:
    with pytest.raises(ToolSpecError, match=where):
        ToolPolicy.model_validate({"id": "p", **data})


def test_a_bad_rule_on_its_own() -> None:
    with pytest.raises(ToolSpecError, match="^policy rule 'r': scopes: an empty list"):
        PolicyRule(id="r", effect="deny", scopes=[])


def test_a_decision_reads_back_from_its_json() -> None:
    decision = ToolPolicy.default().decide(tool("fs.delete", "irreversible"))
    assert PolicyDecision.from_json(decision.to_json()) == decision
