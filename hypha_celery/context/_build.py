"""``build_context``: the candidates of every source assembled into the messages of one
model call under token budgets, with provenance, counts, a hash and events (never
content)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TypedDict

from hypha_celery.backends.llm.types import Message
from hypha_celery.context._items import (
    MAX_ITEMS,
    TOTAL_ORDER,
    ContextBudget,
    ContextItem,
    ContextSource,
    Provenance,
)
from hypha_celery.context._select import (
    CHRONOLOGICAL,
    MEMORY_HEADER,
    STRATEGY,
    Candidates,
    Costs,
    Selection,
    Unit,
    candidates,
    fixed_cost,
    piece,
    required_tokens,
    select,
    turn_role,
    turn_text,
    units,
)
from hypha_celery.context._tokens import REPLY_PRIMING, Tokenizer
from hypha_celery.errors import BudgetTooSmall, ContextSpecError
from hypha_celery.events.envelope import canonical
from hypha_celery.events.payloads import (
    ContextBuildCompleted,
    ContextBuildFailed,
    ContextBuildStarted,
    ContextCompacted,
    Payload,
)

__all__ = ["BuiltContext", "Emit", "IncludedItem", "build_context"]

Emit = Callable[[Payload], None]
Items = Iterable[ContextItem] | Mapping[ContextSource, Iterable[ContextItem]]


@dataclass(frozen=True, slots=True)
class IncludedItem:
    """An item in the built context: the item as included (``truncated``: its text was
    cut to fit), its tokens (the share of framing it alone causes included)."""

    item: ContextItem
    tokens: int
    truncated: bool = False

    @property
    def provenance(self) -> Provenance:
        return self.item.provenance


@dataclass(frozen=True, slots=True)
class BuiltContext:
    """The messages of one model call (OpenAI chat shape, hypha's neutral ``Message``)
    and what went into them. ``tokens``: the tokenizer's count of ``messages`` as sent
    (framing and reply priming included); ``tokens_by_source``: what each source was
    charged under its budget (their sum plus the reply priming is at least ``tokens``).
    ``compacted``: the sources that lost or cut items to fit; ``dropped``: items they lost;
    ``deduplicated``: duplicates removed before. ``context_hash``: ``sha256:`` of the
    messages' canonical JSON -- the same inputs give the same hash on every worker."""

    build_id: str
    messages: tuple[Message, ...]
    included: tuple[IncludedItem, ...]
    tokens: int
    tokens_by_source: Mapping[ContextSource, int]
    items_by_source: Mapping[ContextSource, int]
    dropped: int
    deduplicated: int
    compacted: tuple[ContextSource, ...]
    context_hash: str
    tokenizer: str

    @property
    def provenance(self) -> tuple[Provenance, ...]:
        return tuple(i.provenance for i in self.included)

    def split_system(self) -> tuple[str, list[Message]]:
        """Anthropic's shape: the system messages' text joined by a blank line, and the
        other messages."""
        system = [m.get("content") or "" for m in self.messages if m["role"] == "system"]
        return "\n\n".join(system), [m for m in self.messages if m["role"] != "system"]


def build_context(items: Items, *, budget: ContextBudget, tokenizer: Tokenizer, build_id: str,
                  purpose: str, emit: Emit | None = None, step: int | None = None,
                  node: str | None = None) -> BuiltContext:
    """Assemble ``items`` (one iterable, or one per source) under ``budget``.

    Sources appear in the order system, skills, memory, conversation, tools. Each source
    is ordered, deduplicated and compacted to its cap; then, while the whole exceeds
    ``budget.total``, sources give up items in :data:`TOTAL_ORDER`. Required items are
    never dropped: when they alone do not fit a cap or the total, ``BudgetTooSmall``
    (after a ``context.build.failed`` event). ``emit`` receives
    ``context.build.started``, one ``context.compacted`` per compacted source and
    ``context.build.completed``: counts, budgets and hashes, never content.
    """
    send = emit or _ignore
    at = _At(build_id=build_id, step=step, node=node)
    by_source = _by_source(items)
    send(ContextBuildStarted(
        **at, purpose=purpose, budget=budget.total,
        budgets={s.value: budget.cap(s) for s in ContextSource},
        candidates={s.value: len(by_source[s]) for s in ContextSource},
        tokenizer=tokenizer.name))
    costs = Costs(tokenizer)
    found = {s: candidates(s, by_source[s]) for s in ContextSource}
    all_units = {s: units(found[s], costs) for s in ContextSource}
    try:
        chosen = _fit(budget, all_units, costs)
    except BudgetTooSmall as exc:
        send(ContextBuildFailed(**at, error=type(exc).__name__, reason=str(exc)))
        raise
    built = _built(build_id, found, chosen, costs)
    for source in built.compacted:
        before = found[source]
        send(ContextCompacted(
            **at, source=source.value, strategy=_strategy(source, before, chosen[source]),
            items_before=len(before.items), items_after=len(chosen[source].items),
            tokens_before=_all_tokens(source, all_units[source], costs),
            tokens_after=chosen[source].tokens))
    send(ContextBuildCompleted(
        **at, items=len(built.included), tokens=built.tokens,
        tokens_by_source={s.value: n for s, n in built.tokens_by_source.items()},
        items_by_source={s.value: n for s, n in built.items_by_source.items()},
        dropped=built.dropped, compacted=len(built.compacted),
        context_hash=built.context_hash))
    return built


class _At(TypedDict):
    build_id: str
    step: int | None
    node: str | None


def _ignore(payload: Payload) -> None:
    return None


def _by_source(items: Items) -> dict[ContextSource, list[ContextItem]]:
    out: dict[ContextSource, list[ContextItem]] = {s: [] for s in ContextSource}
    if isinstance(items, Mapping):
        for key, given in items.items():
            source = ContextSource(key) if key in set(ContextSource) else None
            if source is None:
                raise ContextSpecError(f"unknown context source {key!r}")
            for item in given:
                if item.source is not source:
                    raise ContextSpecError(f"item {item.id!r} is a {item.source} item, "
                                           f"given as {source}")
                out[source].append(item)
    else:
        for item in items:
            if not isinstance(item, ContextItem):
                raise ContextSpecError(f"a ContextItem is needed, not {type(item).__name__}")
            out[item.source].append(item)
    total = sum(len(v) for v in out.values())
    if total > MAX_ITEMS:
        raise ContextSpecError(f"{total} context items, more than {MAX_ITEMS}")
    return out


# -- fitting ----------------------------------------------------------------------------------
def _fit(budget: ContextBudget, all_units: Mapping[ContextSource, Sequence[Unit]],
         costs: Costs) -> dict[ContextSource, Selection]:
    """Each source under its cap, then the whole under the total (sources in
    :data:`TOTAL_ORDER` give up what they must, never their required items)."""
    floors = {s: required_tokens(s, all_units[s], costs) for s in ContextSource}
    for source in ContextSource:
        if floors[source] > budget.cap(source):
            raise BudgetTooSmall(source.value, floors[source], budget.cap(source))
    needed = sum(floors.values()) + REPLY_PRIMING
    if needed > budget.total:
        raise BudgetTooSmall("total", needed, budget.total)
    chosen = {s: select(s, all_units[s], budget.cap(s), costs, s in budget.truncate)
              for s in ContextSource}
    excess = sum(c.tokens for c in chosen.values()) + REPLY_PRIMING - budget.total
    for source in TOTAL_ORDER:
        if excess <= 0:
            break
        cap = max(floors[source], chosen[source].tokens - excess)
        if cap < chosen[source].tokens:
            smaller = select(source, all_units[source], cap, costs, source in budget.truncate)
            excess -= chosen[source].tokens - smaller.tokens
            chosen[source] = smaller
    return chosen


def _all_tokens(source: ContextSource, all_units: Sequence[Unit], costs: Costs) -> int:
    return sum(u.cost for u in all_units) + (fixed_cost(source, costs) if all_units else 0)


def _strategy(source: ContextSource, before: Candidates, chosen: Selection) -> str:
    """How ``source`` was compacted: its drop strategy, ``truncate``, or both."""
    dropped = len(chosen.items) < len(before.items)
    if chosen.truncated is None:
        return STRATEGY[source]
    return f"{STRATEGY[source]}+truncate" if dropped else "truncate"


# -- rendering --------------------------------------------------------------------------------
def _exact(messages: Sequence[Message], costs: Costs) -> int:
    """``tokenizer.count_messages(messages)`` with the build's counts reused (each
    message framed by ``frame(role)``, its other strings counted, the reply priming)."""
    total = REPLY_PRIMING
    for message in messages:
        total += costs.frame(message["role"]) + costs.count(message.get("content") or "")
        if "tool_call_id" in message:
            total += costs.count(message["tool_call_id"])
        if "tool_calls" in message:
            total += costs.count(canonical(message["tool_calls"]))
    return total


def _built(build_id: str, found: Mapping[ContextSource, Candidates],
           chosen: Mapping[ContextSource, Selection], costs: Costs) -> BuiltContext:
    tokenizer = costs.tokenizer
    messages: list[Message] = []
    included: list[IncludedItem] = []
    for source in ContextSource:
        selection = chosen[source]
        messages.extend(_messages(source, selection.items))
        included.extend(IncludedItem(item, cost, item is selection.truncated)
                        for item, cost in zip(selection.items, selection.costs, strict=True))
    compacted = tuple(s for s in ContextSource
                      if len(chosen[s].items) < len(found[s].items)
                      or chosen[s].truncated is not None)
    dropped = sum(len(found[s].items) - len(chosen[s].items) for s in ContextSource)
    digest = hashlib.sha256(canonical(messages).encode()).hexdigest()
    return BuiltContext(
        build_id=build_id, messages=tuple(messages), included=tuple(included),
        tokens=_exact(messages, costs),
        tokens_by_source=MappingProxyType({s: chosen[s].tokens for s in ContextSource}),
        items_by_source=MappingProxyType({s: len(chosen[s].items) for s in ContextSource}),
        dropped=dropped, deduplicated=sum(f.removed for f in found.values()),
        compacted=compacted, context_hash=f"sha256:{digest}", tokenizer=tokenizer.name)


def _messages(source: ContextSource, items: Sequence[ContextItem]) -> list[Message]:
    if not items:
        return []
    if source in CHRONOLOGICAL:
        return [_turn(i) for i in items]
    if source is not ContextSource.MEMORY:  # instructions: a system message each
        return [{"role": "system", "content": piece(i)} for i in items]
    # memory is data: one user message, each record a JSON line -- never an instruction
    return [{"role": "user", "content": MEMORY_HEADER + "".join(piece(i) for i in items)}]


def _turn(item: ContextItem) -> Message:
    role = turn_role(item)
    message: Message = {"role": "user", "content": turn_text(item)}
    if role == "assistant":
        message["role"] = "assistant"
        if item.tool_calls:
            message["tool_calls"] = list(item.tool_calls)
    elif role == "tool" and item.call_id:
        message["role"] = "tool"
        message["tool_call_id"] = item.call_id
    return message
