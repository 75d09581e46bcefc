"""RabbitMQ: quorum queues with a delivery limit and a dead-letter exchange.

A hypha queue on RabbitMQ is a durable quorum queue on its own direct exchange.
A message delivered ``delivery_limit`` times without being acked (a worker process
killed mid-task, again and again: a poison message) or rejected without requeue is
routed by the broker to the ``hypha.dead_letter`` exchange and its quorum queue.
No worker consumes that queue (its messages are node tasks that would run again):
the supervisor drains it with :func:`drain_dead_letters`.

Exchanges stay *direct*: Celery's native delayed delivery (topic exchanges only)
refuses countdowns under one second, and hypha's retry backoff starts at 0.25 s.
A countdown on a direct exchange is an ETA message the worker holds until due.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from celery import Celery
from kombu.entity import Exchange, Queue

from hypha_celery.runtime.config import (
    AGENTS_QUEUE,
    COORDINATOR_QUEUE,
    DEAD_LETTER_QUEUE,
    EFFECTS_QUEUE,
    IO_QUEUE,
    NODES_QUEUE,
)

logger = logging.getLogger(__name__)

AMQP_SCHEMES = ("amqp://", "amqps://", "pyamqp://")
DEAD_LETTER_EXCHANGE = DEAD_LETTER_QUEUE
DEAD_LETTER_ROUTING_KEY = DEAD_LETTER_QUEUE


def is_amqp(broker_url: str) -> bool:
    return broker_url.startswith(AMQP_SCHEMES)


def dead_letter_queue() -> Queue:
    """``hypha.dead_letter``: quorum, no dead-letter exchange, no delivery limit (a
    requeued dead letter must never be dropped), on the direct exchange of that name."""
    return Queue(DEAD_LETTER_QUEUE, Exchange(DEAD_LETTER_EXCHANGE, "direct", durable=True),
                 routing_key=DEAD_LETTER_ROUTING_KEY, durable=True,
                 queue_arguments={"x-queue-type": "quorum"})


class DeadLetteredQueue(Queue):
    """A queue whose declaration also declares the dead-letter exchange and queue
    first: a message can only be dead-lettered into a queue that exists."""

    def declare(self, nowait: bool = False, channel: Any = None) -> str:
        dead_letter_queue().bind(channel or self.channel).declare(nowait=nowait)
        name: str = super().declare(nowait=nowait, channel=channel)
        return name


def quorum_queue(name: str, delivery_limit: int) -> Queue:
    """A durable quorum queue on its own direct exchange (routing key = name) that
    dead-letters to ``hypha.dead_letter`` after ``delivery_limit`` deliveries."""
    if delivery_limit < 1:
        raise ValueError(f"delivery_limit must be >= 1, got {delivery_limit}")
    return DeadLetteredQueue(
        name, Exchange(name, "direct", durable=True), routing_key=name, durable=True,
        queue_arguments={"x-queue-type": "quorum",
                         "x-dead-letter-exchange": DEAD_LETTER_EXCHANGE,
                         "x-dead-letter-routing-key": DEAD_LETTER_ROUTING_KEY,
                         "x-delivery-limit": delivery_limit})


def hypha_queues(delivery_limit: int) -> list[Queue]:
    """``task_queues`` on RabbitMQ: the five hypha queues and the dead-letter queue
    (listed so that Celery knows it; :class:`~hypha_celery.runtime.consumer.HyphaConsumer`
    never consumes it)."""
    names = (COORDINATOR_QUEUE, NODES_QUEUE, EFFECTS_QUEUE, AGENTS_QUEUE, IO_QUEUE)
    return [*(quorum_queue(n, delivery_limit) for n in names), dead_letter_queue()]


def declare_queue(app: Celery, name: str, delivery_limit: int) -> Queue:
    """Make ``name`` (a node's own queue, e.g. ``"gpu"``) a dead-lettered quorum queue
    of ``app`` (call before a worker or publisher first uses it). Like a queue Celery
    creates on demand, a worker consumes it only when named in ``-Q``."""
    queue = quorum_queue(name, delivery_limit)
    app.amqp.queues.add(queue)
    return queue


_DIRECT_WARNING = "Direct exchanges are not supported with native delayed delivery"


class _DropDirectExchangeWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_DIRECT_WARNING)


_direct_filter = _DropDirectExchangeWarning()


def quiet_direct_exchange_warning() -> None:
    """Celery warns at every countdown / ETA publish to a direct exchange while quorum
    queues are declared (hypha's retries): direct is hypha's choice, drop that line."""
    base = logging.getLogger("celery.app.base")
    if _direct_filter not in base.filters:
        base.addFilter(_direct_filter)


# -- draining -------------------------------------------------------------------
@dataclass(frozen=True)
class DeadMessage:
    """A dead-lettered Celery (protocol 2) message, decoded."""

    task: str
    task_id: str
    args: list[Any]
    kwargs: dict[str, Any]
    queue: str | None
    delivery_count: int
    reason: str


def _death(headers: dict[str, Any]) -> tuple[str | None, str]:
    """Original queue and reason from RabbitMQ's ``x-death`` (newest first)."""
    deaths = headers.get("x-death")
    if isinstance(deaths, Sequence) and deaths and isinstance(deaths[0], dict):
        last = deaths[0]
        queue, reason = last.get("queue"), last.get("reason")
        return (str(queue) if queue else None), str(reason or "unknown")
    queue = headers.get("x-first-death-queue")
    return (str(queue) if queue else None), str(headers.get("x-first-death-reason") or "unknown")


def _count(headers: dict[str, Any], queue: str | None, reason: str,
           limits: Mapping[str, int]) -> int:
    """Deliveries in the original queue, as far as known: a message dead-lettered for
    its delivery limit was delivered limit + 1 times (the broker does not carry the
    original ``x-delivery-count`` over); else how often it was dead-lettered (each
    time after at least one delivery)."""
    if reason == "delivery_limit" and queue is not None and queue in limits:
        return limits[queue] + 1
    deaths = headers.get("x-death")
    if isinstance(deaths, Sequence) and deaths and isinstance(deaths[0], dict):
        return int(deaths[0].get("count") or 1)
    return 1


def delivery_limits(app: Celery) -> dict[str, int]:
    """``x-delivery-limit`` of each of ``app``'s queues that has one."""
    out: dict[str, int] = {}
    for name, queue in app.amqp.queues.items():
        limit = (queue.queue_arguments or {}).get("x-delivery-limit")
        if isinstance(limit, int):
            out[name] = limit
    return out


def decode(message: Any, limits: Mapping[str, int] | None = None) -> DeadMessage:
    """A :class:`DeadMessage` from a kombu message of ``hypha.dead_letter``
    (``limits``: queue name -> its delivery limit, see :func:`delivery_limits`)."""
    headers = message.headers if isinstance(message.headers, dict) else {}
    queue, reason = _death(headers)
    count = _count(headers, queue, reason, limits or {})
    task_id = headers.get("id")
    task_id = task_id if isinstance(task_id, str) else "?"
    task = headers.get("task")
    try:
        args, kwargs, _embed = message.decode()
        if not isinstance(task, str) or not isinstance(args, list) \
                or not isinstance(kwargs, dict):
            raise TypeError("not a protocol-2 task message")
        json.dumps([args, kwargs])
    except Exception:  # anything undecodable is "malformed"
        return DeadMessage("?", task_id, [], {}, queue, count, "malformed")
    return DeadMessage(task, task_id, args, kwargs, queue, count, reason)


def drain_dead_letters(app: Celery, handle: Callable[[DeadMessage], None],
                       limit: int = 500) -> int:
    """Hand up to ``limit`` messages of ``hypha.dead_letter`` to ``handle`` and ack each
    one it returned from. If ``handle`` raises, that message goes back to the queue and
    draining stops. Returns how many were handled (0 on a non-RabbitMQ broker, without
    connecting). An unreachable broker raises kombu's connection errors."""
    if not is_amqp(str(app.conf.broker_url or "")):
        return 0
    handled, limits = 0, delivery_limits(app)
    with app.connection_for_write() as conn:
        queue = dead_letter_queue().bind(conn.default_channel)
        queue.declare()
        while handled < limit:
            message = queue.get(no_ack=False, accept=["json"])
            if message is None:
                break
            if not _hand_over(message, limits, handle):
                break
            handled += 1
    return handled


def _hand_over(message: Any, limits: Mapping[str, int],
               handle: Callable[[DeadMessage], None]) -> bool:
    try:
        handle(decode(message, limits))
    except Exception as exc:
        # no traceback: a database error's text carries the statement parameters (args)
        logger.error("hypha: dead-letter handler failed (%s); message %s left in %s",
                     type(exc).__name__, message.headers.get("id")
                     if isinstance(message.headers, dict) else "?", DEAD_LETTER_QUEUE)
        message.requeue()
        return False
    message.ack()
    return True
