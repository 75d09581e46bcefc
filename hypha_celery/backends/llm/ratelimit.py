"""Rate limits per provider key, shared by every worker: requests and tokens per minute.

A *limit key* is ``<vendor>:<key id>``, the key id being the first 12 hex digits of the
SHA-256 of the API key (:func:`limit_key`): never the key. Limits are configured per
vendor (``"openai"``: every OpenAI key) or per limit key (``"openai:3f2a9c01b7e4"``: that
key only, which wins): :class:`Limit` ``(rpm, tpm)``.

The decision is GCRA (the generic cell rate algorithm, a token bucket kept as one
timestamp per dimension): a bucket holds one minute's allowance and refills continuously,
so a full minute's requests may go at once and then one every ``60 / rpm`` seconds. A
call asks for one request and its estimated tokens; it is granted only when *both*
dimensions have room, else it is told how long to wait. :class:`RedisLimiter` decides in
one round trip: a Lua script (sent once, then run by its SHA) reads the key's hash, takes
the time from Redis (one clock for every worker), and writes the new state only when it
grants. :class:`MemoryLimiter` is the same algorithm in the process (the embedded
default, or a single worker).

``acquire(key, tokens, max_wait)`` sleeps what the decision says, up to ``max_wait``
seconds in all; a call that would have to wait longer fails at once with
``BackendError(kind="rate_limited", retry_after=seconds)``, which a node's
``RetryPolicy`` retries (class ``rate_limit``). ``pause(key, seconds)``, on a provider's
429 with ``retry-after``, stops every worker from calling with that key until then (kept
in Redis with the key's expiry). Keys without a configured limit are still paused by a
429; :data:`NO_LIMITS` decides nothing and never waits.

**Concurrency.** Providers also bound requests in flight per key. ``Limit(concurrency=n)``
lets at most ``n`` calls with a key run at once, across every worker: a call holds a
*slot* (:meth:`Limiter.hold`, a :class:`Slot`) from before its request is sent until its
stream is closed. :class:`RedisLimiter` keeps a key's slots in a sorted set (member: a
random holder token, score: the end of its lease); taking one is one Lua round trip that
first drops expired leases. A slot is a *lease* of ``slot_lease`` seconds (default
:data:`SLOT_LEASE_S`, 30) that a thread of the holding process renews every third of it
(one round trip per key, for all the slots the process holds), so a worker that crashes
or is killed leaks its slots for one lease at most; the next taker reclaims them (counted
as ``slots_reclaimed``). A call that finds every slot busy polls (every 20 ms at first,
doubling to 250 ms; no fairness between waiters) within the same ``max_wait`` as the
rates, then fails ``BackendError(kind="rate_limited")`` naming the concurrency limit.
:class:`MemoryLimiter` holds slots in the process (a condition variable wakes a waiter
when one is released; no lease: the process holds them all). A key without a
``concurrency`` costs nothing: :meth:`Limiter.hold` returns :data:`FREE` without a round
trip. :meth:`Limiter.in_flight` says how many slots of a key are held now.

Counters (:meth:`Limiter.stats`): calls granted, calls that waited, seconds waited,
calls refused, pauses; slots granted, slot holders that waited, seconds waited for a
slot, slots refused, expired leases reclaimed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Annotated, Any

from pydantic import PlainSerializer, TypeAdapter

from hypha_celery.backends.error import BackendError
from hypha_celery.backends.llm import cancel
from hypha_celery.middleware._process import on_fork

__all__ = ["FREE", "NO_LIMITS", "SLOT_LEASE_S", "Limit", "Limiter", "LimiterStats",
           "MemoryLimiter", "RedisLimiter", "Slot", "limit_key", "parse_limits"]

log = logging.getLogger(__name__)

_WINDOW = 60.0  # seconds: limits are per minute, a bucket holds a minute's allowance
#: Seconds a concurrency slot is leased for; its holder renews it every third of that.
SLOT_LEASE_S = 30.0
_FIRST_POLL_S = 0.02  # a waiter for a slot asks again after this, doubling ...
_MAX_POLL_S = 0.25  # ... up to this


@dataclass(frozen=True, slots=True)
class Limit:
    """Requests and tokens per minute, and calls in flight at once (None or 0: that
    dimension is not limited)."""

    rpm: float | None = None
    tpm: float | None = None
    concurrency: int | None = None

    def __post_init__(self) -> None:
        for name in ("rpm", "tpm"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool)
                                      or not isinstance(value, int | float) or value < 0):
                raise ValueError(f"Limit.{name} must be a number >= 0 (per minute)")
        value = self.concurrency
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 0):
            raise ValueError("Limit.concurrency must be an integer >= 0 (calls at once)")

    @property
    def empty(self) -> bool:
        return not self.rpm and not self.tpm and not self.concurrency

    @classmethod
    def of(cls, value: Limit | Mapping[str, Any]) -> Limit:
        if isinstance(value, Limit):
            return value
        if not isinstance(value, Mapping) or set(value) - {"rpm", "tpm", "concurrency"}:
            raise ValueError("a limit is Limit(rpm=..., tpm=..., concurrency=...) or "
                             "{'rpm': n, 'tpm': n, 'concurrency': n}")
        return cls(value.get("rpm"), value.get("tpm"), value.get("concurrency"))


def limit_key(vendor: str, api_key: str) -> str:
    """``<vendor>:<first 12 hex digits of sha256(api_key)>``: names a key, reveals nothing."""
    return f"{vendor}:{hashlib.sha256(api_key.encode()).hexdigest()[:12]}"


def parse_limits(value: Mapping[str, Any] | str | None) -> dict[str, Limit]:
    """``{"openai": {"rpm": 500, "tpm": 200000}, ...}`` (or that JSON text) as limits."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, Mapping):
        raise ValueError("model limits are a mapping of vendor or limit key to a limit")
    return {str(k): Limit.of(v) for k, v in value.items()}


