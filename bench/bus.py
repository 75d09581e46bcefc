"""The message bus (issue 25): delivery latency, throughput, worker memory with queued
messages.

    .venv/bin/python bench/bus.py [--samples N] [--messages N] [--queued N]

One environment (a claimed Redis database, a fresh PostgreSQL database, migrated) with ONE
real ``celery -A bench.app:celery worker -P prefork -c 2`` that consumes ``hypha.agents``
(the bus's wake-ups and the agents' turns) and ``celery`` (the raw baseline task); one
JSON document out (also ``bench/results/bus.json``).

* **latency** (target: publish -> delivered to a waiting agent <= 5 ms p50, stated as a
  ratio to a raw Celery round trip on the same broker). ``--samples`` messages, one at a
  time, to an idle agent (``Counter`` on a looping Mock backend), each in a run's scope so
  its ``message.delivered`` event carries the clock of the process that delivered it.
  Publish -> delivered: the client's time before ``publish`` to ``message.delivered``: an
  idle agent's message is delivered by the publishing transaction itself and handed to
  the agent right after the commit (no wake-up hop; ``breakdown_p50_ms`` shows where the
  time goes). Also publish -> the agent's reply pulled by the waiting client (the hand,
  the turn, the completion task, the reply's publish, the client's poll). Interleaved
  with ``bench.add.delay(1, 1).get()`` (the raw round trip: publish, worker, result
  backend).
* **throughput** (target: >= 2,000 messages/s through one queue with PostgreSQL). One
  producer process and one consumer process on one queue (a ``human`` recipient: no agent
  turn in the way), ``--messages`` messages: batched (``publish_many`` / ``pull_many`` /
  ``acknowledge_many``, 100 at a time) and one at a time. Messages/s = messages / (first
  publish -> last acknowledge).
* **memory** (target: no worker memory growth). The worker's RSS (main + pool children)
  after warm-up turns; then ``--queued`` messages are queued for a second agent (available in
  an hour: waiting in the store; past ``WAKE_HORIZON_S`` no wake-up task is sent) and
  as many for a ``human`` recipient, and the agent serves the same number of turns
  again; RSS again. Growth = the difference (target <= 5 MB: noise of the same turns).
"""

from __future__ import annotations

