"""Items for the context tests."""

from __future__ import annotations

from hypha_celery.context import ContextItem, ContextSource, TurnRole

S = ContextSource


def system(id: str, text: str, **kw: object) -> ContextItem:
    return ContextItem(S.SYSTEM, id, text, **kw)  # type: ignore[arg-type]


def skill(id: str, text: str, priority: float = 0, **kw: object) -> ContextItem:
    return ContextItem(S.SKILLS, id, text, priority=priority, **kw)  # type: ignore[arg-type]


def memory(id: str, text: str, score: float = 0, **kw: object) -> ContextItem:
    return ContextItem(S.MEMORY, id, text, priority=score, **kw)  # type: ignore[arg-type]


def turn(seq: int, text: str, role: TurnRole = "user", **kw: object) -> ContextItem:
    return ContextItem(S.CONVERSATION, f"c{seq}", text, role=role, order=seq,
                       **kw)  # type: ignore[arg-type]


def tool(seq: int, text: str, **kw: object) -> ContextItem:
    return ContextItem(S.TOOLS, f"t{seq}", text, order=seq, **kw)  # type: ignore[arg-type]


def sample() -> list[ContextItem]:
    return [system("sys", "You are a careful assistant."),
            skill("pdf", "Use the pdf tools for attachments.", priority=2, revision="1.0"),
            skill("calc", "Use the calculator for arithmetic.", priority=5),
            memory("m1", "The user prefers metric units.", score=0.9, revision=3),
            memory("m2", "The user lives in Lyon.", score=0.7, revision=1),
            turn(1, "Hello"), turn(2, "Hi, how can I help?", "assistant"),
            turn(3, "How far is Paris?"),
            tool(4, '{"km": 465}')]
