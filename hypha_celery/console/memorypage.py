"""The console's memory page (``/memory``): one user's governed memory records, or a
full-text search over them (``?user=U&q=...``). A user's console session sees its own
memory only (``user`` naming another user shows nothing, as for a user without records);
an operator names the user. Text is shown only with the content switch on; otherwise
ids, types, revisions, tags and sizes."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from hypha_celery.client.memory import ScopedMemory
from hypha_celery.console.filters import BadQuery
from hypha_celery.errors import InvalidMemoryQuery, MemoryNotFound, MemoryScopeRequired
from hypha_celery.memory import MemoryManager, MemoryRecord, MemoryScope

if TYPE_CHECKING:
    from hypha_celery.console.app import Console
    from hypha_celery.console.pages import Endpoint

__all__ = ["MEMORY_SHOWN", "MemoryLine", "memory_page"]

#: Records the page lists (oldest first) or a search returns, at most.
MEMORY_SHOWN = 100


@dataclass(frozen=True, slots=True)
class MemoryLine:
    id: str
    memory_type: str
    revision: int
    tags: str
    chars: int
    updated: str
    score: str
    text: str | None  # None: content hidden


def _line(record: MemoryRecord, score: float | None, content: bool) -> MemoryLine:
    return MemoryLine(record.id, record.memory_type.value, record.revision,
                      ", ".join(record.tags), len(record.text),
                      time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(record.updated_at)),
                      "" if score is None else f"{score:.3f}",
                      record.text if content else None)


def _param(request: Request, name: str, limit: int) -> str:
    value = request.query_params.get(name, "").strip()
    if len(value) > limit or not value.isprintable():
        raise BadQuery(name, f"at most {limit} printable characters")
    return value


def memory_page(console: Console) -> Endpoint:
    def page(request: Request) -> Response:
        hypha = console.scoped(request)
        owner = request.state.principal.owner
        user = _param(request, "user", 200) or (owner or "")
        query = _param(request, "q", 512)
        content = console.config.show_content
        lines: list[MemoryLine] = []
        if user:
            lines = _lines(hypha.memory, user, query, content)
        return console.render(request, "memory.html", {
            "user": user, "q": query, "lines": lines, "limit": MEMORY_SHOWN,
            "operator": owner is None, "show_content": content})
    return page


def _lines(memory: MemoryManager | ScopedMemory, user: str, query: str,
           content: bool) -> list[MemoryLine]:
    try:
        scope = MemoryScope(user)
    except MemoryScopeRequired as exc:
        raise BadQuery("user", str(exc)) from None
    try:
        if query:
            return [_line(h.record, h.score, content)
                    for h in memory.search(scope, query, limit=MEMORY_SHOWN)]
        return [_line(r, None, content) for r in memory.list(scope, limit=MEMORY_SHOWN)]
    except InvalidMemoryQuery as exc:
        raise BadQuery("q", str(exc)) from None
    except MemoryNotFound:  # another user's memory, as a user's session sees it: nothing
        return []