def _micro(seconds: float) -> float:
    return round(seconds, 6)


#: Seconds, written to the microsecond.
Seconds = Annotated[float, PlainSerializer(_micro)]


@dataclass
class LimiterStats:
    granted: int = 0
    waited: int = 0
    wait_seconds: Seconds = 0.0
    refused: int = 0
    paused: int = 0
    slots_granted: int = 0
    slots_waited: int = 0
    slot_wait_seconds: Seconds = 0.0
    slots_refused: int = 0
    slots_reclaimed: int = 0

    def to_json(self) -> dict[str, float | int]:
        """Every count, in order; waits rounded to the microsecond."""
        json: dict[str, float | int] = _STATS.dump_python(self)
        return json


_STATS = TypeAdapter(LimiterStats)


class Slot:
    """One held concurrency slot of a limit key: :meth:`release` it (or leave its
    ``with`` block) when the call's stream is closed; releasing twice is harmless.
    ``waited``: seconds it took to get it."""

    __slots__ = ("_limiter", "_released", "key", "token", "waited")

    def __init__(self, limiter: Limiter | None, key: str, token: str, waited: float) -> None:
        self._limiter = limiter
        self.key, self.token, self.waited = key, token, waited
        self._released = limiter is None

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        assert self._limiter is not None
        self._limiter._release_slot(self.key, self.token)

    def __enter__(self) -> Slot:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


#: The slot of a key without a concurrency limit: nothing to release.
FREE = Slot(None, "", "", 0.0)


def _cancelled(key: str) -> BackendError:
    """A wait for room or a slot ended by the call's cancel (``llm.cancel``)."""
    return BackendError(key.partition(":")[0], "cancelled", False,
                        message="the call was cancelled while it waited for its rate limit")


