"""What a context is built from: typed items of five sources, their provenance, and the
token budgets they are assembled under. Callers adapt skills, memory records, messages and
tool results into :class:`ContextItem` s; the builder knows nothing else about them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Literal

from hypha_celery.backends.llm.types import ToolCallJson
from hypha_celery.errors import ContextSpecError

__all__ = ["DEFAULT_TOTAL", "MAX_ITEMS", "MAX_ITEM_CHARS", "MAX_TOTAL", "TOTAL_ORDER",
           "ContextBudget", "ContextItem", "ContextSource", "Provenance", "Revision",
           "TurnRole"]

#: A build's bounds: items offered (all sources), characters of one item's text, tokens.
MAX_ITEMS = 100_000
MAX_ITEM_CHARS = 1_000_000
MAX_TOTAL = 10_000_000
#: ``ContextBudget()``'s total: room for the prompt of an 8k-output call on a 32k model.
DEFAULT_TOTAL = 24_000

Revision = str | int | None
#: Who wrote an item: conversation and tool items are ``user``, ``assistant`` or ``tool``
#: (``system`` is refused there: instructions are the system source's); the role of a
#: system, skill or memory item is ignored (memory is rendered as data, whatever it says).
TurnRole = Literal["system", "user", "assistant", "tool"]


class ContextSource(StrEnum):
    """The sources in the order they appear in the built context."""

    SYSTEM = "system"
    SKILLS = "skills"
    MEMORY = "memory"
    CONVERSATION = "conversation"
    TOOLS = "tools"


#: Sources given up first when the total budget is short: memory, then the oldest
#: conversation, then skills, then tool results; system last.
TOTAL_ORDER: tuple[ContextSource, ...] = (ContextSource.MEMORY, ContextSource.CONVERSATION,
                                          ContextSource.SKILLS, ContextSource.TOOLS,
                                          ContextSource.SYSTEM)


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where an included item came from: its source, id and revision."""

    source: ContextSource
    id: str
    revision: Revision = None


@dataclass(frozen=True, slots=True)
class ContextItem:
    """One candidate for the context.

    ``priority``: rank within system, skills (a skill's priority) and memory (the
    retrieval score): higher first. ``order``: the caller's pinned key -- the position in
    time of a conversation or tool item (a sequence number or timestamp), a tie-break
    after ``priority`` elsewhere. ``required``: never dropped (a budget too small for the
    required items raises ``BudgetTooSmall``). ``group``: conversation items sharing a
    group are kept or dropped together; an assistant item's ``tool_calls`` and the
    ``tool`` items answering them (``call_id``) are one group without saying so.
    """

    source: ContextSource
    id: str
    text: str
    revision: Revision = None
    role: TurnRole | None = None
    priority: float = 0
    order: float = 0
    required: bool = False
    group: str | None = None
    call_id: str | None = None
    tool_calls: tuple[ToolCallJson, ...] = field(default=(), hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.source, ContextSource):
            object.__setattr__(self, "source", _source(self.source))
        if not isinstance(self.id, str) or not self.id:
            raise ContextSpecError(f"a {self.source} item needs a non-empty id")
        if not isinstance(self.text, str):
            raise ContextSpecError(f"item {self.id!r}: text must be a string")
        if len(self.text) > MAX_ITEM_CHARS:
            raise ContextSpecError(f"item {self.id!r}: {len(self.text)} characters, more "
                                   f"than {MAX_ITEM_CHARS}")
        for name in ("priority", "order"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) \
                    or not math.isfinite(value):
                raise ContextSpecError(f"item {self.id!r}: {name} must be a finite number")
        if self.revision is not None and (isinstance(self.revision, bool)
                                          or not isinstance(self.revision, str | int)):
            raise ContextSpecError(f"item {self.id!r}: revision must be str, int or None")
        if self.source is ContextSource.CONVERSATION and self.role is None:
            raise ContextSpecError(f"conversation item {self.id!r} needs a role (user, "
                                   "assistant or tool)")
        if self.role not in (None, "system", "user", "assistant", "tool") or (
                self.role == "system" and self.source in _TURNS):
            raise ContextSpecError(f"{self.source} item {self.id!r}: role must be user, "
                                   "assistant or tool")

    @property
    def provenance(self) -> Provenance:
        return Provenance(self.source, self.id, self.revision)


def _source(value: object) -> ContextSource:
    try:
        return ContextSource(str(value))
    except ValueError:
        raise ContextSpecError(f"unknown context source {value!r}; one of "
                               f"{', '.join(ContextSource)}") from None


_TURNS = frozenset({ContextSource.CONVERSATION, ContextSource.TOOLS})


@dataclass(frozen=True, slots=True)
class ContextBudget:
    """Token budgets: ``total`` for the whole prompt (framing included), and optional
    ``per_source`` caps, each at most ``total`` (their sum may exceed it: a source may use
    what the others leave). A source without a cap is held by the total only.
    ``truncate``: sources whose last item may be cut at a token boundary instead of
    dropped when it alone does not fit (none by default)."""

    total: int = DEFAULT_TOTAL
    per_source: Mapping[ContextSource, int] = field(default_factory=dict)
    truncate: frozenset[ContextSource] = frozenset()

    def __post_init__(self) -> None:
        _tokens("total", self.total)
        if self.total < 1:
            raise ContextSpecError(f"the total budget must be at least 1, not {self.total}")
        caps: dict[ContextSource, int] = {}
        for key, value in self.per_source.items():
            source = _source(key)
            _tokens(f"the {source} budget", value)
            if value > self.total:
                raise ContextSpecError(f"the {source} budget {value} exceeds the total "
                                       f"{self.total}")
            caps[source] = value
        ordered = {s: caps[s] for s in ContextSource if s in caps}
        object.__setattr__(self, "per_source", MappingProxyType(ordered))
        object.__setattr__(self, "truncate", frozenset(_source(s) for s in self.truncate))

    def cap(self, source: ContextSource) -> int:
        """The tokens ``source`` may use (its cap, else the total)."""
        return self.per_source.get(source, self.total)

    @classmethod
    def split(cls, total: int = DEFAULT_TOTAL) -> ContextBudget:
        """Documented shares of ``total``: system 15 %, skills 20 %, memory 15 %,
        conversation 50 %, tools 25 % (125 % in all: the total decides at the end)."""
        shares = {ContextSource.SYSTEM: 15, ContextSource.SKILLS: 20, ContextSource.MEMORY: 15,
                  ContextSource.CONVERSATION: 50, ContextSource.TOOLS: 25}
        return cls(total, {s: total * pct // 100 for s, pct in shares.items()})


def _tokens(what: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ContextSpecError(f"{what} must be an integer number of tokens, not {value!r}")
    if value < 0 or value > MAX_TOTAL:
        raise ContextSpecError(f"{what} must be between 0 and {MAX_TOTAL}, not {value}")
