"""Harnessed ReAct: hypha's ReAct loop as a workflow whose FSM runs in the coordinator.

::

    from hypha_celery.react import MockProvider, react_graph

    provider = MockProvider([{"action": "tool", "tool": "kb.search", "input": {"q": "x"}}])
    hypha.register(react_graph(provider, tools))             # a ToolRegistry
    hypha.start("react", {"question": "what is x?"}).wait()  # {"answer": ..., "iterations": 1}

**States and phases.** :func:`react_workflow` is hypha's Harness FSM: ``Idle →
RunInitialized → ContextBuilt → Reasoning → ActionSelected → PolicyChecked → Acting →
ObservationRecorded → Verifying → MemorySync → Completed`` (:data:`HAPPY_PATH`, a run with
one tool call), plus the recovery envelope every workflow gets (``HumanReview``,
``Failed``, ...). Each phase is the node of one state: ``observe`` (ContextBuilt; Idle and
RunInitialized are routing-only), ``reason`` (Reasoning), ``select_action``
(ActionSelected), ``policy_check`` (PolicyChecked), ``act`` (Acting or ActingEffect),
``observe_result`` (ObservationRecorded), ``verify`` (Verifying), ``memory_sync``
(MemorySync); ``complete`` is the terminal ``Completed``, whose result is
``variables.result`` = ``{"answer", "iterations"}``. Guards read ``variables.*`` only:

* ``ActionSelected``: a ``finish`` goes to ``Verifying`` (the finish is the observation);
  ``human_review`` goes to ``ObservationRecorded``, whose review (``when`` the action is
  ``human_review``) parks the run in ``HumanReview``: approved, the approval is the
  observation; rejected, the run fails ``review_rejected``; a ``tool`` goes on to
  ``PolicyChecked``.
* ``PolicyChecked``: denied (or an unknown tool) goes to ``Verifying`` (the denial is the
  observation, recorded ``tool.call.rejected``); else ``ActingEffect`` for an
  ``external_effect`` / ``irreversible`` tool, ``Acting`` for the others. Both have a
  review ``when`` ``variables.policy.requires_review == true`` (the policy's
  ``require_review``, or the tool spec's ``human_review``): the run parks *before* the
  tool runs, and the approval is what the governed runner's approval step accepts.
* ``Verifying``: not done, and the observation is the model's own (a finish the verifier
  refused: nothing to remember), back to ``Reasoning``; else ``MemorySync``, then
  ``Completed`` when done, ``Reasoning`` when not.

**act and act_effect.** A node's side-effect level is fixed, and an at-most-once node
(``Node(side_effect="external_effect")``: early ack, never silently re-executed; a worker
that dies mid-call leaves the run quarantined for a person) must be chosen before the
message is sent. So there are two nodes over one function, each bound to its own state,
and ``PolicyChecked`` picks the state by the selected tool's level
(``variables.policy.at_most_once``); a read / write tool keeps at-least-once delivery and
the happy path keeps hypha's ``Acting``. Each node refuses a tool of the other kind.

**Budgets.** ``max_iterations`` (default 4, hypha's) counts model calls in
``variables.iteration``; once reached, ``verify`` ends the loop as a finish with the last
observation (``variables.stop == "max_iterations"``; the answer is the observation's
output, or the observation itself when it has none, e.g. a denial). The Graph's
``max_steps`` bounds node steps over the whole loop (default :func:`budget_steps`: one
``observe`` step plus :data:`STEPS_PER_ITERATION` per iteration); a smaller one ends the
run ``max_steps_exceeded``.

**Verifying.** ``verify=`` is a :data:`Verifier`. :func:`tool_answers` (default, hypha's
``DefaultVerifier``) is done on the model's finish or on a completed tool call, whose
output is the answer; a denied or failed call, or a person's approval, goes back to the
model. :func:`model_decides` is done only on the model's finish.

**Context.** Before its model call, each ``reason`` step builds what the model sees
(:func:`~hypha_celery.context.build_context`): the instructions (``instructions=``), the
skills bound to the loop and selected for the question (``skills=``,
``skill_request=``: ``skill.selected | loaded | failed | completed``), the run's user's
memory recalled for the question (``memory=True`` or a :class:`ReactMemory`:
``memory.read.*``, one recorded read per step, rendered as data, never as an
instruction), the question and the observations so far, under ``context_budget``
(default :data:`DEFAULT_BUDGET`; ``context.build.*``, ``context.compacted``);
``inference.completed`` carries the built context's hash. A required skill that fails
fails the step before any inference (``RequiredSkillFailed``, hypha's scenario 21
message). A re-execution builds the same context from the recorded memory read.
docs/context.md, "ReAct".

**Model calls.** ``reason`` calls ``ctx.model(name, provider, request)``: recorded as
``model.call.*`` (the request, which holds the question, the tool catalog, the memory,
the latest observation and the built context's ``messages``, only as a hash), replayed
from the recording. A :data:`Provider` is ``request -> output`` (JSON);
:class:`MockProvider` is a scripted one on :class:`~hypha_celery.backends.MockBackend`;
:func:`parse_action` reads the output.
:class:`LLMProvider` runs the loop on a real model (``LLMProvider("openai:gpt-4.1-mini")``):
its calls go through ``ctx.llm`` (usage, cost, shared rate limits, live tokens) and the
``reason`` node runs on the I/O queue.
"""

from hypha_celery.react._actions import Action, parse_action
from hypha_celery.react._context import DEFAULT_BUDGET, ReactMemory, memory_query
from hypha_celery.react._graph import react_graph
from hypha_celery.react._llm import DEFAULT_SYSTEM, LLMProvider
from hypha_celery.react._provider import MockProvider, Provider, ScriptedError
from hypha_celery.react._state import Observation, ReactState
from hypha_celery.react._verifiers import Verifier, answer_of, model_decides, tool_answers
from hypha_celery.react._workflow import (
    HAPPY_PATH,
    STATE_NODES,
    STEPS_PER_ITERATION,
    budget_steps,
    react_workflow,
)

__all__ = [
    # building
    "HAPPY_PATH",
    "STATE_NODES",
    "STEPS_PER_ITERATION",
    "budget_steps",
    "react_graph",
    "react_workflow",
    # what the model sees
    "DEFAULT_BUDGET",
    "DEFAULT_SYSTEM",
    "ReactMemory",
    "memory_query",
    # the model
    "Action",
    "LLMProvider",
    "MockProvider",
    "Provider",
    "ScriptedError",
    "parse_action",
    # the loop's variables
    "Observation",
    "ReactState",
    # verifying
    "Verifier",
    "answer_of",
    "model_decides",
    "tool_answers",
]
