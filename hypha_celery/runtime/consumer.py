"""The worker's task consumer: a malformed message never crashes a worker nor blocks
a queue.

Selected with ``worker_consumer`` (see :func:`~hypha_celery.runtime.config.celery_config`).
A message Celery cannot run — a body that does not decode or is not JSON, an unknown
task name, broken protocol headers — becomes a dead-letter record in the event store
(the class's ``store``: :func:`bind` makes the class :class:`~hypha_celery.Hypha` installs)
and is acked (a reject would
route it to the dead-letter exchange a second time on RabbitMQ). Without a store, or if
the record cannot be written, Celery's own handling applies. With message signing
(:mod:`~hypha_celery.runtime.signing`) a message that does not verify is refused the
same way, before anything runs: reason ``bad_signature`` (``unsigned``: not signed).

Stock Celery 5.7 lets some broken messages escape its handler and stop the worker
("Unrecoverable error"): a body that is not ``[args, kwargs, embed]``, a missing ``id``
header, a malformed ``timelimit``. They are checked before the message reaches Celery,
and anything else the handler raises is dead-lettered instead of propagating.

Also: no worker ever consumes ``hypha.dead_letter``, and Celery's native delayed
delivery bootstep is left out (hypha's exchanges are direct; see
:mod:`~hypha_celery.runtime.rabbit`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from celery.exceptions import InvalidTaskError, SecurityError
from celery.worker.consumer import Consumer
from kombu.exceptions import ContentDisallowed, DecodeError
from kombu.serialization import loads, prepare_accept_content
from vine import promise

from hypha_celery._private_api import check_celery_consumer, consumer_steps_without
from hypha_celery.runtime import rabbit, signing
from hypha_celery.runtime.config import CONSUMER, DEAD_LETTER_QUEUE
from hypha_celery.store import EventStore

logger = logging.getLogger(__name__)

RAW_CHARS = 2000
#: Default bound of a task message body (bytes): 4 x the default bound of a run's input.
MAX_MESSAGE_BYTES = 32 * 1024 * 1024
_JSON_ONLY = prepare_accept_content(["json"])
_NUMBER = (int, float)
check_celery_consumer()  # the hooks overridden below (hypha_celery._private_api)


def bind(app: Any, store: EventStore, max_message_bytes: int = MAX_MESSAGE_BYTES) -> None:
    """Make ``app``'s workers record malformed messages in ``store``: its
    ``worker_consumer`` becomes a :class:`HyphaConsumer` subclass holding the store and
    the bound of a message body (unless the profile's consumer was overridden)."""
    if app.conf.worker_consumer == CONSUMER:
        app.conf.worker_consumer = type("HyphaConsumer", (HyphaConsumer,), {
            "store": store, "max_message_bytes": max_message_bytes})


class HyphaConsumer(Consumer):
    """Celery's consumer, with malformed messages recorded as dead letters."""

    #: Where dead letters are recorded (see :func:`bind`); None: Celery's handling.
    store: EventStore | None = None
    #: A task message whose body is longer is dead-lettered (``message_too_large``)
    #: without being decoded (``Settings.max_message_bytes``).
    max_message_bytes: int = MAX_MESSAGE_BYTES

    class Blueprint(Consumer.Blueprint):
        default_steps = consumer_steps_without(Consumer, ":DelayedDelivery")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        queues = self.app.amqp.queues
        queues.deselect([DEAD_LETTER_QUEUE])  # its messages are tasks that would run again
        if not queues.consume_from:
            logger.warning("hypha: this worker consumes no queue (%s is never consumed; "
                           "the supervisor drains it)", DEAD_LETTER_QUEUE)
        if rabbit.is_amqp(str(self.app.conf.broker_url or "")):
            rabbit.quiet_direct_exchange_warning()

    # -- the message handler -------------------------------------------------------
    def create_task_handler(self, promise: Any = promise) -> Callable[[Any], Any]:
        handle = super().create_task_handler(promise)
        fatal = (*self.connection_errors, *self.channel_errors)

        def on_task_received(message: Any) -> Any:
            size = body_size(message.body)
            if size > self.max_message_bytes:
                return self.on_too_large(message, size)
            problem = protocol_error(message, self.strategies)
            if problem is not None:
                return self.on_invalid_task(None, message, InvalidTaskError(problem))
            try:
                return handle(message)
            except fatal:
                raise
            except Exception as exc:
                if message.acknowledged:
                    logger.error("hypha: task handler failed after the message was acked: "
                                 "%s", type(exc).__name__, exc_info=True)
                    return None
                return self.on_invalid_task(None, message, exc)

        return on_task_received

    # -- Celery's hooks --------------------------------------------------------------
    def on_decode_error(self, message: Any, exc: Exception) -> None:
        reason, error = refusal(exc, "malformed", self._signing())
        if not self._dead_letter(message, reason, error):
            self._celery(partial(super().on_decode_error, message, exc), message)

    def on_unknown_message(self, body: Any, message: Any) -> None:
        exc = InvalidTaskError("not a task message (no task name)")
        if not self._dead_letter(message, "malformed", exc):
            self._celery(partial(super().on_unknown_message, body, message), message)

    def on_unknown_task(self, body: Any, message: Any, exc: Exception) -> None:
        if not self._dead_letter(message, "unknown_task", exc):
            self._celery(partial(super().on_unknown_task, body, message, exc), message)

    def on_invalid_task(self, body: Any, message: Any, exc: Exception) -> None:
        reason, error = refusal(exc, "malformed" if isinstance(exc, ContentDisallowed | DecodeError)
                                else "invalid_task", self._signing())
        if not self._dead_letter(message, reason, error):
            self._celery(partial(super().on_invalid_task, body, message, exc), message)

    def on_too_large(self, message: Any, size: int) -> None:
        exc = InvalidTaskError(f"the message body is {size} bytes, more than the bound of "
                               f"{self.max_message_bytes} (HYPHA_MAX_MESSAGE_BYTES)")
        if not self._dead_letter(message, "message_too_large", exc, decode=False):
            self._celery(partial(super().on_invalid_task, None, message, exc), message)

    def _signing(self) -> bool:
        return signing.SERIALIZER in (self.app.conf.accept_content or ())

    # -- recording ---------------------------------------------------------------------
    def _dead_letter(self, message: Any, reason: str, exc: Exception, *,
                     decode: bool = True) -> bool:
        """Record ``message`` and ack it; False when there is no store or it failed.
        ``decode=False`` keeps the body's first characters, not its decoded args."""
        store = self.store
        if store is None:
            return False
        try:
            record = dead_letter_record(message, reason, exc, decode=decode)
            store.add_dead_letter(record)
        except Exception as err:
            # no exc_info: a database error's text carries the statement parameters
            logger.error("hypha: could not record a %s message as a dead letter (%s); "
                         "Celery's handling applies", reason, type(err).__name__)
            return False
        logger.warning("hypha: dead-lettered a message (%s): task %s id %s queue %s: %s: %s",
                       reason, record["task"], record["execution_id"], record["queue"],
                       type(exc).__name__, str(exc)[:200])
        self._ack(message)
        return True

    def _celery(self, hook: Callable[[], None], message: Any) -> None:
        """Celery's own handling; whatever happens, the message leaves the queue."""
        try:
            hook()
        except Exception as err:
            logger.error("hypha: Celery's handling of a bad message failed: %s",
                         type(err).__name__)
        self._ack(message)

    def _ack(self, message: Any) -> None:
        if not message.acknowledged:
            message.ack_log_error(logger, (*self.connection_errors, *self.channel_errors))


# -- checks and records (no Celery state) --------------------------------------------
def protocol_error(message: Any, known: Any) -> str | None:
    """What is wrong with a protocol-2 task message that Celery would not survive, or
    None (also for what Celery reports itself: no headers, unknown task, undecodable)."""
    headers = message.headers
    if not isinstance(headers, dict) or "task" not in headers:
        return None
    if not isinstance(headers["task"], str):
        return "the task header is not a string"
    if not isinstance(headers.get("id"), str):
        return "the id header is missing or not a string"
    if headers["task"] not in known:
        return None
    limits = headers.get("timelimit")
    if limits is not None and not (
            isinstance(limits, list | tuple) and len(limits) == 2
            and all(v is None or isinstance(v, _NUMBER) for v in limits)):
        return "the timelimit header is not [hard, soft]"
    try:
        body = message.decode()
    except Exception:
        return None  # Celery reports decode errors (on_decode_error / on_invalid_task)
    if isinstance(body, dict):
        return None  # hybrid protocol: Celery checks it
    if not (isinstance(body, list | tuple) and len(body) == 3
            and isinstance(body[0], list | tuple) and isinstance(body[1], dict)
            and (body[2] is None or isinstance(body[2], dict))):
        return "the body is not [args, kwargs, embed]"
    return None


def refusal(exc: Exception, reason: str, signed: bool) -> tuple[str, Exception]:
    """The dead-letter reason and error of a message refused with ``exc`` (``reason``
    by default). With message signing (:mod:`~hypha_celery.runtime.signing`): a
    signature that does not verify (unknown certificate, another key, a changed body)
    is ``bad_signature`` with Celery's innermost ``SecurityError``; a message in another
    format (not signed) is ``unsigned``."""
    found: Exception | None = None
    seen: BaseException | None = exc
    for _ in range(8):  # kombu's DecodeError <- SecurityError <- SecurityError <- ...
        if seen is None:
            break
        if isinstance(seen, SecurityError):
            found = seen
        seen = seen.__cause__ or seen.__context__
    if found is not None:
        return "bad_signature", found
    if signed and isinstance(exc, ContentDisallowed):
        return "unsigned", exc
    return reason, exc


def body_size(body: Any) -> int:
    """Length of a message body as received (bytes, or characters of a text body)."""
    return len(body) if isinstance(body, str | bytes | bytearray | memoryview) else 0


def dead_letter_record(message: Any, reason: str, exc: BaseException, *,
                       decode: bool = True) -> dict[str, Any]:
    """The ``EventStore.add_dead_letter`` record of a message nobody can run."""
    headers = message.headers if isinstance(message.headers, dict) else {}
    task, task_id = headers.get("task"), headers.get("id")
    info = message.delivery_info if isinstance(message.delivery_info, dict) else {}
    queue = info.get("routing_key") or info.get("queue")
    args, run_id = _args(message) if decode else ({"raw": _text(message.body)[:RAW_CHARS]},
                                                   None)
    return {
        "run_id": run_id,
        "execution_id": task_id[:120] if isinstance(task_id, str) and task_id else None,
        "task": task[:200] if isinstance(task, str) and task else "?",
        "queue": str(queue)[:200] if queue else None,
        "args": args,
        "reason": reason,
        "error_class": "validation",
        "error": {"type": type(exc).__name__, "message": str(exc)[:500]},
        "attempts": 1,
    }


def _args(message: Any) -> tuple[Any, str | None]:
    """The decoded args list and the run id an envelope in it names; for a body that
    is not a JSON task message ``{"raw": <its first characters>}``."""
    try:
        body = loads(message.body, message.content_type, message.content_encoding,
                     accept=_JSON_ONLY)
        args, kwargs = body[0], body[1]
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise TypeError("not [args, kwargs, embed]")
        safe = json.loads(json.dumps(args, allow_nan=False))
    except Exception:
        return {"raw": _text(message.body)[:RAW_CHARS]}, None
    for item in [*args, *kwargs.values()]:
        if isinstance(item, dict) and isinstance(item.get("run_id"), str):
            return safe, item["run_id"][:64]
    return safe, None


def _text(body: Any) -> str:
    if isinstance(body, str):
        return body
    if isinstance(body, bytes | bytearray | memoryview):
        return bytes(body[:RAW_CHARS * 4]).decode("utf-8", errors="replace")
    return repr(body)