class Limiter:
    """The interface, and the loop shared by its implementations: a subclass decides
    (:meth:`decide`: seconds to wait, 0 when granted) and stores pauses (:meth:`pause`)."""

    def __init__(self, limits: Mapping[str, Limit | Mapping[str, Any]] | None = None) -> None:
        self.limits = {k: Limit.of(v) for k, v in (limits or {}).items()}
        self._stats = LimiterStats()
        self._stats_lock = threading.Lock()

    def limit_for(self, key: str) -> Limit:
        """The limit of ``key`` (``vendor:keyid``): its own, else its vendor's, else none."""
        found = self.limits.get(key)
        if found is None:
            found = self.limits.get(key.partition(":")[0])
        return found or Limit()

    def decide(self, key: str, tokens: int) -> float:
        """Take one request and ``tokens`` from ``key``'s buckets now, or say how many
        seconds to wait before asking again (nothing taken)."""
        raise NotImplementedError

    def pause(self, key: str, seconds: float) -> None:
        """No call with ``key`` for ``seconds`` (a provider's 429 ``retry-after``)."""
        raise NotImplementedError

    def acquire(self, key: str, tokens: int = 0, max_wait: float = 60.0) -> float:
        """Wait for room for one request and ``tokens``; returns the seconds waited.
        Raises ``BackendError(kind="rate_limited")`` (``retry_after`` set) when the room
        would come later than ``max_wait`` seconds after the call."""
        began = time.monotonic()
        deadline = began + max(0.0, max_wait)
        waited = False
        while True:
            wait = self.decide(key, max(0, int(tokens)))
            if wait <= 0:
                spent = time.monotonic() - began
                self._count(granted=1, waited=int(waited),
                            wait_seconds=spent if waited else 0.0)
                return spent if waited else 0.0
            if time.monotonic() + wait > deadline:
                self._count(refused=1,
                            wait_seconds=time.monotonic() - began if waited else 0.0)
                raise BackendError(key.partition(":")[0], "rate_limited", True,
                                   retry_after=round(wait, 3),
                                   message=f"rate limit of {key}: no room within "
                                           f"{max_wait:g}s (next in {wait:.3f}s)")
            waited = True
            if cancel.pause(wait):
                raise _cancelled(key)

    def hold(self, key: str, max_wait: float = 60.0) -> Slot:
        """One of ``key``'s concurrent slots (its limit's ``concurrency``), waiting for a
        release up to ``max_wait`` seconds, else ``BackendError(kind="rate_limited")``.
        A key without a concurrency limit gets :data:`FREE` at once."""
        limit = self.limit_for(key).concurrency
        if not limit:
            return FREE
        began = time.monotonic()
        deadline = began + max(0.0, max_wait)
        token, poll, waited = uuid.uuid4().hex, _FIRST_POLL_S, False
        while not self._take_slot(key, token, limit):
            left = deadline - time.monotonic()
            if left <= 0:
                self._count(slots_refused=1, slot_wait_seconds=time.monotonic() - began)
                raise BackendError(key.partition(":")[0], "rate_limited", True,
                                   message=f"concurrency limit of {key}: all {limit} slots "
                                           f"busy for {max_wait:g}s")
            self._await_release(key, min(poll, left))
            if cancel.requested():
                raise _cancelled(key)
            poll, waited = min(poll * 2, _MAX_POLL_S), True
        spent = time.monotonic() - began if waited else 0.0
        self._count(slots_granted=1, slots_waited=int(waited), slot_wait_seconds=spent)
        return Slot(self, key, token, spent)

    def in_flight(self, key: str) -> int:
        """Slots of ``key`` held now (by every worker sharing the limiter)."""
        raise NotImplementedError

    def _take_slot(self, key: str, token: str, limit: int) -> bool:
        """Hold a slot for ``token`` if fewer than ``limit`` are held (True)."""
        raise NotImplementedError

    def _await_release(self, key: str, seconds: float) -> None:
        """Wait up to ``seconds`` for a slot of ``key`` to be released (or just sleep;
        less when the call is cancelled)."""
        cancel.pause(seconds)

    def _release_slot(self, key: str, token: str) -> None:
        raise NotImplementedError

    def stats(self) -> dict[str, float | int]:
        with self._stats_lock:
            return self._stats.to_json()

    def _count(self, **deltas: float) -> None:
        with self._stats_lock:
            for name, delta in deltas.items():
                setattr(self._stats, name, getattr(self._stats, name) + delta)

    def close(self) -> None:
        return None


class _NoLimits(Limiter):
    """Decides nothing: every call is granted at once; pauses are ignored."""

    def decide(self, key: str, tokens: int) -> float:
        return 0.0

    def pause(self, key: str, seconds: float) -> None:
        return None

    def acquire(self, key: str, tokens: int = 0, max_wait: float = 60.0) -> float:
        return 0.0

    def hold(self, key: str, max_wait: float = 60.0) -> Slot:
        return FREE

    def in_flight(self, key: str) -> int:
        return 0


#: The limiter of a client that has none.
NO_LIMITS: Limiter = _NoLimits()


def _gcra(tat: float, now: float, per_minute: float | None, cost: float
          ) -> tuple[float, float]:
    """One GCRA dimension: ``(new_tat, wait)``; wait 0 means granted."""
    if not per_minute or cost <= 0:
        return tat, 0.0
    interval = _WINDOW / per_minute
    cost = min(cost, per_minute)  # a call bigger than the bucket goes when it is full
    new_tat = max(tat, now) + cost * interval
    allow_at = new_tat - _WINDOW
    return (new_tat, 0.0) if allow_at <= now else (tat, allow_at - now)


@dataclass
class _Bucket:
    req: float = 0.0
    tok: float = 0.0
    paused_until: float = 0.0


