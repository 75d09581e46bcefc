"""Which bound skills a model call gets (hypha's ``SkillSelector``).

For each attached skill, in order, the first of these rejects it: not registered;
version mismatch; disabled; not in ``allowed``; not activated (unless ``required``). A
required skill that is not attached is rejected too. The selected are sorted by priority
(descending), then id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hypha_celery.errors import GuardError
from hypha_celery.guards import MAX_MATCH_INPUT_CHARS, Guard, parse
from hypha_celery.skills._model import ActivationMode, Skill
from hypha_celery.skills._registry import SkillRegistry

__all__ = ["NOT_ATTACHED", "RejectedSkill", "SelectedSkill", "SkillBinding", "SkillRequest",
           "SkillSelection", "regex_matches", "regex_problem", "select_skills"]

#: hypha's reason for a required skill the agent does not have (scenario 21).
NOT_ATTACHED = "Required skill is not attached to the agent."
REQUIRED = "required"


@dataclass(frozen=True)
class SkillBinding:
    """A skill bound to an agent or a workflow state; ``version`` pins it."""

    id: str
    version: str | None = None


@dataclass(frozen=True)
class SkillRequest:
    """What one model call asks for. ``attached``: the skills bound to the agent (or the
    workflow state), ids or :class:`SkillBinding`; ``text``: the input matched by
    ``keyword`` and ``regex`` skills; ``intent``: matched by ``intent`` skills;
    ``manual``: ids that select ``manual`` skills; ``allowed``: the state's allowed
    skills (``None``: every attached one); ``required``: the state's required skills;
    ``available_tools``: the tools the call may use (for the policy)."""

    attached: Sequence[SkillBinding | str] = ()
    text: str = ""
    intent: str | None = None
    manual: Sequence[str] = ()
    allowed: Sequence[str] | None = None
    required: Sequence[str] = ()
    available_tools: Sequence[str] = ()

    def __post_init__(self) -> None:
        bindings = tuple(b if isinstance(b, SkillBinding) else SkillBinding(b)
                         for b in self.attached)
        object.__setattr__(self, "attached", bindings)
        for name in ("manual", "required", "available_tools"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.allowed is not None:
            object.__setattr__(self, "allowed", tuple(self.allowed))


@dataclass(frozen=True)
class SelectedSkill:
    """``activation``: the mode that selected it, or ``required`` when only the request's
    required list brought it in; ``matched``: the patterns (or id) that matched."""

    skill: Skill
    activation: str
    required: bool
    reason: str
    matched: tuple[str, ...] = ()


@dataclass(frozen=True)
class RejectedSkill:
    id: str
    reason: str
    required: bool = False
    version: str | None = None


@dataclass(frozen=True)
class SkillSelection:
    selected: tuple[SelectedSkill, ...]
    rejected: tuple[RejectedSkill, ...]
    available_tools: tuple[str, ...] = ()

    @property
    def required_failures(self) -> tuple[RejectedSkill, ...]:
        return tuple(r for r in self.rejected if r.required)


def select_skills(registry: SkillRegistry, request: SkillRequest) -> SkillSelection:
    allowed = None if request.allowed is None else frozenset(request.allowed)
    required = tuple(dict.fromkeys(request.required))
    selected: list[SelectedSkill] = []
    rejected: list[RejectedSkill] = []
    attached: set[str] = set()
    for ref in request.attached:
        if not isinstance(ref, SkillBinding) or ref.id in attached:
            continue
        attached.add(ref.id)
        is_required = ref.id in required
        skill = registry.find(ref.id)
        reason = _rejection(skill, ref, allowed)
        if skill is None or reason is not None:
            rejected.append(RejectedSkill(ref.id, reason or "", is_required, ref.version))
            continue
        active, why, matched = activated(skill, request)
        if not active and not is_required:
            rejected.append(RejectedSkill(skill.id, why, False, skill.version))
            continue
        selected.append(SelectedSkill(
            skill, str(skill.activation.mode) if active else REQUIRED, is_required,
            why if active else "Skill is required by the current scope.", matched))
    rejected += [RejectedSkill(s, NOT_ATTACHED, True) for s in required if s not in attached]
    selected.sort(key=lambda s: (-s.skill.priority, s.skill.id))
    return SkillSelection(tuple(selected), tuple(rejected), tuple(request.available_tools))


def _rejection(skill: Skill | None, ref: SkillBinding, allowed: frozenset[str] | None
               ) -> str | None:
    if skill is None:
        return "Skill is not registered."
    if ref.version is not None and ref.version != skill.version:
        return (f"Skill version mismatch: requested {ref.version}, found "
                f"{skill.version or 'none'}.")
    if not skill.enabled:
        return "Skill is disabled."
    if allowed is not None and skill.id not in allowed:
        return "Skill is not allowed by the current scope."
    return None


def activated(skill: Skill, request: SkillRequest) -> tuple[bool, str, tuple[str, ...]]:
    """Whether ``skill``'s activation matches ``request``, why, and what matched."""
    mode, patterns = skill.activation.mode, skill.activation.patterns
    if mode is ActivationMode.ALWAYS:
        return True, "Activation policy is always.", ()
    if mode is ActivationMode.MANUAL:
        hit = skill.id in request.manual
        return hit, ("Skill was manually selected." if hit
                     else "Manual skill was not requested."), (skill.id,) if hit else ()
    if mode is ActivationMode.INTENT:
        matched = tuple(p for p in patterns if request.intent is not None
                        and p == request.intent)
        label = "Intent"
    elif mode is ActivationMode.REGEX:
        matched = tuple(p for p in patterns if regex_matches(p, request.text))
        label = "Regex"
    else:
        text = request.text.lower()
        matched = tuple(p for p in patterns if p.lower() in text)
        label = "Keyword"
    if matched:
        return True, f"{label} matched: {', '.join(matched)}.", matched
    return False, f"{label} did not match activation policy.", ()


def regex_matches(pattern: str, text: str) -> bool:
    """A case-insensitive :func:`re.search` of ``pattern`` in the first
    :data:`~hypha_celery.guards.MAX_MATCH_INPUT_CHARS` characters of ``text``, through the
    guards' safe pattern check: an invalid, unsafe (backreference, lookaround, nested or
    repeated unbounded quantifier) or over-long pattern (128 characters with its ``(?i)``)
    matches nothing."""
    guard = _guard(pattern)[0]
    return guard is not None and guard.evaluate({"input": {"text": text[:MAX_MATCH_INPUT_CHARS]}})


def regex_problem(pattern: str) -> str | None:
    """Why ``pattern`` can never match (invalid, unsafe, too long), or ``None``."""
    return _guard(pattern)[1]


_GUARDS: dict[str, tuple[Guard | None, str | None]] = {}
_MAX_CACHED = 1024


def _guard(pattern: str) -> tuple[Guard | None, str | None]:
    if pattern in _GUARDS:
        return _GUARDS[pattern]
    flagged = pattern if pattern.startswith("(?i)") else "(?i)" + pattern
    quoted = flagged.replace("\\", "\\\\").replace("'", "\\'")
    found: tuple[Guard | None, str | None]
    try:
        found = parse(f"matches(input.text, '{quoted}')"), None
    except GuardError as exc:
        text = str(exc).removesuffix(f" at character {exc.position}")
        found = None, text.replace("'(?i)" + pattern, "'" + pattern)
    except (RecursionError, OverflowError, ValueError) as exc:
        found = None, f"invalid regular expression: {type(exc).__name__}"
    if len(_GUARDS) < _MAX_CACHED:
        _GUARDS[pattern] = found
    return found
