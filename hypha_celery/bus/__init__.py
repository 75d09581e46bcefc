"""hypha's message bus between agents, workflows and humans, on the event store.

A :class:`Message` goes from one :class:`Endpoint` (``{kind, id}``: runtime, session,
workflow, agent, tool, human) to another, scoped by ``user_id`` and ``session_id`` (and
optionally a run). Each recipient has one FIFO queue per scope, keyed
``user:session:kind:id``. :class:`Bus` publishes, pulls (by recipient; filters: run, FSM
state, correlation id), acknowledges and fails messages, requeues with bounded
exponential backoff, dead-letters expired, poison and over-budget messages without
blocking the queue, and writes ``message.*`` events to the log of the message's run.
Agents take bus messages as prompts and reply on the bus (:func:`register`), workflows
hand work to an agent and resume on its reply (:func:`hand_off`). See ``docs/bus.md``.
"""

from hypha_celery.bus._agents import (
    DELIVER_BATCH,
    DELIVER_TASK,
    FAILED_TYPE,
    REPLY_TASK,
    REPLY_TYPE,
    WAKE_HORIZON_S,
    AgentFailure,
    AgentPrompt,
    celery_waker,
    complete,
    deliver,
    direct,
    prompt_of,
    sweep,
)
from hypha_celery.bus._bus import MAX_PULL, RECEIVE_POLL, Bus, Consumer, Waker
from hypha_celery.bus._model import (
    ACK_DEADLINE_S,
    INITIAL_RETRY_DELAY_MS,
    MAX_DELIVERY_ATTEMPTS,
    MAX_ID_CHARS,
    MAX_MESSAGE_BYTES,
    MAX_NAME_CHARS,
    MAX_QUEUE_BYTES,
    MAX_QUEUE_MESSAGES,
    MAX_RETRY_DELAY_MS,
    RETRY_MULTIPLIER,
    BusLimits,
    DeadLetterReason,
    Endpoint,
    EndpointKind,
    Message,
    MessageStatus,
    RetryPolicy,
    Scope,
    agent,
    human,
    queue_key,
    workflow,
)
from hypha_celery.bus._tasks import register
from hypha_celery.bus._workflow import ANONYMOUS, HANDOFF_TIMEOUT, HANDOFF_TYPE, hand_off, resumer
from hypha_celery.errors import (
    BusError,
    HandOffFailed,
    MessageAlreadyExists,
    MessageNotFound,
    MessageScopeMismatch,
    MessageTooLarge,
    QueueFull,
    UnknownRecipient,
)

__all__ = [
    # the bus and its messages
    "Bus", "Consumer", "DeadLetterReason", "Message", "MessageStatus", "Waker",
    # addressing
    "Endpoint", "EndpointKind", "Scope", "agent", "human", "queue_key", "workflow",
    # policy and bounds
    "ACK_DEADLINE_S", "INITIAL_RETRY_DELAY_MS", "MAX_DELIVERY_ATTEMPTS", "MAX_ID_CHARS",
    "MAX_MESSAGE_BYTES", "MAX_NAME_CHARS", "MAX_PULL", "MAX_QUEUE_BYTES", "MAX_QUEUE_MESSAGES",
    "MAX_RETRY_DELAY_MS", "RECEIVE_POLL", "RETRY_MULTIPLIER", "BusLimits", "RetryPolicy",
    # agents on the bus
    "DELIVER_BATCH", "DELIVER_TASK", "FAILED_TYPE", "REPLY_TASK", "REPLY_TYPE", "WAKE_HORIZON_S",
    "AgentFailure", "AgentPrompt", "celery_waker", "complete", "deliver", "direct", "prompt_of",
    "register", "sweep",
    # workflows on the bus
    "ANONYMOUS", "HANDOFF_TIMEOUT", "HANDOFF_TYPE", "hand_off", "resumer",
    # errors
    "BusError", "HandOffFailed", "MessageAlreadyExists", "MessageNotFound", "MessageScopeMismatch",
    "MessageTooLarge", "QueueFull", "UnknownRecipient",
]
