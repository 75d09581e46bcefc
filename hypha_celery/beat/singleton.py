"""One recovery sweep at a time, however many celery beats send the task.

The lock is taken by the sweep itself (:func:`~hypha_celery.beat.supervisor.sweep`), not
by beat: it works with any scheduler, with two beats started by mistake (or a rolling
deploy that briefly runs two), and it also keeps a ``hypha sweep`` typed by hand from
overlapping one beat sent.

* With Redis (the broker or the result backend), the key ``hypha:supervisor:lock``:
  ``SET NX PX`` with a random token, renewed every ``TTL / 3`` while the sweep runs (a
  sweep that outlives a crashed process blocks the next ones for at most ``TTL``),
  released by a compare-and-delete, so only the holder ever releases it.
* Without Redis (embedded, or RabbitMQ with no Redis), a process-local lock.

A sweep celery beat sent (the ``hypha.supervisor`` task) skips when the lock is taken,
and keeps it for :data:`GAP` of the schedule's interval after it ends, so a second beat's
message, arriving a moment later, skips too: sweeps run at the interval's rate, not at
twice it. A sweep called by hand waits (up to :data:`WAIT`) for one in progress and
ignores that gap. If Redis fails, the sweep runs anyway: a duplicate sweep is harmless
(every decision re-checks the locked run row), the lock only saves the work.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import timedelta
from typing import Any

from hypha_celery.runtime.config import SUPERVISOR_TASK
from hypha_celery.runtime.core import Runtime
from hypha_celery.runtime.notifier import RedisNotifier

log = logging.getLogger(__name__)

KEY = "hypha:supervisor:lock"
#: Seconds the lock lives without renewal (renewed every third of it while held).
TTL = 10.0
#: Seconds a sweep called by hand waits for one in progress.
WAIT = 15.0
#: Share of the beat interval a beat-sent sweep keeps the lock for after it started.
GAP = 0.8

_ACQUIRE = """
local v = redis.call('GET', KEYS[1])
if v and not (ARGV[3] == '1' and string.sub(v, 1, 5) == 'done:') then return 0 end
redis.call('SET', KEYS[1], 'run:' .. ARGV[1], 'PX', ARGV[2])
return 1
"""
_RENEW = """
if redis.call('GET', KEYS[1]) == 'run:' .. ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) ~= 'run:' .. ARGV[1] then return 0 end
if tonumber(ARGV[2]) > 0 then
  redis.call('SET', KEYS[1], 'done:' .. ARGV[1], 'PX', ARGV[2])
else
  redis.call('DEL', KEYS[1])
end
return 1
"""


@contextmanager
def sweeping(rt: Runtime) -> Iterator[bool]:
    """Hold the sweep lock for the block; yields False when the sweep must skip."""
    beat = from_beat(rt)
    wait, hold = (0.0, GAP * interval(rt)) if beat else (WAIT, 0.0)
    notifier = rt.notifier
    lock = RedisLock(notifier.client) if isinstance(notifier, RedisNotifier) else LOCAL
    with lock.held(wait=wait, take_done=not beat, hold=hold) as mine:
        yield mine


def from_beat(rt: Runtime) -> bool:
    """This sweep runs in the ``hypha.supervisor`` task (celery beat sent it)."""
    task = rt.app.current_task
    return task is not None and getattr(task, "name", None) == SUPERVISOR_TASK


def interval(rt: Runtime) -> float:
    """The supervisor's interval in the app's ``beat_schedule`` (0: none found)."""
    for entry in dict(rt.app.conf.beat_schedule or {}).values():
        if entry.get("task") != SUPERVISOR_TASK:
            continue
        every = entry.get("schedule")
        every = getattr(every, "run_every", every)
        if isinstance(every, timedelta):
            return every.total_seconds()
        if isinstance(every, int | float):
            return float(every)
    return 0.0


class RedisLock:
    """The lock in Redis (``client``: a redis-py client)."""

    def __init__(self, client: Any, key: str = KEY, ttl: float = TTL) -> None:
        self.client, self.key, self.ttl_ms = client, key, int(ttl * 1000)

    @contextmanager
    def held(self, *, wait: float, take_done: bool, hold: float) -> Iterator[bool]:
        import redis

        token = uuid.uuid4().hex
        started = time.monotonic()
        try:
            mine: bool | None = self._acquire(token, wait, take_done)
        except redis.RedisError as exc:
            log.warning("hypha recovery: sweep lock unavailable (%s); sweeping anyway",
                        type(exc).__name__)
            mine = None
        if not mine:
            yield mine is None
            return
        stop = threading.Event()
        renewer = threading.Thread(target=self._renew, args=(token, stop), daemon=True,
                                   name="hypha-sweep-lock")
        renewer.start()
        try:
            yield True
        finally:
            stop.set()
            renewer.join()
            left = int((hold - (time.monotonic() - started)) * 1000)
            with suppress(redis.RedisError):  # else it expires after the TTL
                self.client.eval(_RELEASE, 1, self.key, token, max(left, 0))

    def _acquire(self, token: str, wait: float, take_done: bool) -> bool:
        deadline = time.monotonic() + wait
        while True:
            if self.client.eval(_ACQUIRE, 1, self.key, token, self.ttl_ms,
                                "1" if take_done else "0"):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def _renew(self, token: str, stop: threading.Event) -> None:
        import redis

        while not stop.wait(self.ttl_ms / 3000):
            try:
                if not self.client.eval(_RENEW, 1, self.key, token, self.ttl_ms):
                    log.warning("hypha recovery: the sweep lock was lost (expired)")
                    return
            except redis.RedisError:
                pass  # try again at the next tick; the TTL covers two missed renewals


class LocalLock:
    """The lock of one process (no Redis)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._running = False
        self._done_until = 0.0

    @contextmanager
    def held(self, *, wait: float, take_done: bool, hold: float) -> Iterator[bool]:
        started = time.monotonic()
        with self._cond:
            mine = False
            while not mine:
                now = time.monotonic()
                mine = not self._running and (take_done or now >= self._done_until)
                if not mine and now - started >= wait:
                    break
                if not mine:
                    self._cond.wait(min(started + wait - now, 0.05))
            self._running = self._running or mine
        if not mine:
            yield False
            return
        try:
            yield True
        finally:
            with self._cond:
                self._running = False
                self._done_until = started + hold
                self._cond.notify_all()


LOCAL = LocalLock()
