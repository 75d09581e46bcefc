"""The context builder (issue 26): what the model sees at each call.

System instructions, active skills, retrieved memory, the conversation and tool results,
given as typed :class:`ContextItem` s, assembled by :func:`build_context` under per-source
and total token budgets (:class:`ContextBudget`) with a stable order, deduplication and
deterministic compaction; every included item keeps its :class:`Provenance`. Memory is
rendered as data in a user message, never as an instruction. Tokens are counted offline
(:func:`tokenizer_for`: OpenAI's BPE encodings from the ``tokens`` extra, else the
:class:`EstimatorTokenizer`). docs/context.md.
"""

from hypha_celery.context._build import BuiltContext, Emit, IncludedItem, build_context
from hypha_celery.context._items import (
    DEFAULT_TOTAL,
    MAX_ITEM_CHARS,
    MAX_ITEMS,
    MAX_TOTAL,
    TOTAL_ORDER,
    ContextBudget,
    ContextItem,
    ContextSource,
    Provenance,
    Revision,
    TurnRole,
)
from hypha_celery.context._select import MEMORY_HEADER, SKILL_HEAD
from hypha_celery.context._skills import skill_items
from hypha_celery.context._tokens import (
    PER_MESSAGE,
    REPLY_PRIMING,
    BpeTokenizer,
    EstimatorTokenizer,
    Tokenizer,
    TokenizerFactory,
    register_tokenizer,
    tokenizer_for,
)

__all__ = [
    "DEFAULT_TOTAL", "MAX_ITEMS", "MAX_ITEM_CHARS", "MAX_TOTAL", "MEMORY_HEADER",
    "PER_MESSAGE", "REPLY_PRIMING", "SKILL_HEAD", "TOTAL_ORDER", "BpeTokenizer",
    "BuiltContext", "ContextBudget", "ContextItem", "ContextSource", "Emit",
    "EstimatorTokenizer", "IncludedItem", "Provenance", "Revision", "Tokenizer",
    "TokenizerFactory", "TurnRole", "build_context", "register_tokenizer", "skill_items",
    "tokenizer_for",
]
