"""Every private API of a library hypha relies on, one function each.

Libraries change their internals without notice. What hypha reaches into is here and
nowhere else, each behind one function that checks the shape it expects and says what
changed when it is not there (:class:`~hypha_celery.errors.PrivateApiChanged`, or a
documented fallback), and each with a test (``tests/test_private_api.py``) that fails
loudly against a library version that changed it:

- Celery's worker consumer hooks (:func:`check_celery_consumer`): ``HyphaConsumer``
  (:mod:`~hypha_celery.runtime.consumer`) overrides ``create_task_handler`` and the
  ``on_*`` handlers of undecodable, unknown and invalid messages, reads ``strategies``,
  and leaves the ``DelayedDelivery`` step out of the consumer's blueprint
  (:func:`consumer_steps_without`);
- OpenTelemetry SDK's multi span processor tuple (:func:`put_span_processor_first`): the
  tracing sink's processor goes first among a provider's;
- prometheus_client's value class (:func:`use_multiprocess_values`): chosen when the
  library is first imported, chosen again once multiprocess mode is set;
- httpx2's HTTP transport's connection pool (:func:`use_network_backend`): the SDK
  clients' transport does its network I/O through hypha's streams, which a model call's
  cancel token can shut down (:mod:`hypha_celery.backends.llm.cancel`);
- LangGraph's Pregel algorithm (:func:`langgraph_task_api`): a worker of a distributed
  LangGraph graph prepares and runs one task of a superstep (the ``langgraph`` extra pins
  the minor version; ``tests/langgraph/test_internals.py``).

(Celery's current task is read through the public ``celery.current_task``. Two private
APIs of the standard library stay with the module that uses them, each with its own
fallback and test: ``_json.make_encoder`` in :mod:`hypha_celery.events.jsontext` and
``re._parser`` in :mod:`hypha_celery.guards._patterns`.)
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass
from typing import Any

from celery.worker.consumer import Consumer

from hypha_celery.errors import PrivateApiChanged

__all__ = ["CONSUMER_ATTRIBUTES", "CONSUMER_HOOKS", "LangGraphTaskApi", "check_celery_consumer",
           "consumer_steps_without", "langgraph_task_api", "put_span_processor_first",
           "use_multiprocess_values", "use_network_backend"]

#: The consumer hooks ``HyphaConsumer`` overrides, with the parameters it passes on.
CONSUMER_HOOKS: dict[str, tuple[str, ...]] = {
    "create_task_handler": ("self", "promise"),
    "on_decode_error": ("self", "message", "exc"),
    "on_unknown_message": ("self", "body", "message"),
    "on_unknown_task": ("self", "body", "message", "exc"),
    "on_invalid_task": ("self", "body", "message", "exc"),
}


#: What ``HyphaConsumer`` reads of a consumer instance (set in ``Consumer.__init__``).
CONSUMER_ATTRIBUTES = ("strategies", "connection_errors", "channel_errors")


def check_celery_consumer() -> None:
    """Celery's worker ``Consumer`` (the class its ``worker_consumer`` setting names) has
    the hooks ``HyphaConsumer`` overrides, with the parameters it passes on
    (:data:`CONSUMER_HOOKS`), and its ``Blueprint``; raised at import of
    :mod:`~hypha_celery.runtime.consumer` otherwise. (The instance attributes it reads,
    :data:`CONSUMER_ATTRIBUTES`, are checked by the tests.)"""
    for hook, params in CONSUMER_HOOKS.items():
        fn = getattr(Consumer, hook, None)
        found = tuple(inspect.signature(fn).parameters) if callable(fn) else None
        if found != params:
            raise PrivateApiChanged(f"celery's Consumer.{hook} is {found}, hypha expects "
                                    f"{params}: hypha_celery.runtime.consumer needs updating")
    if not hasattr(Consumer, "Blueprint"):
        raise PrivateApiChanged("celery's Consumer has no Blueprint: "
                                "hypha_celery.runtime.consumer needs updating")


def consumer_steps_without(consumer: type[Consumer], suffix: str) -> list[str]:
    """The default steps of ``consumer``'s blueprint but the one ending in ``suffix``
    (it must be there: a rename would silently keep it)."""
    steps = list(consumer.Blueprint.default_steps)
    kept = [step for step in steps if not step.endswith(suffix)]
    if len(kept) != len(steps) - 1:
        raise PrivateApiChanged(f"celery's consumer steps have no single {suffix!r} step "
                                f"({steps}): hypha_celery.runtime.consumer needs updating")
    return kept


def use_network_backend(transport: Any, backend: Any) -> None:
    """Make ``transport`` (an ``httpx2.HTTPTransport`` without a proxy) open its
    connections through ``backend`` (an ``httpcore2.NetworkBackend``). httpx2 builds the
    transport's ``httpcore2.ConnectionPool`` itself and takes no backend: this sets the
    pool's private ``_network_backend``, which its connections are built with. Raises
    :class:`PrivateApiChanged` when the pool has no such attribute."""
    pool = getattr(transport, "_pool", None)
    if not hasattr(pool, "_network_backend"):
        raise PrivateApiChanged("httpx2's HTTPTransport has no _pool._network_backend: "
                                "hypha_celery.backends.llm.cancel needs updating")
    pool._network_backend = backend  # type: ignore[union-attr]


def put_span_processor_first(provider: Any, processor: Any) -> bool:
    """Move ``processor`` (already added to ``provider``) first among the provider's span
    processors, so it is shut down first. Reaches the SDK's private
    ``_active_span_processor._span_processors`` tuple (under its ``_lock``); False when
    the provider has no such tuple (another SDK version or another provider: the
    processor stays last)."""
    multi: Any = getattr(provider, "_active_span_processor", None)
    lock = getattr(multi, "_lock", None)
    if lock is None or not isinstance(getattr(multi, "_span_processors", None), tuple):
        return False
    with lock:
        rest = tuple(p for p in multi._span_processors if p is not processor)
        multi._span_processors = (processor, *rest)
    return True


def use_multiprocess_values() -> bool:
    """prometheus_client picks its metric value class (``values.ValueClass``) when it is
    first imported: pick again, once ``PROMETHEUS_MULTIPROC_DIR`` is set, if the process
    imported it before (the ``celery`` command may have: Flower's plugin does). True
    when it was picked again."""
    values: Any = sys.modules.get("prometheus_client.values")
    if values is None:
        return False
    for name in ("ValueClass", "MutexValue", "get_value_class"):
        if not hasattr(values, name):
            raise PrivateApiChanged(f"prometheus_client.values has no {name!r}: "
                                    "hypha_celery.metrics._exporter needs updating")
    if values.ValueClass is not values.MutexValue:
        return False
    values.ValueClass = values.get_value_class()
    return True


@dataclass(frozen=True, slots=True)
class LangGraphTaskApi:
    """LangGraph's Pregel functions, error, runtime, constants and delta channel class
    that preparing and running one task needs (see :func:`langgraph_task_api`)."""

    prepare_next_tasks: Any
    prepare_single_task: Any
    checkpoint_null_version: Any
    channels_from_checkpoint: Any
    run_with_retry: Any
    arun_with_retry: Any
    GraphInterrupt: Any
    DEFAULT_RUNTIME: Any
    CONFIG_KEY_RUNTIME: str
    NULL_TASK_ID: str
    RESUME: str
    DeltaChannel: Any
    StreamMessagesHandler: Any
    apply_writes: Any
    create_checkpoint: Any
    map_output_updates: Any
    map_output_values: Any


def langgraph_task_api() -> LangGraphTaskApi:
    """The LangGraph internals a worker needs to run one task of a superstep
    (:mod:`hypha_celery.langgraph.engine`), imported when first asked for."""
    from langgraph._internal._constants import CONFIG_KEY_RUNTIME, NULL_TASK_ID, RESUME
    from langgraph.channels.delta import DeltaChannel
    from langgraph.errors import GraphInterrupt
    from langgraph.pregel._algo import (
        apply_writes,
        checkpoint_null_version,
        prepare_next_tasks,
        prepare_single_task,
    )
    from langgraph.pregel._checkpoint import channels_from_checkpoint, create_checkpoint
    from langgraph.pregel._io import map_output_updates, map_output_values
    from langgraph.pregel._messages import StreamMessagesHandler
    from langgraph.pregel._retry import arun_with_retry, run_with_retry
    from langgraph.runtime import DEFAULT_RUNTIME

    return LangGraphTaskApi(prepare_next_tasks, prepare_single_task, checkpoint_null_version,
                            channels_from_checkpoint, run_with_retry, arun_with_retry,
                            GraphInterrupt, DEFAULT_RUNTIME, CONFIG_KEY_RUNTIME,
                            NULL_TASK_ID, RESUME, DeltaChannel, StreamMessagesHandler,
                            apply_writes, create_checkpoint, map_output_updates,
                            map_output_values)
