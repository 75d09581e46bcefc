"""The context build of an agent turn (issue 26): what the model sees, built before each
backend call of an agent whose class says so (``context = AgentContext(...)``).

Off by default: an agent class without ``context`` runs exactly as before. With one, each
attempt of a turn, in the thread that consumes the backend's stream and before
``backend.prompt``:

1. the skills bound to the agent are selected with the turn's message as text and
   activated (``skill.selected | loaded | failed``); a required skill that fails fails the
   turn with ``RequiredSkillFailed``'s message, before any backend call;
2. the agent's user's memory (the scope given at ``start``) is searched with the words
   of the message (``memory.read.*``);
3. :func:`~hypha_celery.context.build_context` assembles the instructions (the backend's
   own system prompt first, then :attr:`AgentContext.instructions`), the skills, the
   memory and the message under the budget, counted with the backend's model's tokenizer
   (``context.build.*``, ``context.compacted``);
4. the backend gets the built input. A hosted backend (OpenAI, Anthropic) gets the
   instructions and skills as its system prompt and the memory as a data block at the
   head of the user message, for this request only: the session keeps the message as it
   was given and the system prompt it had. Any other backend (Claude Code, Codex, the
   Mock) gets one prompt: a delimited ``<hypha-context>`` block, then the message.

Every backend here keeps its own history (the CLIs' sessions, the hosted session's
messages), so the conversation source of a build is the turn's message alone; the
history is bounded by the backend (``max_messages`` / ``max_bytes``), not by this budget.
The events carry ids, counts, hashes and the scope's ids, never the text of the message,
a skill or a record; the built text lives only in the request to the provider.
docs/context.md ("Agents").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hypha_celery.backends import Backend, HostedBackend, Session
from hypha_celery.context import (
    BuiltContext,
    ContextBudget,
    ContextItem,
    ContextSource,
    EstimatorTokenizer,
    Tokenizer,
    build_context,
    skill_items,
    tokenizer_for,
)
from hypha_celery.errors import (
    AgentSpecError,
    ContextError,
    ContextSpecError,
    ExtraNotInstalled,
    MemoryScopeRequired,
)
from hypha_celery.events.payloads import ContextBuildFailed, Payload
from hypha_celery.memory import (
    MemoryLimits,
    MemoryManager,
    MemoryScope,
    MemoryType,
    words_query,
)
from hypha_celery.skills import (
    ActiveSkill,
    SkillBinding,
    SkillPolicy,
    SkillRegistry,
    SkillRequest,
    activate_skills,
    complete_skills,
    select_skills,
)

__all__ = ["CONTEXT_CLOSE", "CONTEXT_OPEN", "MAX_MEMORY_LIMIT", "AgentContext", "TurnContext",
           "context_of", "context_scope", "memory_query"]

#: The block a backend without a system prompt of its own gets before the message.
CONTEXT_OPEN = "<hypha-context>"
CONTEXT_CLOSE = "</hypha-context>"
_INSTRUCTIONS = ("<instructions>", "</instructions>")
_MEMORY = ('<memory role="data">', "</memory>")
#: Records one turn reads at most (``MemoryLimits.max_results``'s default).
MAX_MEMORY_LIMIT = 100
#: Words of the message a memory query keeps: at least this many characters.
_MIN_WORD = 3
_TOOL_RESULTS = '{"hypha_tool_results"'

#: Events of one turn's build, written to the agent's log together (fenced by the turn).
Flush = Callable[[Sequence[Payload]], None]


@dataclass(frozen=True, slots=True)
class AgentContext:
    """How an agent's turns build their context; set on the agent class
    (``context = AgentContext(...)``), checked when the class is defined.

    ``instructions``: system instructions (after the backend's own ``system``).
    ``skills``: the registry; ``attached``: the skills bound to the agent (ids or
    :class:`~hypha_celery.skills.SkillBinding`; None: every registered one), selected per
    turn by their activation with the message as text; ``required``: skills that must
    load, else the turn fails (``RequiredSkillFailed``); ``allowed``: a further filter;
    ``available_tools``: what the skill policy checks ``required_tools`` against.
    ``memory``: search the agent's user's memory each turn (the scope is given at
    ``start``: a user's client's user by default), ``memory_limit`` records at most, of
    ``memory_types`` only when given; ``memory_query(message)`` makes the query (None:
    no read this turn), by default :func:`memory_query`. ``budget``: the build's token
    budget (None: ``ContextBudget()``); ``tokenizer``: a model reference whose tokenizer
    counts (None: the hosted backend's model, else the estimator)."""

    instructions: str | Sequence[str] = ()
    skills: SkillRegistry | None = None
    attached: Sequence[str | SkillBinding] | None = None
    required: Sequence[str] = ()
    allowed: Sequence[str] | None = None
    available_tools: Sequence[str] = ()
    skill_policy: SkillPolicy = field(default_factory=SkillPolicy)
    memory: bool = False
    memory_limit: int = 5
    memory_types: Sequence[MemoryType | str] | None = None
    memory_query: Callable[[str], str | None] | None = None
    budget: ContextBudget | None = None
    tokenizer: str | None = None

    def __post_init__(self) -> None:
        instructions = (self.instructions,) if isinstance(self.instructions, str) \
            else tuple(self.instructions)
        if not all(isinstance(t, str) for t in instructions):
            raise ContextSpecError("AgentContext.instructions is a string or strings")
        object.__setattr__(self, "instructions", instructions)
        self._check_skills()
        self._check_memory()
        if self.budget is not None and not isinstance(self.budget, ContextBudget):
            raise ContextSpecError(f"AgentContext.budget is a ContextBudget, not "
                                   f"{type(self.budget).__name__}")
        if self.tokenizer is not None and (not isinstance(self.tokenizer, str)
                                           or not self.tokenizer):
            raise ContextSpecError("AgentContext.tokenizer is a model reference")
        if not isinstance(self.skill_policy, SkillPolicy):
            raise ContextSpecError("AgentContext.skill_policy is a SkillPolicy")

    def _check_skills(self) -> None:
        for name in ("required", "available_tools"):
            object.__setattr__(self, name, _ids(name, getattr(self, name)))
        if self.allowed is not None:
            object.__setattr__(self, "allowed", _ids("allowed", self.allowed))
        registry = self.skills
        if registry is None:
            if self.attached is not None or self.required or self.allowed is not None:
                raise ContextSpecError("AgentContext binds skills but has no skills registry")
            return
        if not isinstance(registry, SkillRegistry):
            raise ContextSpecError(f"AgentContext.skills is a SkillRegistry, not "
                                   f"{type(registry).__name__}")
        attached = tuple(registry.ids) if self.attached is None else tuple(
            b if isinstance(b, SkillBinding) else SkillBinding(_ids("attached", (b,))[0])
            for b in self.attached)
        object.__setattr__(self, "attached", attached)
        for binding in attached:  # SkillNotFound (a SkillError) for a skill nobody has
            if isinstance(binding, SkillBinding):
                registry.get(binding.id, binding.version)
            else:
                registry.get(binding)
        for skill_id in self.required:
            registry.get(skill_id)

    def _check_memory(self) -> None:
        limit = self.memory_limit
        if isinstance(limit, bool) or not isinstance(limit, int) \
                or not 1 <= limit <= MAX_MEMORY_LIMIT:
            raise ContextSpecError(f"AgentContext.memory_limit is an integer from 1 to "
                                   f"{MAX_MEMORY_LIMIT}, not {limit!r}")
        if not isinstance(self.memory, bool):
            raise ContextSpecError("AgentContext.memory is true or false")
        if self.memory_types is not None:
            try:
                kinds = tuple(MemoryType(t) for t in self.memory_types)
            except ValueError:
                raise ContextSpecError(f"AgentContext.memory_types: one of "
                                       f"{', '.join(MemoryType)}") from None
            object.__setattr__(self, "memory_types", kinds)
        if self.memory_query is not None and not callable(self.memory_query):
            raise ContextSpecError("AgentContext.memory_query is a callable")

    @property
    def uses_skills(self) -> bool:
        return self.skills is not None


def _ids(name: str, given: Any) -> tuple[str, ...]:
    if isinstance(given, str) or not all(isinstance(i, str) and i for i in given):
        raise ContextSpecError(f"AgentContext.{name} is a list of ids")
    return tuple(given)


def memory_query(message: str, limits: MemoryLimits | None = None) -> str | None:
    """The default memory query of a message: its distinct words of three characters or
    more, joined by ``OR`` (:func:`~hypha_celery.memory.words_query`); None when it has
    no such word."""
    return words_query(message, min_chars=_MIN_WORD, limits=limits)


@dataclass
class TurnContext:
    """One attempt's build: :meth:`prepare` runs it and returns what the backend gets;
    :meth:`sent` puts the session back as the turn was given; :meth:`completed` is
    ``skill.completed`` for the skills that went into the call."""

    config: AgentContext
    build_id: str
    flush: Flush
    memory: MemoryManager | None = None
    scope: MemoryScope | None = None
    active: list[ActiveSkill] = field(default_factory=list)
    built: BuiltContext | None = None
    _restore: Callable[[Session], Session] | None = None
    _sent: bool = False

    def prepare(self, backend: Backend, session: Session, message: str) -> tuple[Session, str]:
        """``(session, prompt)`` for ``backend.prompt``. Raises ``ContextError``
        (``RequiredSkillFailed``, ``BudgetTooSmall``) or a ``GovernedMemoryError`` after
        the events written so far are flushed; nothing was sent then."""
        events: list[Payload] = []
        try:
            self.built = self._build(backend, session, message, events.append)
        except ContextError as exc:
            if not any(isinstance(e, ContextBuildFailed) for e in events):
                events.append(ContextBuildFailed(build_id=self.build_id,
                                                 error=type(exc).__name__, reason=str(exc)))
            raise
        finally:
            self.flush(events)
        return self._deliver(backend, session, message, self.built)

    def sent(self, session: Session) -> Session:
        """``backend.prompt`` returned ``session``: it as it would be without the build
        (a hosted backend's keeps its system prompt and the message as given)."""
        self._sent = True
        return session if self._restore is None else self._restore(session)

    def completed(self) -> list[Payload]:
        """``skill.completed`` of the skills that went into the call (none when nothing
        was sent)."""
        out: list[Payload] = []
        if self._sent:
            complete_skills(self.active, None, out.append, build_id=self.build_id)
        return out

    # -- the build ---------------------------------------------------------------------
    def _build(self, backend: Backend, session: Session, message: str,
               emit: Callable[[Payload], None]) -> BuiltContext:
        config = self.config
        tokenizer = _tokenizer(config, backend, session)
        items: list[ContextItem] = []
        own = _hosted_opts(backend, session).get("system")
        if isinstance(own, str) and own:
            items.append(ContextItem(ContextSource.SYSTEM, "backend.system", own,
                                     required=True, order=-1))
        items += [ContextItem(ContextSource.SYSTEM, f"instructions.{i}", text, required=True,
                              order=i) for i, text in enumerate(config.instructions)]
        if config.skills is not None:
            self.active = self._skills(config.skills, message, tokenizer, emit)
            items += skill_items(self.active)
        items += self._memory(message, emit)
        items.append(ContextItem(ContextSource.CONVERSATION, "message", message, role="user",
                                 required=True))
        return build_context(items, budget=config.budget or ContextBudget(),
                             tokenizer=tokenizer, build_id=self.build_id, purpose="agent",
                             emit=emit)

    def _skills(self, registry: SkillRegistry, message: str, tokenizer: Tokenizer,
                emit: Callable[[Payload], None]) -> list[ActiveSkill]:
        config = self.config
        selection = select_skills(registry, SkillRequest(
            attached=config.attached or (), text=message, allowed=config.allowed,
            required=config.required, available_tools=config.available_tools))
        return activate_skills(selection, policy=config.skill_policy, emit=emit,
                               build_id=self.build_id, token_counter=tokenizer.count)

    def _memory(self, message: str, emit: Callable[[Payload], None]) -> list[ContextItem]:
        config = self.config
        if not config.memory or self.memory is None or self.scope is None:
            return []
        make = config.memory_query
        query = make(message) if make is not None else memory_query(message,
                                                                    self.memory.limits)
        if not query:
            return []
        hits = self.memory.search(self.scope, query, limit=config.memory_limit,
                                  memory_types=config.memory_types,
                                  operation_id=f"{self.build_id}.memory", emit=emit)
        return [ContextItem(ContextSource.MEMORY, h.record.id, h.record.text,
                            revision=h.record.revision, priority=h.score) for h in hits]

    # -- delivery ----------------------------------------------------------------------
    def _deliver(self, backend: Backend, session: Session, message: str,
                 built: BuiltContext) -> tuple[Session, str]:
        system, rest = built.split_system()
        memory = [m.get("content") or "" for m in rest[:-1]]  # the last one is the message
        if isinstance(backend, HostedBackend) and _is_hosted(session):
            return self._hosted(session, message, system, memory)
        return session, _block(system, memory) + message

    def _hosted(self, session: Session, message: str, system: str,
                memory: list[str]) -> tuple[Session, str]:
        """This request's system prompt and memory; the stored session keeps the system
        prompt it had and the message as it was given."""
        opts = dict(_hosted_opts(None, session))
        original = dict(opts)
        if system:
            opts["system"] = system
        prompt = message
        if memory and not message.startswith(_TOOL_RESULTS):  # a tool-results prompt
            prompt = "\n\n".join([*memory, message])          # stays parseable

        def restore(dispatched: Session) -> Session:
            sent = dispatched.get("messages")
            if not isinstance(sent, list):
                return dispatched
            kept = list(sent)
            for i in range(len(kept) - 1, -1, -1):
                m = kept[i]
                if isinstance(m, dict) and m.get("role") == "user" \
                        and m.get("content") == prompt:
                    kept[i] = {**m, "content": message}
                    break
            return {**dispatched, "opts": original, "messages": kept}

        self._restore = restore
        return {**session, "opts": opts}, prompt


def context_of(agent: type) -> AgentContext | None:
    """The context an agent class declares (``AgentSpecError`` for something else)."""
    config = getattr(agent, "context", None)
    if config is not None and not isinstance(config, AgentContext):
        raise AgentSpecError(f"{agent.__qualname__}.context is an AgentContext, not "
                             f"{type(config).__name__}")
    return config


def context_scope(agent: type, scope: MemoryScope | None) -> dict[str, str] | None:
    """What ``start`` stores of ``scope`` for ``agent`` (its ids; None for an agent that
    reads no memory). ``MemoryScopeRequired`` when the agent reads memory and no scope
    says whose; ``AgentSpecError`` for a scope given to an agent that reads none."""
    config = context_of(agent)
    reads = config is not None and config.memory
    if scope is None:
        if reads:
            raise MemoryScopeRequired(
                f"agent class {agent.__qualname__} reads memory: start it with "
                "memory_scope=MemoryScope(user_id), or from a user's client "
                "(MEMORY_SCOPE_REQUIRED)")
        return None
    if not isinstance(scope, MemoryScope):
        raise AgentSpecError(f"memory_scope is a MemoryScope, not {type(scope).__name__}")
    if not reads:
        raise AgentSpecError(f"memory_scope is for an agent whose context reads memory; "
                             f"{agent.__qualname__} reads none")
    return {"user_id": scope.user_id,
            **{k: v for k, v in scope.narrower().items() if v is not None}}


def _is_hosted(session: Session) -> bool:
    return isinstance(session.get("opts"), dict) and isinstance(session.get("messages"), list)


def _hosted_opts(backend: Backend | None, session: Session) -> dict[str, Any]:
    """A hosted session's options (its ``model``, its ``system``); {} for another."""
    if backend is not None and not isinstance(backend, HostedBackend):
        return {}
    opts = session.get("opts") if isinstance(session, dict) else None
    return dict(opts) if isinstance(opts, dict) else {}


def _tokenizer(config: AgentContext, backend: Backend, session: Session) -> Tokenizer:
    """The tokenizer of the configured model reference, else of the hosted backend's
    model, else the estimator (also when the exact one's data is not installed)."""
    ref = config.tokenizer
    model = _hosted_opts(backend, session).get("model")
    if ref is None and isinstance(model, str) and model:
        ref = f"{backend.provider}:{model}"
    if ref is None:
        return EstimatorTokenizer()
    try:
        tokenizer = tokenizer_for(ref)
        tokenizer.count("")
    except ExtraNotInstalled:
        return EstimatorTokenizer()
    return tokenizer


def _block(system: str, memory: list[str]) -> str:
    """The context block a backend without a system prompt gets before the message.
    Every delimiter is a line of its own; memory records are one JSON line each, so no
    record can close the memory section or open instructions."""
    if not system and not memory:
        return ""
    lines = [CONTEXT_OPEN]
    if system:
        lines += [_INSTRUCTIONS[0], system, _INSTRUCTIONS[1]]
    if memory:
        lines += [_MEMORY[0], "".join(memory).rstrip("\n"), _MEMORY[1]]
    lines.append(CONTEXT_CLOSE)
    return "\n".join(lines) + "\n\n"

