"""``react_workflow``: hypha's Harness FSM as a :class:`~hypha_celery.fsm.WorkflowSpec`.

Each phase of the ReAct loop is the node of one state (``STATE_NODES``); ``Idle`` and
``RunInitialized`` are routing-only. Every guard reads ``variables.*`` only, and the
transitions out of a state are tried in the order written here.
"""

from __future__ import annotations

from hypha_celery.fsm import WorkflowSpec
from hypha_celery.fsm.spec import HumanReviewPolicy, StateSpec, TransitionSpec

__all__ = ["HAPPY_PATH", "STATE_NODES", "STEPS_PER_ITERATION", "budget_steps",
           "react_workflow"]

#: The states a run with one tool call visits, in order (hypha's ``REACT_FSM_STATE_PATH``).
HAPPY_PATH = ("Idle", "RunInitialized", "ContextBuilt", "Reasoning", "ActionSelected",
              "PolicyChecked", "Acting", "ObservationRecorded", "Verifying", "MemorySync",
              "Completed")

#: The phase node each state runs once entered (the states left out are routing-only).
STATE_NODES = {
    "ContextBuilt": "observe",
    "Reasoning": "reason",
    "ActionSelected": "select_action",
    "PolicyChecked": "policy_check",
    "Acting": "act",
    "ActingEffect": "act_effect",
    "ObservationRecorded": "observe_result",
    "Verifying": "verify",
    "MemorySync": "memory_sync",
}

#: Node steps of the longest iteration (Reasoning .. MemorySync through a tool call).
STEPS_PER_ITERATION = 7

_ACTION = "variables.action.action"
_ASKS_HUMAN = f"{_ACTION} == 'human_review'"
_NEEDS_REVIEW = "variables.policy.requires_review == true"

_GOALS = {
    "Idle": "nothing has run yet",
    "RunInitialized": "the run exists",
    "ContextBuilt": "read the question and reset the loop's variables (observe)",
    "Reasoning": "ask the model for the next action (reason)",
    "ActionSelected": "parse the model's reply into an action (select_action)",
    "PolicyChecked": "decide whether the selected tool may run (policy_check)",
    "Acting": "run the tool through the governed runner (act)",
    "ActingEffect": "run an external_effect / irreversible tool at most once (act)",
    "ObservationRecorded": "turn the tool result or a person's approval into an "
                           "observation (observe_result)",
    "Verifying": "decide whether the loop is done (verify)",
    "MemorySync": "append the observation to the bounded memory (memory_sync)",
    "Completed": "the result is variables.result (complete)",
}

# (from, to, guard): first holding guard wins
_TRANSITIONS: tuple[tuple[str, str, str | None], ...] = (
    ("Idle", "RunInitialized", None),
    ("RunInitialized", "ContextBuilt", None),
    ("ContextBuilt", "Reasoning", None),
    ("Reasoning", "ActionSelected", None),
    ("ActionSelected", "Verifying", f"{_ACTION} == 'finish'"),
    ("ActionSelected", "ObservationRecorded", _ASKS_HUMAN),
    ("ActionSelected", "PolicyChecked", f"{_ACTION} == 'tool'"),
    ("PolicyChecked", "Verifying", "variables.policy.allowed == false"),
    ("PolicyChecked", "ActingEffect", "variables.policy.at_most_once == true"),
    ("PolicyChecked", "Acting", None),
    ("Acting", "ObservationRecorded", None),
    ("ActingEffect", "ObservationRecorded", None),
    ("ObservationRecorded", "Verifying", None),
    ("Verifying", "Reasoning",
     "variables.done == false && variables.observation.source == 'model'"),
    ("Verifying", "MemorySync", None),
    ("MemorySync", "Completed", "variables.done == true"),
    ("MemorySync", "Reasoning", None),
)


def budget_steps(max_iterations: int) -> int:
    """Node steps a run of ``max_iterations`` tool-calling iterations needs: the
    ``observe`` step, then :data:`STEPS_PER_ITERATION` per iteration."""
    return 1 + STEPS_PER_ITERATION * max_iterations


def react_workflow(id: str = "react", *, review_expires_in: float | None = None
                   ) -> WorkflowSpec:
    """The ReAct loop as a workflow whose result is ``variables.result``.

    ``Acting`` / ``ActingEffect`` park the run for a person when the policy asked for a
    review (``variables.policy.requires_review``); ``ObservationRecorded`` parks it when
    the model asked for one (action ``human_review``). ``review_expires_in``: seconds
    until such a review expires (the run then fails ``review_expired``).
    """
    def review(when: str, reason: str) -> HumanReviewPolicy:
        return HumanReviewPolicy(required=True, when=when, reason=reason,
                                 expires_in=review_expires_in)

    reviews = {"Acting": review(_NEEDS_REVIEW, "the tool call needs a review"),
               "ActingEffect": review(_NEEDS_REVIEW, "the tool call needs a review"),
               "ObservationRecorded": review(_ASKS_HUMAN, "the model asked for a review")}
    states = [StateSpec(id=sid, goal=goal, node=STATE_NODES.get(sid),
                        human_review=reviews.get(sid))
              for sid, goal in _GOALS.items() if sid != "Completed"]
    states.append(StateSpec(id="Completed", goal=_GOALS["Completed"], kind="completed"))
    return WorkflowSpec(
        id=id, description="hypha's harnessed ReAct loop", initial_state="Idle",
        terminal_states=["Completed"], output="variables.result", states=states,
        transitions=[TransitionSpec.model_validate({"from": a, "to": b, "guard": g})
                     for a, b, g in _TRANSITIONS])
