"""The loop's variables (the run state the ReAct nodes read and write), typed.

Every key but ``question`` (the user's, from the run input) is written by the loop's own
nodes; each node returns the keys it changes (a partial :class:`ReactState`). Values that
are the model's or a tool's stay JSON (:data:`~hypha_celery.jsontypes.JsonValue`).
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

from hypha_celery.backends.llm.types import Message
from hypha_celery.jsontypes import JsonObject, JsonValue
from hypha_celery.react._actions import Action
from hypha_celery.tools._node import ToolSummary

__all__ = ["CatalogEntry", "MemoryEntry", "Observation", "ReactResult", "ReactState",
           "ReasonRequest", "Verdict"]

ObservationSource = Literal["model", "tool", "policy", "human"]


class Observation(TypedDict, total=False):
    """What the last action gave: ``source`` ``model`` (a finish: ``output``), ``tool``
    (``tool``, ``status``, ``output``, ``code``, ``message``), ``policy`` (a denial:
    ``status`` ``denied``) or ``human`` (an approval: ``status`` ``approved``, ``by``)."""

    source: ObservationSource
    status: str | None
    tool: str | None
    output: JsonValue
    code: str | None
    message: str | None
    by: str | None
    review_id: str | None
    reason: str | None


class MemoryEntry(Observation, total=False):
    """An observation kept in ``variables.memory``, with its iteration."""

    iteration: int | None


class Verdict(TypedDict):
    """``variables.policy``: may the selected tool run, must a person approve it first,
    must it run at most once."""

    allowed: bool
    requires_review: bool
    reason: str
    at_most_once: bool
    code: str | None


class ReactResult(TypedDict):
    """``variables.result``, the run's result."""

    answer: JsonValue
    iterations: int


class CatalogEntry(TypedDict):
    """A tool as the model sees it in a reasoning request."""

    id: str
    description: str
    side_effect: str
    input_schema: JsonObject


class ReasonRequest(TypedDict):
    """One reasoning step's request to the provider (recorded as a hash only).
    ``messages``: the step's built context (instructions, skills, the user's memory as
    data, the question, the observations so far) -- what a real model is sent; the other
    keys are the loop's variables as they were, for scripted providers."""

    question: JsonValue
    tools: list[CatalogEntry]
    memory: list[MemoryEntry]
    observation: Observation | None
    iteration: int
    max_iterations: int
    messages: NotRequired[list[Message]]


class ReactState(TypedDict, total=False):
    """The loop's variables; a node's return value holds the ones it changes."""

    question: JsonValue
    iteration: int
    memory: list[MemoryEntry]
    observation: Observation | None
    done: bool
    stop: Literal["finish", "verified", "max_iterations"]
    result: ReactResult
    reply: JsonValue
    action: Action
    policy: Verdict
    tool_result: ToolSummary
