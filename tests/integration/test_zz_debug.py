import time
from tests.integration.helpers import Stack
def test_dbg(redis_stack: Stack) -> None:
    s = redis_stack
    run = s.client.start("itest", {"question": "q"})
    time.sleep(1)
    print("KEYS", s.redis.keys("*"))
    for k in (b"hypha.coordinator", b"hypha.nodes"):
        print(k, s.redis.type(k), s.redis.llen(k) if s.redis.type(k) == b"list" else None)
    print([e.kind for e in run.events()]); print([s.redis.get(k) for k in s.redis.keys("celery-task-meta*")]); print(s.worker.tail())
    print(s.client.celery.conf.broker_url, s.client.celery.pool.connection.as_uri())
    assert False