import argparse
import multiprocessing
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: ``bench`` importable, its files not (a
    # bench/langgraph.py would hide the langgraph package)
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench._harness import BenchEnv, _finish, machine_info, setup_info, summary, target
from bench.agents_app import Counter, LoopingMock
from hypha_celery.backends import BackendEvent
from hypha_celery.bus import Bus, Message, QueueFull, Scope, agent, human
from hypha_celery.events.fold import new_view
from hypha_celery.runtime import lifecycle
from hypha_celery.store import EventStore

QUEUES = "hypha.agents,celery"
SAMPLES = 200
WARMUP = 20
MESSAGES = 20_000
SINGLE = 2_000
BATCH = 100
QUEUED = 10_000
TURNS = 30
TARGET_LATENCY_MS = 5.0
#: Seconds between two latency samples: the worker finishes the last turn's tail (the
#: completion task's acknowledge, the pump's release), so the next message finds the agent
#: waiting, idle.
SETTLE_S = 0.05
#: Seconds a throughput pump may take at most.
PUMP_TIMEOUT_S = 300.0
TARGET_RATE = 2_000.0
TARGET_RSS_DELTA_MB = 5.0
SCOPE = Scope("bench", "s1")
CLIENT = human("bench")


class BusEnv(BenchEnv):
    """:class:`BenchEnv` whose worker consumes the agents' queue (and ``celery``)."""

    queues = QUEUES

    def _stop_worker(self) -> None:
        if self.worker is not None and self.worker.poll() is None:
            self.worker.send_signal(signal.SIGTERM)
            try:
                self.worker.wait(30)
            except subprocess.TimeoutExpired:
                self.worker.kill()
                self.worker.wait(10)


def _script() -> list[BackendEvent]:
    return [BackendEvent.new("result", {"text": "ok"})]


def _run(hypha: Any) -> str:
    """A run row in the bench's scope: its log receives the messages' events."""
    run_id = uuid.uuid4().hex
    with hypha.store.transaction() as tx:
        tx.create(new_view(run_id))
        lifecycle.record(tx, run_id, "run.created",
                         {"graph_id": "bench_bus", "input": {}, "lane": None,
                          "user_id": SCOPE.user_id, "session_id": SCOPE.session_id})
    return run_id


def _to(to: Any, payload: Any, **fields: Any) -> Message:
    return Message.model_validate({"type": "bench", "user_id": SCOPE.user_id,
                                   "session_id": SCOPE.session_id, "from": CLIENT, "to": to,
                                   "payload": payload, **fields})


def latency(env: BusEnv, samples: int) -> dict[str, Any]:
    hypha, add = env.app.hypha, env.app.add
    hypha.agents.start(Counter, name="echo", backend=LoopingMock, scripts=[_script()])
    run_id = _run(hypha)
    sent: list[tuple[str, float, float]] = []  # (id, before publish, reply pulled)

    def one(record: bool) -> None:
        t0 = time.time()
        msg = hypha.bus.publish(_to(agent("echo"), "ping", run_id=run_id))
        reply = hypha.bus.receive(CLIENT, SCOPE, correlation_id=msg.id, timeout=30)
        t1 = time.time()
        assert reply is not None, "no reply"
        hypha.bus.acknowledge(reply.id)
        if record:
            sent.append((msg.id, t0, t1))
        time.sleep(SETTLE_S)  # the worker finishes the turn's tail: the agent waits again

    def raw() -> float:
        t0 = time.perf_counter()
        add.delay(1, 1).get(timeout=30)
        return time.perf_counter() - t0

    for _ in range(WARMUP):
        one(False)
        raw()
    raws = []
    for _ in range(samples):
        one(True)
        raws.append(raw())
    events = hypha.store.events(run_id)
    delivered = {e.payload.get("message_id"): e.ts for e in events
                 if e.type == "message.delivered"}
    enqueued = {e.payload.get("message_id"): e.ts for e in events
                if e.type == "message.enqueued"}
    to_delivered = [delivered[i] - t0 for i, t0, _ in sent]
    in_publish = [enqueued[i] - t0 for i, t0, _ in sent]
    wake_and_pull = [delivered[i] - enqueued[i] for i, _, _ in sent]
    to_reply = [t1 - t0 for _, t0, t1 in sent]
    p50 = statistics.median(to_delivered) * 1000
    raw_p50 = statistics.median(raws) * 1000
    return {"publish_to_delivered_ms": summary(to_delivered, 1000),
            "publish_to_reply_ms": summary(to_reply, 1000),
            "breakdown_p50_ms": {
                "publish_until_enqueued_event": round(statistics.median(in_publish) * 1000, 3),
                "enqueued_event_to_delivered_event": round(
                    statistics.median(wake_and_pull) * 1000, 3)},
            "raw_celery_round_trip_ms": summary(raws, 1000),
            "ratio_delivered_to_raw_p50": round(p50 / raw_p50, 2),
            "p50_ms": round(p50, 3), "raw_p50_ms": round(raw_p50, 3)}


class _Pump:
    """A producer process and a consumer (this process) through one queue."""

    def __init__(self, store_url: str, n: int, batch: int) -> None:
        self.store_url, self.n, self.batch = store_url, n, batch
        self.to = human(f"sink-{uuid.uuid4().hex[:8]}")

    def run(self, bus: Bus) -> tuple[float, int]:
        """Messages per second (first publish -> last acknowledge), queue-full backoffs."""
        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no forked locks
        full = ctx.Value("i", 0)
        ready, go = ctx.Event(), ctx.Event()
        producer = ctx.Process(target=self._produce, args=(full, ready, go))
        producer.start()
        if not ready.wait(60):
            producer.kill()
            raise RuntimeError("the producer process did not start")
        t0 = time.perf_counter()  # the producer's interpreter is up: time the messages only
        go.set()
        acked, end = 0, time.monotonic() + PUMP_TIMEOUT_S
        while acked < self.n:
            got = bus.pull_many(self.to, SCOPE, self.batch)
            if not got:
                if time.monotonic() > end or (not producer.is_alive() and producer.exitcode):
                    producer.kill()
                    raise RuntimeError(f"producer exited with {producer.exitcode} or "
                                       f"stalled ({acked}/{self.n} acknowledged)")
                time.sleep(0.0005)
                continue
            bus.acknowledge_many([m.id for m in got])
            acked += len(got)
        rate = self.n / (time.perf_counter() - t0)
        producer.join(60)
        return rate, int(full.value)

    def _produce(self, full: Any, ready: Any, go: Any) -> None:
        store = EventStore(self.store_url)
        bus = Bus(store)
        bus.messages(limit=1)  # connected
        ready.set()
        go.wait()
        for start in range(0, self.n, self.batch):
            size = min(self.batch, self.n - start)
            while True:
                try:
                    bus.publish_many([_to(self.to, {"i": start + i}) for i in range(size)])
                    break
                except QueueFull:  # the queue's bound: back off, as a producer should
                    full.value += 1
                    time.sleep(0.005)
        store.dispose()


def throughput(env: BusEnv, messages: int) -> dict[str, Any]:
    bus = Bus(env.app.hypha.store)
    batched, batched_full = _Pump(env.store_url, messages, BATCH).run(bus)
    single, single_full = _Pump(env.store_url, min(messages, SINGLE), 1).run(bus)
    return {"batched_msgs_per_s": round(batched, 1), "batch": BATCH, "messages": messages,
            "batched_queue_full_backoffs": batched_full,
            "single_msgs_per_s": round(single, 1), "single_messages": min(messages, SINGLE),
            "single_queue_full_backoffs": single_full}


def memory(env: BusEnv, queued: int) -> dict[str, Any]:
    hypha = env.app.hypha

    def turns() -> None:
        for _ in range(TURNS):
            msg = hypha.bus.publish(_to(agent("echo"), "ping"))
            reply = hypha.bus.receive(CLIENT, SCOPE, correlation_id=msg.id, timeout=30)
            assert reply is not None
            hypha.bus.acknowledge(reply.id)

    turns()
    hypha.agents.start(Counter, name="parked", backend=LoopingMock, scripts=[_script()])
    before = env.worker_memory()
    later = time.time() + 3600
    sink = human(f"parked-{uuid.uuid4().hex[:8]}")
    for start in range(0, queued, 500):
        size = min(500, queued - start)
        hypha.bus.publish_many([_to(agent("parked"), "later", available_at=later)
                                for _ in range(size)])
        hypha.bus.publish_many([_to(sink, {"i": start + i}) for i in range(size)])
    turns()
    after = env.worker_memory()
    waiting = len(hypha.bus.messages(recipient=agent("parked"), scope=SCOPE, limit=1000))
    return {"queued_for_agent": queued, "queued_for_human": queued,
            "agent_queue_first_page": waiting,
            "rss_before_mb": before["total_rss_mb"], "rss_after_mb": after["total_rss_mb"],
            "rss_delta_mb": round(after["total_rss_mb"] - before["total_rss_mb"], 2),
            "uss_delta_mb": round(after["total_uss_mb"] - before["total_uss_mb"], 2)}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=SAMPLES)
    p.add_argument("--messages", type=int, default=MESSAGES)
    p.add_argument("--queued", type=int, default=QUEUED)
    args = p.parse_args(argv)
    t0 = time.monotonic()
    with BusEnv() as env:
        doc: dict[str, Any] = {"machine": machine_info(), "setup": setup_info(env)}
        lat = latency(env, args.samples)
        thr = throughput(env, args.messages)
        mem = memory(env, args.queued)
        doc["setup"]["foreign_messages_in_worker_log"] = env.foreign_messages()
    doc["bus"] = {"latency": lat, "throughput": thr, "memory": mem, "targets": [
        target("publish -> delivered to a waiting agent p50 (ms)", lat["p50_ms"], "<=",
               TARGET_LATENCY_MS),
        target("messages/s through one queue, PostgreSQL (batched)",
               thr["batched_msgs_per_s"], ">=", TARGET_RATE),
        target("worker RSS growth with queued messages (MB)", mem["rss_delta_mb"], "<=",
               TARGET_RSS_DELTA_MB)]}
    _finish("bus", doc, t0)
    return 0 if all(t["pass"] for t in doc["targets"]) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
