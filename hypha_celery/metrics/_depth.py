"""Messages waiting in each queue, asked of the broker (read-only).

A passive ``queue_declare`` answers with the message count on every kombu transport:
RabbitMQ counts the queue; Redis sums the queue's lists (``hypha.nodes`` and its priority
lists ``hypha.nodes\\x06\\x16N``). A queue the broker does not have (a Redis queue with
no message has no key) counts 0."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any


def queue_depth(conn: Any, queue: str) -> int:
    """Messages in ``queue`` on the kombu connection ``conn`` (0 when it does not exist)."""
    channel = conn.channel()
    try:
        return int(channel.queue_declare(queue=queue, passive=True).message_count)
    except conn.channel_errors:
        return 0  # no such queue (RabbitMQ closes the channel: one per queue)
    finally:
        with contextlib.suppress(*conn.channel_errors, *conn.connection_errors):
            channel.close()


def queue_depths(app: Any, queues: Iterable[str]) -> dict[str, int]:
    """Messages in each of ``queues`` on the broker of the Celery app ``app``."""
    with app.connection_for_read() as conn:
        conn.ensure_connection(max_retries=1)
        return {name: queue_depth(conn, name) for name in sorted(set(queues))}
