"""A process that takes concurrency slots from a :class:`RedisLimiter` (run by
``test_ratelimit.py`` as ``python -m tests.backends.llm.slots_worker``).

``hold URL PREFIX LEASE``: take one slot of ``openai:k1`` (concurrency 1), print ``held``,
then sleep until killed. ``calls URL PREFIX THREADS CALLS LIMIT``: ``THREADS`` threads each
make ``CALLS`` calls that hold a slot (concurrency ``LIMIT``) for 50 ms, counting the
calls in flight in Redis (``<prefix>live``, its highest value in ``<prefix>max``); prints
``done`` once all are through.
"""

from __future__ import annotations

import sys
import threading
import time

import redis

from hypha_celery.backends.llm.ratelimit import Limit, RedisLimiter

KEY = "openai:k1"
# KEYS: the live count, its highest value. One more call in flight; returns the count.
_ENTER = """
local n = redis.call('INCR', KEYS[1])
if n > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], n) end
return n
"""


def hold(url: str, prefix: str, lease: float) -> None:
    limiter = RedisLimiter(url, {"openai": Limit(concurrency=1)}, prefix=prefix,
                           slot_lease=lease)
    limiter.hold(KEY, max_wait=10)
    print("held", flush=True)
    time.sleep(600)


def calls(url: str, prefix: str, threads: int, n: int, limit: int) -> None:
    limiter = RedisLimiter(url, {"openai": Limit(concurrency=limit)}, prefix=prefix)
    client = redis.Redis.from_url(url)
    enter = client.register_script(_ENTER)
    keys = [f"{prefix}live", f"{prefix}max"]

    def work() -> None:
        for _ in range(n):
            with limiter.hold(KEY, max_wait=60):
                enter(keys=keys)
                time.sleep(0.05)
                client.decr(keys[0])

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    print("done", flush=True)


if __name__ == "__main__":
    what, url, prefix, *rest = sys.argv[1:]
    if what == "hold":
        hold(url, prefix, float(rest[0]))
    else:
        calls(url, prefix, int(rest[0]), int(rest[1]), int(rest[2]))
