"""A skill as data: what its ``SKILL.md`` declares, its loaded references and the
metadata of its scripts and assets."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import StrEnum

from hypha_celery.jsontypes import JsonObject

__all__ = ["Activation", "ActivationMode", "SideEffectPolicy", "Skill", "SkillFile",
           "SkillReference", "TrustLevel"]


class ActivationMode(StrEnum):
    """When a bound skill is selected: ``always`` (the default), ``keyword``
    (case-insensitive substring of the input), ``regex`` (case-insensitive search),
    ``intent`` (exact match), ``manual`` (its id is among the request's manual ids)."""

    ALWAYS = "always"
    KEYWORD = "keyword"
    REGEX = "regex"
    INTENT = "intent"
    MANUAL = "manual"


class TrustLevel(StrEnum):
    """A skill's provenance as judged by its installer; only ``trusted`` and
    ``reviewed`` (the default) pass :class:`~hypha_celery.skills.SkillPolicy`."""

    TRUSTED = "trusted"
    REVIEWED = "reviewed"
    UNTRUSTED = "untrusted"


class SideEffectPolicy(StrEnum):
    """hypha's ``sideEffectPolicy``: ``human_review`` marks an active skill as needing
    review; the side-effect levels (``none`` .. ``irreversible``, ``inherit``) are kept
    for the tool layer."""

    INHERIT = "inherit"
    NONE = "none"
    READ = "read"
    WRITE = "write"
    EXTERNAL_EFFECT = "external_effect"
    IRREVERSIBLE = "irreversible"
    HUMAN_REVIEW = "human_review"


@dataclass(frozen=True)
class Activation:
    """``mode`` and its ``patterns`` (keywords, regular expressions or intents)."""

    mode: ActivationMode = ActivationMode.ALWAYS
    patterns: tuple[str, ...] = ()


@dataclass(frozen=True)
class SkillFile:
    """A script or an asset: listed, never read into context, never executed."""

    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class SkillReference:
    """An ``on_activation`` reference: its path (relative to the skill directory) and
    its text, loaded with the skill."""

    path: str
    text: str
    sha256: str


@dataclass(frozen=True)
class Skill:
    """One skill. ``id`` defaults to ``name``; ``version`` is optional (a request that
    pins a version rejects a skill without it). ``allowed_tools`` ``None``: every tool
    available. ``metadata``: front-matter keys this module does not read (``license``,
    Claude Code's ``metadata``, hypha's ``provenance``...), kept as JSON.
    ``content_hash``: SHA-256 of ``SKILL.md``'s bytes and its references' (of
    ``instructions`` and the references when built in code). ``source``: the skill
    directory it was loaded from."""

    name: str
    description: str
    instructions: str = ""
    id: str = ""
    version: str | None = None
    activation: Activation = Activation()
    trust: TrustLevel = TrustLevel.REVIEWED
    priority: int = 0
    enabled: bool = True
    allowed_tools: tuple[str, ...] | None = None
    required_tools: tuple[str, ...] = ()
    side_effect_policy: SideEffectPolicy = SideEffectPolicy.INHERIT
    context_budget: int | None = None
    references: tuple[SkillReference, ...] = ()
    scripts: tuple[SkillFile, ...] = ()
    assets: tuple[SkillFile, ...] = ()
    metadata: JsonObject = field(default_factory=dict, compare=False, hash=False)
    source: str | None = None
    content_hash: str = ""

    def __post_init__(self) -> None:
        if not self.id:
            object.__setattr__(self, "id", self.name)
        if not self.content_hash:
            digest = hashlib.sha256(self.instructions.encode())
            for ref in self.references:
                digest.update(b"\0" + ref.path.encode() + b"\0" + ref.text.encode())
            object.__setattr__(self, "content_hash", digest.hexdigest())
