"""Verifiers: is the loop done once this observation is in?

An observation is a dict with ``source``: ``model`` (the model's ``finish``, with
``output``), ``tool`` (``tool``, ``status``, ``output``, ``code``, ``message``),
``policy`` (a call the policy check stopped: ``status`` ``denied``) or ``human`` (a
person approved the model's ``human_review`` request: ``status`` ``approved``, ``by``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from hypha_celery.jsontypes import JsonValue
from hypha_celery.react._state import Observation

__all__ = ["Verifier", "answer_of", "model_decides", "tool_answers"]

#: ``verifier(observation) -> done``.
Verifier = Callable[[Observation], bool]


def _finished(observation: Observation) -> bool:
    return observation.get("source") == "model" and observation.get("status") == "finish"


def tool_answers(observation: Observation) -> bool:
    """hypha's ``DefaultVerifier``: the model's finish, or a completed tool call, answers
    (its output is the answer); a denied or failed call, or a person's approval, goes
    back to the model."""
    completed = observation.get("source") == "tool" and observation.get("status") == "completed"
    return completed or _finished(observation)


def model_decides(observation: Observation) -> bool:
    """Only the model's finish ends the loop: every tool result goes back to the model."""
    return _finished(observation)


def answer_of(observation: Observation) -> JsonValue:
    """The answer an observation gives: its ``output`` when it is a finish or a completed
    call, else the observation itself (a loop stopped by its budget on a denial)."""
    if observation.get("status") in ("finish", "completed"):
        return observation.get("output")
    return cast(JsonValue, dict(observation))  # an Observation is JSON
