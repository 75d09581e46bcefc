"""Tool policies: ordered rules over side-effect level, permission scope and tool id.

:meth:`ToolPolicy.decide` checks, in order: the ``deny`` list (it wins), the ``allow``
list (the explicit override), the rules (the first that matches decides), then
``default_effect`` — as in hypha, a policy that matches nothing denies unless its default
is ``allow``. :meth:`ToolPolicy.default` is hypha's ``default-deny-external-effects``:
``none`` / ``read`` / ``write`` allowed, ``external_effect`` / ``irreversible`` denied
unless a tool is on its ``allow`` list.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import ClassVar, Literal, TypedDict

from pydantic import Field, TypeAdapter, field_validator

from hypha_celery.graph.model import SideEffect
from hypha_celery.tools._model import SpecModel
from hypha_celery.tools._spec import ToolSpec

__all__ = ["DEFAULT_POLICY_ID", "Effect", "PolicyDecision", "PolicyDecisionJson", "PolicyRule",
           "ToolPolicy", "tool_matches"]

Effect = Literal["allow", "deny", "require_review"]
DEFAULT_POLICY_ID = "default-deny-external-effects"
_OVERRIDE = "Side effect level {side_effect} requires an explicit policy override."


def tool_matches(tool_id: str, patterns: Iterable[str]) -> bool:
    """Whether ``tool_id`` is one of ``patterns`` (tool ids or globs: ``fs.*``)."""
    return any(fnmatchcase(tool_id, pattern) for pattern in patterns)


class PolicyDecisionJson(TypedDict):
    """A :class:`PolicyDecision` as recorded (``tool.policy.checked``'s ``decision``)."""

    allowed: bool
    requires_review: bool
    policy_id: str | None
    rule_id: str | None
    reason: str


@dataclass(frozen=True)
class PolicyDecision:
    """hypha's ``PolicyDecision``: ``requires_review`` comes with ``allowed``."""

    allowed: bool
    requires_review: bool = False
    policy_id: str | None = None
    rule_id: str | None = None
    reason: str = ""

    def to_json(self) -> PolicyDecisionJson:
        json: PolicyDecisionJson = _DECISION.dump_python(self, mode="json")
        return json

    @classmethod
    def from_json(cls, data: PolicyDecisionJson) -> PolicyDecision:
        return _DECISION.validate_python(data)


_DECISION = TypeAdapter(PolicyDecision)


class PolicyRule(SpecModel):
    """Matches when every matcher given matches: ``side_effects`` (levels), ``scopes``
    (the call's permission scope) and ``tools`` (ids or globs); a matcher left out
    matches anything. ``reason`` may use ``{tool}`` and ``{side_effect}``."""

    _kind: ClassVar[str] = "policy rule"

    id: str = Field(min_length=1)
    effect: Effect
    side_effects: list[SideEffect] | None = None
    scopes: list[str] | None = None
    tools: list[str] | None = None
    reason: str = ""

    @field_validator("side_effects", "scopes", "tools")
    @classmethod
    def _not_empty(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value:
            raise ValueError("an empty list matches nothing (leave it out to match any)")
        return value

    def matches(self, tool: ToolSpec, scope: str | None = None) -> bool:
        return ((self.side_effects is None or tool.side_effect in self.side_effects)
                and (self.scopes is None or scope in self.scopes)
                and (self.tools is None or tool_matches(tool.id, self.tools)))

    def decision(self, tool: ToolSpec, policy_id: str) -> PolicyDecision:
        reason = (self.reason.replace("{tool}", tool.id)
                  .replace("{side_effect}", tool.side_effect)
                  or f"rule {self.id}: {self.effect}")
        return PolicyDecision(allowed=self.effect != "deny",
                              requires_review=self.effect == "require_review",
                              policy_id=policy_id, rule_id=self.id, reason=reason)


class ToolPolicy(SpecModel):
    """Rules in order, a default effect, and ``allow`` / ``deny`` lists of tool ids
    or globs (``deny`` wins; ``allow`` skips the rules)."""

    _kind: ClassVar[str] = "tool policy"

    id: str = Field(min_length=1)
    rules: list[PolicyRule] = []
    default_effect: Literal["allow", "deny"] = "deny"
    allow: list[str] = []
    deny: list[str] = []

    @field_validator("rules")
    @classmethod
    def _unique_rule_ids(cls, rules: list[PolicyRule]) -> list[PolicyRule]:
        ids = [rule.id for rule in rules]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise ValueError(f"duplicate rule ids: {', '.join(duplicates)}")
        return rules

    @classmethod
    def default(cls, *, allow: Iterable[str] = (), deny: Iterable[str] = ()) -> ToolPolicy:
        """hypha's default: ``external_effect`` and ``irreversible`` denied ("Side effect
        level X requires an explicit policy override.") unless on ``allow``."""
        rule = PolicyRule(id="deny-external-effects", effect="deny",
                          side_effects=["external_effect", "irreversible"], reason=_OVERRIDE)
        return cls(id=DEFAULT_POLICY_ID, rules=[rule], default_effect="allow",
                   allow=list(allow), deny=list(deny))

    def decide(self, tool: ToolSpec, scope: str | None = None) -> PolicyDecision:
        """The decision for a call of ``tool`` under permission ``scope``."""
        if tool_matches(tool.id, self.deny):
            return PolicyDecision(False, policy_id=self.id,
                                  reason=f"tool {tool.id} is on the deny list")
        if tool_matches(tool.id, self.allow):
            return PolicyDecision(True, policy_id=self.id,
                                  reason=f"tool {tool.id} is on the allow list")
        for rule in self.rules:
            if rule.matches(tool, scope):
                return rule.decision(tool, self.id)
        return PolicyDecision(self.default_effect == "allow", policy_id=self.id,
                              reason=f"no rule matched: default {self.default_effect}")
