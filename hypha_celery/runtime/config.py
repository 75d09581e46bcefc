"""Settings: where the broker, result backend and store are, and the Celery profile."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kombu.entity import Exchange, Queue

from hypha_celery.backends.llm.client import check_base_urls
from hypha_celery.backends.llm.pricing import Price
from hypha_celery.backends.llm.ratelimit import Limit, parse_limits
from hypha_celery.errors import SetupError
from hypha_celery.lanes import Bound
from hypha_celery.runtime.signing import Signing
from hypha_celery.runtime.signing import from_env as signing_from_env
from hypha_celery.runtime.tls import TlsFiles, celery_tls, check_encrypted, tls_settings

COORDINATOR_QUEUE = "hypha.coordinator"
NODES_QUEUE = "hypha.nodes"
DEAD_LETTER_QUEUE = "hypha.dead_letter"
#: At-most-once nodes (side_effect external_effect / irreversible): early ack.
EFFECTS_QUEUE = "hypha.effects"
#: Conversational agents' turns (hypha.agent.pump).
AGENTS_QUEUE = "hypha.agents"
#: Work that waits on the network (model-calling nodes): consumed by the ``io`` worker
#: profile (gevent's pool), see ``hypha worker --profile``.
IO_QUEUE = "hypha.io"
AGENT_PUMP_TASK = "hypha.agent.pump"
COORDINATOR_TASK = "hypha.coordinator"
SUPERVISOR_TASK = "hypha.supervisor"
#: The worker consumer of the profile (malformed messages become dead letters).
CONSUMER = "hypha_celery.runtime.consumer:HyphaConsumer"
EMBEDDED_STORE_URL = "sqlite:///.hypha/hypha.db"


@dataclass(frozen=True, slots=True)
class BusSettings:
    """The message bus's bounds and retry policy as plain numbers (``HYPHA_BUS_*``; this
    layer cannot name the bus's types: ``hypha_celery.bus.BusLimits.from_settings`` and
    ``RetryPolicy.from_settings`` build them). Defaults: the bus's (``docs/bus.md``,
    "Bounds")."""

    #: ``HYPHA_BUS_MAX_MESSAGE_BYTES``: a message's compact JSON.
    max_message_bytes: int = 262_144
    #: ``HYPHA_BUS_MAX_QUEUE_MESSAGES`` / ``HYPHA_BUS_MAX_QUEUE_BYTES``: live messages of
    #: one queue, in count and bytes.
    max_queue_messages: int = 10_000
    max_queue_bytes: int = 67_108_864
    #: ``HYPHA_BUS_ACK_DEADLINE``: seconds a delivered message waits for its settlement.
    ack_deadline_s: float = 30.0
    #: ``HYPHA_BUS_AGENT_HOLD``: seconds a message an agent accepted stays delivered
    #: while its turn runs (the agent sends its completion; past this it is delivered
    #: again).
    agent_hold_s: float = 3_600.0
    #: ``HYPHA_BUS_RETENTION`` (seconds settled messages are kept) /
    #: ``HYPHA_BUS_PRUNE_BATCH`` (deleted per supervisor sweep).
    retention_s: float = 604_800.0
    prune_batch: int = 1_000
    #: ``HYPHA_BUS_MAX_DELIVERY_ATTEMPTS`` (the delivery budget),
    #: ``HYPHA_BUS_RETRY_INITIAL_DELAY_MS``, ``HYPHA_BUS_RETRY_MAX_DELAY_MS``,
    #: ``HYPHA_BUS_RETRY_MULTIPLIER``: ``fail(retry=True)``'s backoff.
    max_delivery_attempts: int = 3
    retry_initial_delay_ms: int = 250
    retry_max_delay_ms: int = 30_000
    retry_multiplier: float = 2.0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> BusSettings:
        """The ``HYPHA_BUS_*`` variables over the defaults; a malformed or out-of-range
        one is a ``SetupError`` naming it."""
        d = cls()
        return cls(
            max_message_bytes=_count(env, "HYPHA_BUS_MAX_MESSAGE_BYTES", d.max_message_bytes),
            max_queue_messages=_count(env, "HYPHA_BUS_MAX_QUEUE_MESSAGES",
                                      d.max_queue_messages),
            max_queue_bytes=_count(env, "HYPHA_BUS_MAX_QUEUE_BYTES", d.max_queue_bytes),
            ack_deadline_s=_number(env, "HYPHA_BUS_ACK_DEADLINE", d.ack_deadline_s, 0,
                                   strict=True),
            agent_hold_s=_number(env, "HYPHA_BUS_AGENT_HOLD", d.agent_hold_s, 0,
                                 strict=True),
            retention_s=_number(env, "HYPHA_BUS_RETENTION", d.retention_s, 0, strict=True),
            prune_batch=_count(env, "HYPHA_BUS_PRUNE_BATCH", d.prune_batch),
            max_delivery_attempts=_count(env, "HYPHA_BUS_MAX_DELIVERY_ATTEMPTS",
                                         d.max_delivery_attempts),
            retry_initial_delay_ms=int(_number(env, "HYPHA_BUS_RETRY_INITIAL_DELAY_MS",
                                               d.retry_initial_delay_ms, 0)),
            retry_max_delay_ms=int(_number(env, "HYPHA_BUS_RETRY_MAX_DELAY_MS",
                                           d.retry_max_delay_ms, 0)),
            retry_multiplier=_number(env, "HYPHA_BUS_RETRY_MULTIPLIER", d.retry_multiplier, 1))


@dataclass(frozen=True)
class Settings:
    """Resolved configuration. ``embedded`` means no broker was configured."""

    broker_url: str
    result_backend: str
    store_url: str
    embedded: bool
    inline_coordinator: bool = True
    local_budget: float = 0.05
    embedded_concurrency: int = 4
    #: Redis: an unacked message is redelivered after this many seconds. Must exceed
    #: every node's hard time limit plus its longest retry delay (checked at register).
    visibility_timeout: float = 3600.0
    #: Deliveries of one message that started without completing before it is
    #: dead-lettered (hypha's own count, every broker).
    delivery_limit: int = 3
    #: RabbitMQ's quorum ``x-delivery-limit``, a broker-side backstop above hypha's count
    #: (the broker also counts returns of prefetched messages): default max(10, 3 × limit).
    broker_delivery_limit: int = 10
    #: Seconds between recovery-supervisor sweeps (celery beat).
    sweep_interval: float = 5.0
    #: Seconds between lease heartbeats of a running node (0: no leases).
    lease_interval: float = 1.0
    #: Pending runs per (user_id, session_id) lane: count and JSON bytes of their inputs.
    lane_max_pending: int = 1_000
    lane_max_pending_bytes: int = 8_388_608
    #: JSON bytes of one run's input, checked at ``start`` before anything is written
    #: (``HYPHA_MAX_INPUT_BYTES``): an input no lane could queue cannot start either.
    max_input_bytes: int = 8_388_608
    #: Live agents one user may own through a scoped client (``Hypha.as_user``;
    #: ``HYPHA_MAX_AGENTS_PER_OWNER``).
    max_agents_per_owner: int = 100
    #: Bytes of a task message body a worker decodes (``HYPHA_MAX_MESSAGE_BYTES``): a
    #: longer one is dead-lettered ``message_too_large`` unread.
    max_message_bytes: int = 33_554_432
    #: Model calls (``ctx.llm``, hosted agent backends): rate and concurrency limits per
    #: vendor (``"openai"``) or limit key (``"openai:<key id>"``) -- ``HYPHA_MODEL_LIMITS``,
    #: JSON ``{"openai": {"rpm": 500, "tpm": 200000, "concurrency": 20}}``; seconds a
    #: call may wait for room (``HYPHA_MODEL_MAX_WAIT``); prices in USD per million tokens
    #: by model reference (``HYPHA_MODEL_PRICES``, JSON ``{"openai:gpt-4.1-mini":
    #: {"input": 0.4, "output": 1.6}}``; none built in); base URLs per provider or vendor
    #: (``HYPHA_MODEL_BASE_URLS``, JSON ``{"openai": "http://localhost:8000/v1"}``; see
    #: docs/models.md, "Base URLs").
    model_limits: dict[str, Limit] = field(default_factory=dict)
    model_max_wait: float = 60.0
    model_prices: dict[str, Price] = field(default_factory=dict)
    model_base_urls: dict[str, str] = field(default_factory=dict)
    #: TLS files for every ``rediss://`` / ``amqps://`` URL (``HYPHA_TLS_CA_FILE``,
    #: ``HYPHA_TLS_CERT_FILE``, ``HYPHA_TLS_KEY_FILE``; see :mod:`hypha_celery.runtime.tls`).
    tls: TlsFiles = TlsFiles()
    #: Celery message signing (``HYPHA_SIGNING_KEY_FILE``, ``HYPHA_SIGNING_CERT_FILE``,
    #: ``HYPHA_SIGNING_CERT_STORE``; see :mod:`hypha_celery.runtime.signing`); None: off.
    signing: Signing | None = None
    #: The message bus's bounds and retry policy (``HYPHA_BUS_*``, :class:`BusSettings`).
    bus: BusSettings = BusSettings()
    celery_overrides: dict[str, Any] = field(default_factory=dict)

    @property
    def lane_bound(self) -> Bound:
        return Bound(self.lane_max_pending, self.lane_max_pending_bytes)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ) if env is None else env
        broker = env.get("HYPHA_BROKER_URL", "").strip()
        store = env.get("HYPHA_STORE_URL", "").strip() or EMBEDDED_STORE_URL
        inline = env.get("HYPHA_INLINE_COORDINATOR", "1").strip().lower() not in ("0", "false")
        budget = _seconds(env, "HYPHA_LOCAL_STEPS_BUDGET", 0.05) if inline else 0.0
        limit = max(1, int(_seconds(env, "HYPHA_DELIVERY_LIMIT", 3)))
        extra: dict[str, Any] = {
            "visibility_timeout": _seconds(env, "HYPHA_VISIBILITY_TIMEOUT", 3600.0),
            "sweep_interval": _seconds(env, "HYPHA_SWEEP_INTERVAL", 5.0),
            "delivery_limit": limit,
            "broker_delivery_limit": max(1, int(_seconds(
                env, "HYPHA_BROKER_DELIVERY_LIMIT", broker_delivery_limit(limit)))),
            "lease_interval": _seconds(env, "HYPHA_LEASE_INTERVAL", 1.0),
            "lane_max_pending": int(_seconds(env, "HYPHA_LANE_MAX_PENDING", 1_000)),
            "lane_max_pending_bytes": int(_seconds(env, "HYPHA_LANE_MAX_PENDING_BYTES",
                                                   8_388_608)),
            "max_input_bytes": int(_seconds(env, "HYPHA_MAX_INPUT_BYTES", 8_388_608)),
            "max_agents_per_owner": int(_seconds(env, "HYPHA_MAX_AGENTS_PER_OWNER", 100)),
            "max_message_bytes": int(_seconds(env, "HYPHA_MAX_MESSAGE_BYTES", 33_554_432)),
            **model_settings(env), "tls": tls_settings(env, store),
            "signing": signing_from_env(env), "bus": BusSettings.from_env(env)}
        if not broker:
            return cls("memory://", "cache+memory://", store, True, inline, budget, **extra)
        backend = env.get("HYPHA_RESULT_BACKEND", "").strip() or _default_backend(broker)
        check_encrypted(extra["tls"], broker, backend)
        return cls(broker, backend, store, False, inline, budget, **extra)


def model_settings(env: Mapping[str, str]) -> dict[str, Any]:
    """The ``model_*`` settings from ``HYPHA_MODEL_*`` (JSON documents; see
    :class:`Settings`); a malformed one is a ``SetupError`` naming the variable."""
    out: dict[str, Any] = {"model_max_wait": _seconds(dict(env), "HYPHA_MODEL_MAX_WAIT", 60.0)}
    try:
        out["model_limits"] = parse_limits(_json(env, "HYPHA_MODEL_LIMITS"))
        out["model_prices"] = {str(k): Price.of(v)
                               for k, v in _json(env, "HYPHA_MODEL_PRICES").items()}
        out["model_base_urls"] = check_base_urls(_json(env, "HYPHA_MODEL_BASE_URLS"))
    except (TypeError, ValueError) as exc:
        raise SetupError(f"HYPHA_MODEL_* settings: {exc}") from None
    return out


def _json(env: Mapping[str, str], name: str) -> dict[str, Any]:
    raw = env.get(name, "").strip()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        raise SetupError(f"{name} must be a JSON object") from None
    if not isinstance(value, dict):
        raise SetupError(f"{name} must be a JSON object")
    return value


_N = TypeVar("_N", int, float)


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    """A number of seconds ``>= 0``."""
    return _at_least(env, name, default, float, 0, "a number of seconds", ">= 0")


def _count(env: Mapping[str, str], name: str, default: int) -> int:
    """A positive integer variable (a count or bytes)."""
    return _at_least(env, name, default, int, 1, "a positive integer", "a positive integer")


def _at_least(env: Mapping[str, str], name: str, default: _N, kind: Callable[[str], _N],
              low: _N, what: str, bound: str) -> _N:
    """The variable as ``kind`` (``default`` when unset), refused under ``low``."""
    value = _read(env, name, kind, what)
    if value is None:
        return default
    if value < low:
        raise SetupError(f"{name} must be {bound}, got {env[name].strip()!r}")
    return value


def _number(env: Mapping[str, str], name: str, default: float, low: float, *,
            strict: bool = False) -> float:
    """A finite number variable ``>= low`` (``strict``: ``> low``)."""
    value = _read(env, name, float, "a number")
    if value is None:
        return default
    if not math.isfinite(value) or value < low or (strict and value == low):
        raise SetupError(f"{name} must be {'>' if strict else '>='} {low:g}, "
                         f"got {env[name].strip()!r}")
    return value


def _read(env: Mapping[str, str], name: str, kind: Callable[[str], _N],
          what: str) -> _N | None:
    """The variable ``name`` as ``kind`` (None: unset or blank); unreadable: a
    ``SetupError`` saying it must be ``what``."""
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        return kind(raw)
    except ValueError:
        raise SetupError(f"{name} must be {what}, got {raw!r}") from None


def _default_backend(broker: str) -> str:
    if broker.startswith(("redis://", "rediss://")):
        return broker
    raise SetupError(
        f"HYPHA_RESULT_BACKEND is required with broker {broker.split('@')[-1]!r}: "
        "fan-out joins need a result backend with native chord support, e.g. redis://..."
    )


def broker_delivery_limit(delivery_limit: int) -> int:
    """RabbitMQ's quorum ``x-delivery-limit``: a backstop above hypha's own count. The
    broker counts every return of a message (prefetch bounces at a warm restart too);
    hypha counts only deliveries that started (``node.execution.redelivered``)."""
    return max(10, 3 * delivery_limit)


def _queue(name: str) -> Queue:
    """A queue on its own direct exchange, so no other queue receives its messages."""
    return Queue(name, Exchange(name, "direct"), routing_key=name)


def celery_config(settings: Settings) -> dict[str, Any]:
    """The Celery profile hypha runs with (JSON only, named queues, task events on)."""
    conf: dict[str, Any] = {
        "broker_url": settings.broker_url,
        "result_backend": settings.result_backend,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "event_serializer": "json",
        "task_default_queue": NODES_QUEUE,
        "task_queues": [_queue(COORDINATOR_QUEUE), _queue(NODES_QUEUE), _queue(EFFECTS_QUEUE),
                        _queue(AGENTS_QUEUE), _queue(IO_QUEUE),
                        _queue(DEAD_LETTER_QUEUE)],
        "task_create_missing_queues": True,
        "task_routes": {COORDINATOR_TASK: {"queue": COORDINATOR_QUEUE},
                        SUPERVISOR_TASK: {"queue": COORDINATOR_QUEUE},
                        AGENT_PUMP_TASK: {"queue": AGENTS_QUEUE}},
        # at-least-once for idempotent tasks (each task sets acks_late itself; at-most-once
        # node tasks ack early): a killed worker process's message is requeued
        "task_reject_on_worker_lost": True,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        # beat keeps its (interval-only) schedule in memory: no shelve (pickle) file
        "beat_scheduler": "celery.beat:Scheduler",
        "beat_schedule": {"hypha-supervisor": {"task": SUPERVISOR_TASK,
                                               "schedule": settings.sweep_interval,
                                               "options": {"queue": COORDINATOR_QUEUE,
                                                           "expires": settings.sweep_interval}}},
        "worker_send_task_events": not settings.embedded,
        "task_send_sent_event": not settings.embedded,
        "task_track_started": False,
        "result_extended": False,
        "result_expires": 86400,
        "broker_connection_retry_on_startup": True,
        "worker_hijack_root_logger": False,
        "worker_redirect_stdouts": False,
        "enable_utc": True,
    }
    if settings.broker_url.startswith(("redis://", "rediss://")):
        vt = {"visibility_timeout": settings.visibility_timeout}
        conf["broker_transport_options"] = vt
        conf["result_backend_transport_options"] = vt
        conf["visibility_timeout"] = settings.visibility_timeout
    if settings.embedded:
        # the memory transport polls; its 1 s default would cost a second per hop
        conf["broker_transport_options"] = {"polling_interval": 0.005}
    # malformed / unknown-task messages become dead-letter records, never a crash
    conf["worker_consumer"] = CONSUMER
    from hypha_celery.runtime import rabbit  # rabbit imports this module

    if rabbit.is_amqp(settings.broker_url):
        # quorum queues dead-lettering after delivery_limit deliveries (global QoS off:
        # Celery detects them, prefetch is static); direct exchanges, so countdowns are
        # ETA messages held by the worker (native delayed delivery rejects < 1 s)
        conf["task_queues"] = rabbit.hypha_queues(settings.broker_delivery_limit)
    conf.update(celery_tls(settings.broker_url, settings.result_backend, settings.tls))
    conf.update(settings.celery_overrides)
    return conf
