"""The support-triage pack's code: small deterministic nodes (no LLM) and the handler
of its ``billing.refund`` tool, which books refunds in an in-memory ledger."""

from __future__ import annotations

import threading
from typing import Any

#: Intents found by keywords, first match wins; otherwise a question or "other".
INTENTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("close_account", ("close my account", "delete my account", "cancel my account")),
    ("refund", ("refund", "money back", "charged twice", "double charge")),
    ("complaint", ("unacceptable", "terrible", "angry", "complaint")),
)
QUESTION_WORDS = ("how ", "what ", "where ", "why ", "when ", "can ", "do ")

#: The refunds ``billing.refund`` booked in this process (a stand-in for a billing API).
LEDGER: list[dict[str, str]] = []
_ledger_lock = threading.Lock()


def classify(state: dict[str, Any], input: dict[str, Any]) -> dict[str, Any]:
    """``{"intent": close_account | refund | complaint | question | other}``."""
    text = " ".join(input["text"].lower().split())
    intent = next((name for name, words in INTENTS if any(w in text for w in words)), None)
    if intent is None:
        asks = text.endswith("?") or text.startswith(QUESTION_WORDS)
        intent = "question" if asks else "other"
    return {"intent": intent}


def answer(state: dict[str, Any], input: dict[str, Any]) -> dict[str, Any]:
    """The reply from the knowledge-base search (``kb``, a tool result)."""
    articles = (state.get("kb") or {}).get("output") or []
    if not articles:
        return {"reply": {"kind": "escalation", "reason": "no_article",
                          "message": "We could not find an answer; a person will follow up."}}
    best = articles[0]
    return {"reply": {"kind": "answer", "message": f"{best['title']}: {best['summary']}",
                      "sources": [a["id"] for a in articles]}}


def confirm_refund(state: dict[str, Any], input: dict[str, Any]) -> dict[str, Any]:
    """The reply once ``billing.refund`` completed (``refund``, a tool result)."""
    booked = state["refund"]["output"]
    return {"reply": {"kind": "refund", "refund_id": booked["refund_id"],
                      "message": f"Refund {booked['refund_id']} for order {booked['order']} "
                                 "is on its way (3-5 business days)."}}


def escalate(state: dict[str, Any], input: dict[str, Any]) -> dict[str, Any]:
    """Hand the ticket to a person; ``reason`` says why (a tool's denial code, or the
    intent)."""
    stopped = [r for r in (state.get("refund"), state.get("closure"))
               if r and r.get("status") != "completed"]
    reason = stopped[0]["code"] or stopped[0]["status"] if stopped else state.get("intent")
    return {"reply": {"kind": "escalation", "reason": str(reason),
                      "message": "A person from our team will follow up within one "
                                 "business day."}}


def refund(args: dict[str, Any]) -> dict[str, str]:
    """``billing.refund``: book a refund of ``args["order"]``; returns its id."""
    with _ledger_lock:
        booked = {"refund_id": f"RF-{len(LEDGER) + 1:04d}", "order": args["order"]}
        LEDGER.append(booked)
    return dict(booked)
