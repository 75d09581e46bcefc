"""What the model sees at each ``reason`` step: the context built before its call.

A :class:`ContextPlan` is made once, when the graph is defined (every problem raises
then): the instructions, the skills bound to the loop and the request they are selected
by, the memory query, the token budget and the tokenizer. Each ``reason`` step then, in
this order and before any inference:

1. selects and activates the skills (``skill.selected``, ``skill.loaded`` or
   ``skill.failed``); a required skill that fails ends the step with
   :class:`~hypha_celery.errors.RequiredSkillFailed` after ``context.build.started`` /
   ``context.build.failed`` -- no memory is read and no model is called;
2. recalls the run's user's memory (``ctx.recall``: ``memory.read.*``, one recorded read
   per step, served from the recording on a re-execution);
3. builds the context (:func:`~hypha_celery.context.build_context`: ``context.build.*``,
   ``context.compacted``): the instructions (system), the active skills (system
   messages headed by id and version), the memory records (one user message of JSON
   lines: data, never instructions), the question (the conversation, always kept) and
   the loop's observations so far (tool results, oldest dropped first, the last one cut
   rather than dropped).

The built messages are a pure function of the question, the loop's variables, the
recorded memory read and the skills as loaded at definition: a re-execution builds the
same context, byte for byte (the same ``context_hash``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from hypha_celery.context import (
    DEFAULT_TOTAL,
    MAX_ITEM_CHARS,
    BuiltContext,
    ContextBudget,
    ContextItem,
    ContextSource,
    Tokenizer,
    build_context,
    skill_items,
    tokenizer_for,
)
from hypha_celery.errors import ContextSpecError, GraphSpecError, RequiredSkillFailed
from hypha_celery.events import payloads as ev
from hypha_celery.events.envelope import canonical
from hypha_celery.graph import NodeContext
from hypha_celery.graph.memory import Recalled
from hypha_celery.jsontypes import JsonValue
from hypha_celery.memory import MemoryLimits, MemoryType, parse_query, words_query
from hypha_celery.react._state import MemoryEntry, Observation, ReactState
from hypha_celery.skills import (
    ActiveSkill,
    SkillBinding,
    SkillPolicy,
    SkillRegistry,
    SkillRequest,
    activate_skills,
    select_skills,
)

__all__ = ["DEFAULT_BUDGET", "MAX_MEMORY_LIMIT", "PURPOSE", "ContextPlan", "ReactMemory",
           "StepContext", "build_step", "memory_query", "plan_context"]

#: The budget of every ``reason`` step unless ``react_graph(context_budget=)`` says
#: otherwise: :meth:`ContextBudget.split` of :data:`~hypha_celery.context.DEFAULT_TOTAL`
#: (24,000 tokens: system 15 %, skills 20 %, memory 15 %, conversation 50 %, tools 25 %),
#: the last observation cut at a token boundary rather than dropped.
DEFAULT_BUDGET = ContextBudget(DEFAULT_TOTAL, ContextBudget.split(DEFAULT_TOTAL).per_source,
                               truncate=frozenset({ContextSource.TOOLS}))
_LIMITS = MemoryLimits()  # the memory's defaults: its query bounds, its result clamp
#: Records one step may recall (the memory's own clamp).
MAX_MEMORY_LIMIT = _LIMITS.max_results
#: ``context.build.started``'s ``purpose``.
PURPOSE = "react"


@dataclass(frozen=True)
class ReactMemory:
    """Recall over the run's user's memory before each model call (``react_graph(memory=
    ReactMemory(...))``; ``memory=True`` is ``ReactMemory()``). ``query``: a fixed query
    in the memory's query language (None: any word of the question, see
    :func:`memory_query`); ``limit``: records per step, 1 to :data:`MAX_MEMORY_LIMIT`;
    ``memory_types``: only records of these types (None: every type). The run needs a
    ``user_id`` (else :class:`~hypha_celery.errors.MemoryScopeRequired` fails the step)."""

    query: str | None = None
    limit: int = 5
    memory_types: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) \
                or not 1 <= self.limit <= MAX_MEMORY_LIMIT:
            raise ContextSpecError(f"memory limit must be an int from 1 to {MAX_MEMORY_LIMIT},"
                                   f" got {self.limit!r}")
        if self.query is not None:
            if not isinstance(self.query, str):
                raise ContextSpecError(f"memory query must be a string, got {self.query!r}")
            parse_query(self.query)  # InvalidMemoryQuery now rather than at each step
        if self.memory_types is not None:
            if isinstance(self.memory_types, str):
                object.__setattr__(self, "memory_types", (self.memory_types,))
            known = {t.value for t in MemoryType}
            unknown = [t for t in self.memory_types if t not in known]
            if unknown or not self.memory_types:
                raise ContextSpecError(f"memory_types must be some of {sorted(known)}, got "
                                       f"{list(self.memory_types)!r}")
            object.__setattr__(self, "memory_types", tuple(sorted(set(self.memory_types))))


@dataclass(frozen=True)
class ContextPlan:
    """What every ``reason`` step builds its context from (made by :func:`plan_context`).
    ``skills``: a snapshot of the registry given (registering more later changes
    nothing); ``request``: the skill request whose ``text`` (the question) and
    ``available_tools`` (the loop's tools) each step fills in."""

    instructions: str
    budget: ContextBudget
    tokenizer: Tokenizer
    tool_ids: tuple[str, ...]
    skills: SkillRegistry | None = None
    request: SkillRequest = field(default_factory=SkillRequest)
    policy: SkillPolicy = field(default_factory=SkillPolicy)
    memory: ReactMemory | None = None


def plan_context(*, instructions: str, tokenizer_ref: str, tool_ids: Sequence[str],
                 skills: SkillRegistry | None, skill_request: SkillRequest | None,
                 skill_policy: SkillPolicy | None, memory: bool | ReactMemory | None,
                 budget: ContextBudget | None) -> ContextPlan:
    """The checked plan: a skill id the registry does not hold raises
    :class:`~hypha_celery.errors.SkillNotFound` (a skill attached, required, allowed or
    manual; an attached version that is not the registry's); the rest
    :class:`~hypha_celery.errors.GraphSpecError` /
    :class:`~hypha_celery.errors.ContextSpecError`. A required skill that is not attached
    is *not* refused here: as hypha's, the step's context build fails on it (scenario 21)."""
    if not isinstance(instructions, str) or not instructions.strip():
        raise ContextSpecError("instructions must be a non-empty string")
    if budget is not None and not isinstance(budget, ContextBudget):
        raise ContextSpecError(f"context_budget must be a ContextBudget, got {budget!r}")
    if skill_policy is not None and not isinstance(skill_policy, SkillPolicy):
        raise GraphSpecError(f"skill_policy must be a SkillPolicy, got {skill_policy!r}")
    return ContextPlan(
        instructions=instructions, budget=budget or DEFAULT_BUDGET,
        tokenizer=tokenizer_for(tokenizer_ref), tool_ids=tuple(tool_ids),
        skills=_snapshot(skills), request=_skill_request(skills, skill_request),
        policy=skill_policy or SkillPolicy(), memory=_memory(memory))


def _snapshot(skills: SkillRegistry | None) -> SkillRegistry | None:
    if skills is None:
        return None
    if not isinstance(skills, SkillRegistry):
        raise GraphSpecError(f"skills must be a SkillRegistry, got {type(skills).__name__}")
    return SkillRegistry(list(skills))


def _skill_request(skills: SkillRegistry | None, template: SkillRequest | None
                   ) -> SkillRequest:
    if template is None:
        return SkillRequest(attached=skills.ids if skills is not None else ())
    if not isinstance(template, SkillRequest):
        raise GraphSpecError(f"skill_request must be a SkillRequest, got {template!r}")
    if skills is None:
        raise GraphSpecError("skill_request needs skills= (a SkillRegistry)")
    if template.text or template.available_tools:
        raise GraphSpecError("skill_request's text is the question and its available_tools "
                             "the loop's tools: leave both empty")
    for binding in template.attached:  # SkillBindings once the request is made
        if isinstance(binding, SkillBinding):
            skills.get(binding.id, binding.version)
    for skill_id in (*template.required, *template.manual, *(template.allowed or ())):
        skills.get(skill_id)
    return template


def _memory(memory: bool | ReactMemory | None) -> ReactMemory | None:
    if memory is None or memory is False:
        return None
    if memory is True:
        return ReactMemory()
    if not isinstance(memory, ReactMemory):
        raise GraphSpecError(f"memory must be a bool or a ReactMemory, got {memory!r}")
    return memory


# -- one step -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class StepContext:
    """One step's built context and the skills that went into it."""

    built: BuiltContext
    active: tuple[ActiveSkill, ...]


def build_step(ctx: NodeContext, plan: ContextPlan, state: ReactState,
               step: int) -> StepContext:
    """The context of step ``step`` (see the module doc); its events through ``ctx.emit``
    (the memory read is a recorded call). ``build_id``: :func:`build_id`."""
    at = build_id(ctx)
    question = question_text(state.get("question"))
    active = _skills(ctx, plan, question, at, step)
    items = [ContextItem(ContextSource.SYSTEM, "instructions", plan.instructions,
                         required=True),
             *skill_items(active), *_memory_items(ctx, plan, question),
             ContextItem(ContextSource.CONVERSATION, "question", question, role="user",
                         required=True),
             *_observation_items(state)]
    built = build_context(items, budget=plan.budget, tokenizer=plan.tokenizer, build_id=at,
                          purpose=PURPOSE, emit=ctx.emit, step=step, node=ctx.node_id)
    return StepContext(built, tuple(active))


def build_id(ctx: NodeContext) -> str:
    """``<execution id>.context`` (a retried attempt: ``<execution id>:a<n>.context``):
    the skill and context events of one step share it."""
    prefix = ctx.execution_id if ctx.attempt == 1 else f"{ctx.execution_id}:a{ctx.attempt}"
    return f"{prefix}.context"


def question_text(question: JsonValue) -> str:
    """The question as the model reads it (JSON unless a string)."""
    return question if isinstance(question, str) else canonical(question)


def _skills(ctx: NodeContext, plan: ContextPlan, question: str, at: str,
            step: int) -> list[ActiveSkill]:
    if plan.skills is None:
        return []
    request = replace(plan.request, text=question, available_tools=plan.tool_ids)
    selection = select_skills(plan.skills, request)
    try:
        return activate_skills(selection, policy=plan.policy, emit=ctx.emit, build_id=at,
                               token_counter=plan.tokenizer.count)
    except RequiredSkillFailed as exc:
        budget = plan.budget
        ctx.emit(ev.ContextBuildStarted(
            build_id=at, step=step, node=ctx.node_id, purpose=PURPOSE, budget=budget.total,
            budgets={s.value: budget.cap(s) for s in ContextSource},
            candidates={s.value: 0 for s in ContextSource}, tokenizer=plan.tokenizer.name))
        ctx.emit(ev.ContextBuildFailed(build_id=at, step=step, node=ctx.node_id,
                                       error=type(exc).__name__, reason=str(exc)))
        raise




def memory_query(question: str) -> str | None:
    """The query a question recalls by when ``ReactMemory.query`` is None: its distinct
    words joined by ``OR`` (:func:`~hypha_celery.memory.words_query`), as many as the
    memory's query bounds allow (32 terms, 512 characters); None when it has none."""
    return words_query(question, limits=_LIMITS)


def _memory_items(ctx: NodeContext, plan: ContextPlan, question: str) -> list[ContextItem]:
    wanted = plan.memory
    if wanted is None:
        return []
    query = wanted.query if wanted.query is not None else memory_query(question)
    if query is None:
        return []
    hits: list[Recalled] = ctx.recall(query, limit=wanted.limit,
                                      memory_types=wanted.memory_types)
    return [ContextItem(ContextSource.MEMORY, hit.id, hit.text, revision=hit.revision,
                        priority=hit.score) for hit in hits]


def _observation_items(state: ReactState) -> list[ContextItem]:
    """The loop's memory (observations with their iteration) then the last observation
    when it is not its last entry (a finish the verifier sent back): tool results, in
    order, each cut at the builder's :data:`~hypha_celery.context.MAX_ITEM_CHARS`
    characters (a recorded tool output may hold up to 1 MiB of JSON)."""
    entries: list[MemoryEntry] = list(state.get("memory") or [])
    last: Observation | None = state.get("observation")
    if last is not None and not _is_last(entries, last):
        entries.append({"iteration": state.get("iteration"), **last})
    items = []
    for n, entry in enumerate(entries):
        iteration = entry.get("iteration")
        items.append(ContextItem(ContextSource.TOOLS,
                                 f"observation.{iteration if iteration is not None else n}",
                                 canonical(entry)[:MAX_ITEM_CHARS], order=n))
    return items


def _is_last(entries: Sequence[MemoryEntry], observation: Observation) -> bool:
    if not entries:
        return False
    kept = {k: v for k, v in entries[-1].items() if k != "iteration"}
    return kept == dict(observation)