class MemoryLimiter(Limiter):
    """GCRA in this process (threads share it; processes do not)."""

    def __init__(self, limits: Mapping[str, Limit | Mapping[str, Any]] | None = None) -> None:
        super().__init__(limits)
        self._lock = threading.Lock()
        self._buckets: dict[str, _Bucket] = {}
        self._released = threading.Condition(threading.Lock())
        self._slots: dict[str, set[str]] = {}

    def decide(self, key: str, tokens: int) -> float:
        limit = self.limit_for(key)
        now = time.time()
        with self._lock:
            bucket = self._buckets.setdefault(key, _Bucket())
            if bucket.paused_until > now:
                return bucket.paused_until - now
            req, wait_req = _gcra(bucket.req, now, limit.rpm, 1)
            tok, wait_tok = _gcra(bucket.tok, now, limit.tpm, tokens)
            wait = max(wait_req, wait_tok)
            if wait <= 0:
                bucket.req, bucket.tok = req, tok
            return wait

    def pause(self, key: str, seconds: float) -> None:
        if seconds <= 0:
            return
        with self._lock:
            bucket = self._buckets.setdefault(key, _Bucket())
            bucket.paused_until = max(bucket.paused_until, time.time() + seconds)
        self._count(paused=1)

    def in_flight(self, key: str) -> int:
        with self._released:
            return len(self._slots.get(key, ()))

    def _take_slot(self, key: str, token: str, limit: int) -> bool:
        with self._released:
            held = self._slots.setdefault(key, set())
            if len(held) >= limit:
                return False
            held.add(token)
            return True

    def _await_release(self, key: str, seconds: float) -> None:
        with self._released:
            self._released.wait(seconds)

    def _release_slot(self, key: str, token: str) -> None:
        with self._released:
            self._slots.get(key, set()).discard(token)
            self._released.notify_all()


# KEYS[1]: the key's hash {req, tok, pause} (ms timestamps). ARGV: rpm, tpm, tokens.
# Returns the milliseconds to wait as a string (0: granted, state written).
_DECIDE = """
local now_t = redis.call('TIME')
local now = tonumber(now_t[1]) * 1000 + math.floor(tonumber(now_t[2]) / 1000)
local st = redis.call('HMGET', KEYS[1], 'req', 'tok', 'pause')
local pause = tonumber(st[3]) or 0
if pause > now then return tostring(pause - now) end
local window = 60000
local function gcra(tat, per_minute, cost)
  if per_minute <= 0 or cost <= 0 then return tat, 0 end
  if cost > per_minute then cost = per_minute end
  local new_tat = math.max(tat, now) + cost * window / per_minute
  local allow_at = new_tat - window
  if allow_at <= now then return new_tat, 0 end
  return tat, allow_at - now
end
local req, wreq = gcra(tonumber(st[1]) or 0, tonumber(ARGV[1]), 1)
local tok, wtok = gcra(tonumber(st[2]) or 0, tonumber(ARGV[2]), tonumber(ARGV[3]))
local wait = math.max(wreq, wtok)
if wait > 0 then return tostring(wait) end
redis.call('HSET', KEYS[1], 'req', tostring(req), 'tok', tostring(tok))
local last = math.max(req, tok, pause)
if last > now then redis.call('PEXPIRE', KEYS[1], math.ceil(last - now) + 1000) end
return '0'
"""

# KEYS[1]: the key's hash. ARGV[1]: milliseconds. The later pause wins.
_PAUSE = """
local now_t = redis.call('TIME')
local now = tonumber(now_t[1]) * 1000 + math.floor(tonumber(now_t[2]) / 1000)
local untl = now + tonumber(ARGV[1])
local old = tonumber(redis.call('HGET', KEYS[1], 'pause')) or 0
if untl > old then
  redis.call('HSET', KEYS[1], 'pause', tostring(untl))
  local keep = tonumber(ARGV[1]) + 1000
  if redis.call('PTTL', KEYS[1]) < keep then redis.call('PEXPIRE', KEYS[1], keep) end
end
return 1
"""


# KEYS[1]: the key's slot set (member: holder token, score: lease end in ms).
# ARGV: limit, token, lease ms. Returns {1 if taken else 0, expired leases removed}.
_TAKE = """
local now_t = redis.call('TIME')
local now = tonumber(now_t[1]) * 1000 + math.floor(tonumber(now_t[2]) / 1000)
local expired = redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return {0, expired} end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) + 1000)
return {1, expired}
"""

# KEYS[1]: the key's slot set. ARGV[1]: lease ms, ARGV[2..]: tokens this process holds.
# Extends the leases still there; returns how many were.
_RENEW = """
local now_t = redis.call('TIME')
local now = tonumber(now_t[1]) * 1000 + math.floor(tonumber(now_t[2]) / 1000)
local kept = 0
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), ARGV[i])
    kept = kept + 1
  end
end
if kept > 0 then redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]) + 1000) end
return kept
"""

