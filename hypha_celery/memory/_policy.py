"""The write policy: what a memory write must satisfy, checked in hypha's order."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from hypha_celery.errors import MemoryScopeRequired, MemoryWriteDenied
from hypha_celery.memory._types import MemoryProvenance, MemoryScope, MemoryType

__all__ = ["DEFAULT_POLICY", "WriteDecision", "WritePolicy", "WriteRequest", "WriteVerdict",
           "check_write"]


class WriteVerdict(StrEnum):
    ALLOW = "allow"
    DENY = "deny"
    REVIEW = "review"


@dataclass(frozen=True, slots=True)
class WriteDecision:
    """What a policy hook decided, and why (the reason is recorded in the rejection
    event: keep it free of content)."""

    verdict: WriteVerdict
    reason: str = ""


@dataclass(frozen=True, slots=True)
class WriteRequest:
    """What a policy hook sees of a write: references and sizes, not the text."""

    scope: MemoryScope
    memory_type: MemoryType
    operation_id: str
    record_id: str | None
    text_bytes: int
    tags: tuple[str, ...]
    provenance: MemoryProvenance | None


@dataclass(frozen=True, slots=True)
class WritePolicy:
    """Which writes may happen.

    ``allow_long_term``: types other than ``working`` may be written; ``require_provenance``:
    a write names a run or a source; ``deny_types`` are refused, ``review_types`` need a
    human review (refused with ``review=True``); ``hook`` decides last (None: allow)."""

    allow_long_term: bool = True
    require_provenance: bool = False
    deny_types: frozenset[MemoryType] = frozenset()
    review_types: frozenset[MemoryType] = frozenset()
    hook: Callable[[WriteRequest], WriteDecision | None] | None = None


#: The default policy: every type allowed, no provenance required, no hook.
DEFAULT_POLICY = WritePolicy()


def check_write(policy: WritePolicy, request: WriteRequest | None) -> None:
    """hypha's order: a scope boundary exists, the policy does not deny, no review is
    needed, provenance present if required, ``allow_long_term`` for a type other than
    ``working``. Raises :class:`MemoryScopeRequired` / :class:`MemoryWriteDenied`."""
    if request is None:
        raise MemoryScopeRequired("a memory write needs a scope with a user_id "
                                  "(MEMORY_SCOPE_REQUIRED)")
    decision = policy.hook(request) if policy.hook is not None else None
    kind = request.memory_type
    if kind in policy.deny_types:
        raise MemoryWriteDenied(f"the write policy denies {kind.value} memory")
    if decision is not None and decision.verdict is WriteVerdict.DENY:
        raise MemoryWriteDenied(decision.reason or "the write policy denied the write")
    if kind in policy.review_types:
        raise MemoryWriteDenied(f"{kind.value} memory needs a human review", review=True)
    if decision is not None and decision.verdict is WriteVerdict.REVIEW:
        raise MemoryWriteDenied(decision.reason or "the write needs a human review",
                                review=True)
    if policy.require_provenance and (request.provenance is None or (
            request.provenance.run_id is None and request.provenance.source is None)):
        raise MemoryWriteDenied("the write policy requires provenance (a run_id or a "
                                "source)")
    if not policy.allow_long_term and kind is not MemoryType.WORKING:
        raise MemoryWriteDenied(f"the write policy allows working memory only, not "
                                f"{kind.value} (allow_long_term=False)")