# KEYS[1]: the key's slot set. Returns the leases not expired.
_COUNT = """
local now_t = redis.call('TIME')
local now = tonumber(now_t[1]) * 1000 + math.floor(tonumber(now_t[2]) / 1000)
return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
"""


class RedisLimiter(Limiter):
    """GCRA in Redis: one ``EVALSHA`` per decision, shared by every worker on the server.
    ``client`` is a ``redis.Redis`` (or a URL); keys are ``<prefix><limit key>``, and
    ``<prefix><limit key>:slots`` for concurrency slots, leased for ``slot_lease``
    seconds and renewed by a thread of this process while held (see the module
    docstring)."""

    def __init__(self, client: Any, limits: Mapping[str, Limit | Mapping[str, Any]] | None = None,
                 *, prefix: str = "hypha:ratelimit:", slot_lease: float = SLOT_LEASE_S) -> None:
        super().__init__(limits)
        if not slot_lease > 0:
            raise ValueError("slot_lease must be > 0 seconds")
        if isinstance(client, str):
            import redis

            client = redis.Redis.from_url(client, socket_timeout=5.0,
                                          socket_connect_timeout=2.0)
        self.client = client
        self.prefix = prefix
        self.slot_lease = float(slot_lease)
        self._decide = client.register_script(_DECIDE)
        self._pause = client.register_script(_PAUSE)
        self._take = client.register_script(_TAKE)
        self._renew = client.register_script(_RENEW)
        self._count_slots = client.register_script(_COUNT)
        self._held_lock = threading.Lock()
        self._held: dict[str, str] = {}  # token -> limit key, the slots this process holds
        self._renewer: threading.Thread | None = None
        on_fork(self._after_fork)  # held weakly: forgotten with this limiter

    def _after_fork(self) -> None:
        """A forked child holds none of its parent's slots, nor its thread (or its lock)."""
        self._held_lock = threading.Lock()
        self._held, self._renewer = {}, None

    def decide(self, key: str, tokens: int) -> float:
        limit = self.limit_for(key)
        waited = self._decide(keys=[self.prefix + key],
                              args=[limit.rpm or 0, limit.tpm or 0, tokens])
        return float(waited) / 1000.0

    def pause(self, key: str, seconds: float) -> None:
        if seconds <= 0:
            return
        self._pause(keys=[self.prefix + key], args=[max(1, int(seconds * 1000))])
        self._count(paused=1)

    # -- concurrency slots ---------------------------------------------------------------
    def in_flight(self, key: str) -> int:
        return int(self._count_slots(keys=[self._slots_key(key)]))

    def _slots_key(self, key: str) -> str:
        return f"{self.prefix}{key}:slots"

    def _take_slot(self, key: str, token: str, limit: int) -> bool:
        taken, expired = self._take(keys=[self._slots_key(key)],
                                    args=[limit, token, int(self.slot_lease * 1000)])
        if expired:
            self._count(slots_reclaimed=int(expired))
        if taken:
            self._keep(key, token)
        return bool(taken)

    def _release_slot(self, key: str, token: str) -> None:
        with self._held_lock:
            self._held.pop(token, None)
        try:
            self.client.zrem(self._slots_key(key), token)
        except Exception as exc:  # Redis away: the lease, no longer renewed, lapses
            log.warning("releasing a concurrency slot of %s failed (%s): it is free again "
                        "within %gs", key, type(exc).__name__, self.slot_lease)

    def _keep(self, key: str, token: str) -> None:
        """Renew ``token``'s lease while it is held (the renewing thread starts with the
        first held slot and ends when none is held)."""
        with self._held_lock:
            self._held[token] = key
            if self._renewer is None:
                self._renewer = threading.Thread(target=self._renew_loop, daemon=True,
                                                 name="hypha-slot-leases")
                self._renewer.start()

    def _renew_loop(self) -> None:
        while True:
            time.sleep(self.slot_lease / 3)
            with self._held_lock:
                if not self._held:
                    self._renewer = None
                    return
                by_key: dict[str, list[str]] = {}
                for token, key in self._held.items():
                    by_key.setdefault(key, []).append(token)
            for key, tokens in by_key.items():
                try:
                    self._renew(keys=[self._slots_key(key)],
                                args=[int(self.slot_lease * 1000), *tokens])
                except Exception as exc:  # Redis away: the leases may lapse; try next time
                    log.warning("renewing %d concurrency slot lease(s) of %s failed: %s",
                                len(tokens), key, type(exc).__name__)

    def close(self) -> None:
        self.client.close()

