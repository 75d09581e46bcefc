"""The recovery supervisor on the real embedded runtime (memory transport, SQLite).

Lost messages are real: the broker's queues are purged after the run published.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from hypha_celery import (
    Context,
    FanOut,
    Finish,
    Graph,
    Hypha,
    Next,
    Node,
    NodeContext,
    NotRedrivable,
    Outcome,
    RecoveryPolicy,
    RunFailed,
    RunTimeout,
    Settings,
)
from hypha_celery.beat.supervisor import sweep
from hypha_celery.embedded import EmbeddedWorker
from hypha_celery.middleware import Attempt, Middleware, Step
from hypha_celery.runtime import failures
from hypha_celery.runtime.coordinator import coordinate
from hypha_celery.runtime.lanes import kickoff_id
from hypha_celery.runtime.nodes import effect_key
from hypha_celery.runtime.protocol import Kickoff, NodeMessage
from tests.runtime.support import WAIT, assert_well_formed, of_kind, wait_until

FAST = RecoveryPolicy(grace=0.2, kickoff_lease=0.2, max_redrives=2, backoff=1.0)
LATER = 80.0  # sweep "later": every lease (default node timeout 60 s) has expired, no deadline


@pytest.fixture
def idle(sqlite_url: str) -> Iterator[Hypha]:
    """A Hypha with no worker until the test starts one."""
    hypha = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                           store_url=sqlite_url, embedded=False, lease_interval=0.1))
    yield hypha
    hypha.close()


def worker(hypha: Hypha) -> EmbeddedWorker:
    w = EmbeddedWorker(hypha.celery, sorted(hypha.queues()), 4)
    w.start()
    return w


def lose_messages(hypha: Hypha) -> None:
    with hypha.celery.connection_for_write() as conn:
        for queue in hypha.queues():
            conn.default_channel.queue_purge(queue)


def step_kickoff(hypha: Hypha, run_id: str) -> None:
    """What the kickoff message would do (run here, so the next message can be lost)."""
    coordinate(hypha._rt, Kickoff(run_id, kickoff_id(run_id)))


def once(node: str = "a") -> Any:
    def policy(ctx: Context) -> Next | Finish:
        return Next(node, ctx.input) if ctx.step == 0 else Finish(ctx.state)
    return policy


class Counter:
    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, state: dict[str, Any], inp: Any, ctx: NodeContext) -> dict[str, Any]:
        self.calls.append(ctx.attempt)
        return {"done": ctx.attempt}


def test_a_lost_kickoff_is_redriven(idle: Hypha) -> None:
    idle.register(Graph("s1", {"a": lambda s, i: {"a": 1}}, once()))
    run = idle.start("s1")
    lose_messages(idle)
    assert sweep(idle._rt, policy=FAST) == []  # within its lease: nothing to do
    (decision,) = sweep(idle._rt, now=time.time() + LATER, policy=FAST)
    assert decision == {"run_id": run.id, "action": "redriven",
                        "execution_id": kickoff_id(run.id), "why": "not_started"}
    w = worker(idle)
    try:
        assert run.wait(WAIT) == {"a": 1}
    finally:
        w.stop()
    (redriven,) = of_kind(run, "recovery.run.redriven")
    assert redriven.data == {"execution_id": kickoff_id(run.id), "attempt": 1,
                             "why": "not_started"}
    assert_well_formed(run)


def test_a_lost_node_message_is_redriven_and_runs_once(idle: Hypha) -> None:
    node = Counter()
    idle.register(Graph("s2", {"a": node}, once()))
    run = idle.start("s2", "in")
    lose_messages(idle)
    step_kickoff(idle, run.id)  # publishes the node message ...
    lose_messages(idle)  # ... which the broker loses
    (decision,) = sweep(idle._rt, now=time.time() + LATER, policy=FAST)
    assert decision["action"] == "redriven" and decision["execution_id"] == f"{run.id}.1"
    assert sweep(idle._rt, policy=FAST) == []  # the redrive is progress: a new lease
    w = worker(idle)
    try:
        assert run.wait(WAIT) == {"done": 1}
    finally:
        w.stop()
    assert node.calls == [1]
    assert_well_formed(run)


def test_two_sweeps_at_once_redrive_once(idle: Hypha) -> None:
    idle.register(Graph("s3", {"a": lambda s, i: {}}, once()))
    run = idle.start("s3")
    lose_messages(idle)
    results: list[Any] = []
    time.sleep(FAST.kickoff_lease + 0.1)  # the kickoff's lease expires (real time)
    threads = [threading.Thread(target=lambda: results.append(
        sweep(idle._rt, policy=FAST))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(len(r) for r in results) == [0, 1]
    assert len(of_kind(run, "recovery.run.redriven")) == 1


def test_redrives_are_bounded_then_dead_lettered(idle: Hypha) -> None:
    idle.register(Graph("s4", {"a": lambda s, i: {}}, once()))
    run = idle.start("s4")
    lose_messages(idle)
    step_kickoff(idle, run.id)
    actions = []
    for i in range(3):
        lose_messages(idle)
        (decision,) = sweep(idle._rt, now=time.time() + LATER * (i + 1), policy=FAST)
        actions.append(decision["action"])
    assert actions == ["redriven", "redriven", "exhausted"]
    with pytest.raises(RunFailed) as info:
        run.wait(1)
    assert info.value.reason == "dead_lettered"
    (record,) = idle.store.dead_letters(run_id=run.id)
    assert record["reason"] == "recovery_exhausted" and record["attempts"] == 2
    kinds = [e.kind for e in run.events()]
    assert kinds[-4:] == ["recovery.redrive.exhausted", "node.execution.dead_lettered",
                          "node.execution.failed", "run.failed"]
    assert_well_formed(run)


def test_a_lost_fanout_is_redriven_without_rerunning_finished_edges(idle: Hypha) -> None:
    a, b = Counter(), Counter()

    def policy(ctx: Context) -> FanOut | Finish:
        if ctx.step == 0:
            return FanOut([Next("a"), Next("b")], reducer="join")
        return Finish(ctx.state)

    def join(state: dict[str, Any], outcomes: list[Outcome]) -> dict[str, Any]:
        return {"n": len(outcomes)}

    idle.register(Graph("s5", {"a": a, "b": b}, policy, {"join": join}))
    run = idle.start("s5")
    lose_messages(idle)
    step_kickoff(idle, run.id)
    lose_messages(idle)
    (decision,) = sweep(idle._rt, now=time.time() + LATER, policy=FAST)
    assert decision["action"] == "redriven"
    w = worker(idle)
    try:
        assert run.wait(WAIT) == {"n": 2}
    finally:
        w.stop()
    assert a.calls == [1] and b.calls == [1]
    assert_well_formed(run)


class Stuck:
    """A node stuck until :attr:`gate` opens; :attr:`started` is set once it runs (the
    run then awaits its execution: the kickoff was consumed)."""

    def __init__(self) -> None:
        self.gate, self.started = threading.Event(), threading.Event()

    def __call__(self, state: dict[str, Any], inp: Any) -> dict[str, Any]:
        self.started.set()
        self.gate.wait(WAIT)
        return {"late": True}

    def wait_started(self) -> None:
        wait_until(self.started.is_set, what="the stuck node to start")


def test_a_stuck_node_on_a_threads_pool_is_timed_out(idle: Hypha) -> None:
    stuck = Stuck()
    gate = stuck.gate
    idle.register(Graph("s6", {"a": Node(stuck, timeout=0.2)}, once()))
    # The worker runs before the run starts and the sweep waits for the node: a kickoff
    # a loaded machine consumed after FAST.kickoff_lease was re-driven first.
    w = worker(idle)
    try:
        run = idle.start("s6")
        stuck.wait_started()
        decision = wait_until(lambda: sweep(idle._rt, policy=FAST), what="a timeout decision")
        assert decision[0]["action"] == "timed_out"
        with pytest.raises(RunFailed) as info:
            run.wait(WAIT)
        assert info.value.reason == "node_failed" and "NodeTimeout" in info.value.message
        gate.set()
        late = wait_until(lambda: of_kind(run, "node.execution.late_result"),
                          what="the late result")
    finally:
        gate.set()
        w.stop()
    assert late[0].data["reason"] == "timeout"
    assert "late" not in idle.store.get(run.id)["state"]
    assert_well_formed(run)


class Told(Middleware):
    """Records the step and late-result hooks."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def before_step(self, step: Step) -> None:
        self.calls.append(("before_step", step))

    def after_step(self, step: Step, error: BaseException | None) -> None:
        self.calls.append(("after_step", step))

    def after_late_result(self, attempt: Attempt, reason: str) -> None:
        self.calls.append(("after_late_result", (attempt, reason)))


def test_a_timeout_step_and_its_late_result_are_told_once(sqlite_url: str) -> None:
    told, stuck = Told(), Stuck()
    gate = stuck.gate
    hypha = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                           store_url=sqlite_url, embedded=False, lease_interval=0.1),
                  middleware=[told])
    hypha.register(Graph("s6m", {"a": Node(stuck, timeout=0.2)}, once()))
    w = worker(hypha)
    try:
        run = hypha.start("s6m")
        stuck.wait_started()
        wait_until(lambda: sweep(hypha._rt, policy=FAST), what="a timeout decision")
        with pytest.raises(RunFailed):
            run.wait(WAIT)
        steps = [(h, d) for h, d in told.calls if h.endswith("_step")]
        assert steps[-2:] == [("before_step", Step(run.id, f"{run.id}.1")),
                              ("after_step", Step(run.id, f"{run.id}.1"))]
        gate.set()
        wait_until(lambda: of_kind(run, "node.execution.late_result"), what="the late result")
        wait_until(lambda: any(h == "after_late_result" for h, _ in told.calls),
                   what="after_late_result")
        time.sleep(0.3)  # nothing else is told
    finally:
        gate.set()
        w.stop()
        hypha.close()
    late = [d for h, d in told.calls if h == "after_late_result"]
    assert late == [(Attempt(run.id, f"{run.id}.1", "a", 1), "timeout")]


#: The stuck run's execution_timeout: the node must start within it (a kickoff consumed
#: after the deadline fails the run itself, leaving the supervisor nothing to do), so it
#: leaves a loaded machine room to consume the kickoff; short enough to wait out.
STUCK_DEADLINE = 1.0


def test_a_first_runs_deadline_counts_from_run_created(idle: Hypha) -> None:
    """The run that migrates a fresh store's schema: its deadline is run.created's time +
    execution_timeout (the clock was read before the migration, which a short
    execution_timeout could spend before the run was even recorded)."""
    idle.register(Graph("s7c", {"a": lambda s, i: {}}, once(), execution_timeout=30))
    run = idle.start("s7c")
    (created,) = of_kind(run, "run.created")
    assert created.data["deadline"] == created.ts + 30
    assert idle.store.get(run.id)["deadline"] == created.ts + 30


def test_the_deadline_holds_when_a_node_is_stuck_forever(idle: Hypha) -> None:
    stuck = Stuck()
    gate = stuck.gate
    idle.register(Graph("s7", {"a": stuck}, once(),
                        execution_timeout=STUCK_DEADLINE, node_timeout=60))
    w = worker(idle)  # running before the run starts: its start-up is not the run's time
    try:
        run = idle.start("s7")
        stuck.wait_started()  # before the deadline: the run awaits the stuck node
        (decision,) = wait_until(lambda: sweep(idle._rt, policy=FAST), what="a decision")
        assert decision["action"] == "deadline_exceeded"
        with pytest.raises(RunTimeout):
            run.wait(1)
    finally:
        gate.set()
        w.stop()
    (failed,) = of_kind(run, "run.failed")
    assert failed.data["reason"] == "deadline_exceeded" and failed.data["by"] == "supervisor"


def test_an_open_circuit_holds_redrives(idle: Hypha) -> None:
    idle.register(Graph("s8", {"a": Node(lambda s, i: {}, dependency="vendor", timeout=1)},
                        once()))
    run = idle.start("s8")
    lose_messages(idle)
    step_kickoff(idle, run.id)
    lose_messages(idle)
    now = time.time()
    for _ in range(3):
        idle.store.record_failure("vendor", now, failures.THRESHOLD, failures.RESET)
    (decision,) = sweep(idle._rt, now=now + 10, policy=FAST)  # lease 1 s + 5 s + grace
    assert decision["action"] == "circuit_open"
    assert not of_kind(run, "recovery.run.redriven")
    (decision,) = sweep(idle._rt, now=now + failures.RESET + 10, policy=FAST)
    assert decision["action"] == "redriven"


def test_an_open_circuit_of_a_declared_provider_holds_redrives(idle: Hypha) -> None:
    """A node's failed model calls count per provider (``<graph>.<node>:<provider>``): a
    lost run of a node declaring that provider's model is not re-driven while it is open."""
    idle.register(Graph("s8m", {"a": Node(lambda s, i: {}, timeout=1,
                                          models=["anthropic:claude-test"])}, once()))
    run = idle.start("s8m")
    lose_messages(idle)
    step_kickoff(idle, run.id)
    lose_messages(idle)
    now = time.time()
    for _ in range(3):
        idle.store.record_failure("s8m.a:anthropic", now, failures.THRESHOLD, failures.RESET)
    (decision,) = sweep(idle._rt, now=now + 10, policy=FAST)
    assert decision["action"] == "circuit_open"
    (decision,) = sweep(idle._rt, now=now + failures.RESET + 10, policy=FAST)
    assert decision["action"] == "redriven"


# -- at-most-once nodes -------------------------------------------------------
def started_then_lost(hypha: Hypha, run_id: str, node_id: str = "send") -> str:
    """The node's worker committed node.execution.started, then died (its message was acked)."""
    step_kickoff(hypha, run_id)
    lose_messages(hypha)
    eid = f"{run_id}.1"
    env = NodeMessage(run_id, eid, node_id)
    assert failures.begin_effect(hypha._rt, env, 1, "gone:1")
    return eid


def test_an_effect_with_unknown_state_is_quarantined_then_released(idle: Hypha) -> None:
    send = Counter()
    idle.register(Graph("e1", {"send": Node(send, side_effect="external_effect")}, once("send")))
    run = idle.start("e1")
    lose_messages(idle)
    started_then_lost(idle, run.id)
    (decision,) = sweep(idle._rt, now=time.time() + LATER, policy=FAST)
    assert decision["action"] == "quarantined"
    view = idle.store.get(run.id)
    assert view["status"] == "quarantined"
    assert view["quarantine"]["reason"] == "unknown_commit_state"
    assert sweep(idle._rt, now=time.time() + 2 * LATER, policy=FAST) == []  # a human decides
    w = worker(idle)
    try:
        time.sleep(0.2)
        assert send.calls == []  # never silently re-executed
        idle.release(run.id)
        assert run.wait(WAIT) == {"done": 2}
    finally:
        w.stop()
    assert send.calls == [2]
    with pytest.raises(NotRedrivable):
        idle.release(run.id)
    assert_well_formed(run)


def test_a_second_delivery_of_a_started_effect_does_not_run_it(idle: Hypha) -> None:
    send = Counter()
    idle.register(Graph("e2", {"send": Node(send, side_effect="irreversible")}, once("send")))
    run = idle.start("e2")
    lose_messages(idle)
    eid = started_then_lost(idle, run.id)
    w = worker(idle)
    try:
        from hypha_celery.runtime import canvas
        from hypha_celery.runtime.coordinator import node_call

        graph = idle.graphs["e2"]
        call = node_call(idle._rt, graph, NodeMessage(run.id, eid, "send"))
        assert call.queue == "hypha.effects" and not call.local_ok
        canvas.step(idle.celery, call)  # the same message again
        time.sleep(0.5)
    finally:
        w.stop()
    assert send.calls == []
    assert idle.store.get(run.id)["status"] == "running"


def test_a_receipt_reconciles_an_unknown_effect(idle: Hypha) -> None:
    send = Counter()
    receipts: list[str] = []

    def receipt(state: dict[str, Any], inp: Any, ctx: NodeContext) -> dict[str, Any]:
        receipts.append(ctx.execution_id)
        return {"sent": "receipt-42"}

    idle.register(Graph("e3", {"send": Node(send, side_effect="external_effect",
                                            receipt=receipt)}, once("send")))
    run = idle.start("e3")
    lose_messages(idle)
    eid = started_then_lost(idle, run.id)
    (decision,) = sweep(idle._rt, now=time.time() + LATER, policy=FAST)
    assert decision["action"] == "reconciled" and receipts == [eid]
    assert run.wait(1) == {"sent": "receipt-42"} and send.calls == []
    (rec,) = of_kind(run, "recovery.outcome.reconciled")
    assert rec.data == {"execution_id": eid, "committed": True, "source": "receipt"}
    assert_well_formed(run)


def test_a_receipt_saying_not_committed_runs_the_next_attempt(idle: Hypha) -> None:
    send = Counter()
    idle.register(Graph("e4", {"send": Node(send, side_effect="external_effect",
                                            receipt=lambda s, i, c: None)}, once("send")))
    run = idle.start("e4")
    lose_messages(idle)
    started_then_lost(idle, run.id)
    (decision,) = sweep(idle._rt, now=time.time() + LATER, policy=FAST)
    assert decision["action"] == "redriven" and decision["why"] == "not_committed"
    w = worker(idle)
    try:
        assert run.wait(WAIT) == {"done": 2}
    finally:
        w.stop()
    assert send.calls == [2]


def test_a_stored_effect_outcome_is_used_when_the_coordinator_was_lost(idle: Hypha) -> None:
    send = Counter()
    idle.register(Graph("e5", {"send": Node(send, side_effect="external_effect")},
                        once("send")))
    run = idle.start("e5")
    lose_messages(idle)
    eid = started_then_lost(idle, run.id)
    idle.store.put_outcome(run.id, effect_key(eid, 1), {
        "execution_id": eid, "node_id": "send", "update": {"done": "before"}, "duration": 0.1})
    (decision,) = sweep(idle._rt, now=time.time() + LATER, policy=FAST)
    assert decision["action"] == "reconciled"
    assert run.wait(1) == {"done": "before"} and send.calls == []


def test_a_stored_unknown_effect_outcome_quarantines_when_the_coordinator_was_lost(
        idle: Hypha) -> None:
    send = Counter()
    idle.register(Graph("e7", {"send": Node(send, side_effect="external_effect")},
                        once("send")))
    run = idle.start("e7")
    lose_messages(idle)
    eid = started_then_lost(idle, run.id)
    idle.store.put_outcome(run.id, effect_key(eid, 1), {
        "execution_id": eid, "node_id": "send", "duration": 0.1,
        "error": {"type": "McpOutcomeUnknown", "class": "unknown", "message": "lost",
                  "effect": "unknown"}})
    (decision,) = sweep(idle._rt, now=time.time() + LATER, policy=FAST)
    assert decision["action"] == "quarantined"
    view = idle.store.get(run.id)
    assert view["status"] == "quarantined" and view["waiting"] == eid
    assert view["quarantine"]["reason"] == "effect_outcome_unknown"
    assert of_kind(run, "recovery.outcome.reconciled") == []
    assert of_kind(run, "node.execution.failed") == []
    w = worker(idle)
    try:
        idle.release(run.id)
        assert run.wait(WAIT) == {"done": 2}
    finally:
        w.stop()
    assert send.calls == [2]
    assert_well_formed(run)


def test_a_quarantined_run_can_be_failed_by_a_human(idle: Hypha) -> None:
    idle.register(Graph("e6", {"send": Node(Counter(), side_effect="external_effect")},
                        once("send")))
    run = idle.start("e6")
    lose_messages(idle)
    started_then_lost(idle, run.id)
    sweep(idle._rt, now=time.time() + LATER, policy=FAST)
    idle.fail_quarantined(run.id, "checked by ops: duplicate order")
    with pytest.raises(RunFailed) as info:
        run.wait(1)
    assert info.value.reason == "quarantined"
    assert_well_formed(run)


def test_an_effect_edge_with_unknown_state_quarantines_the_fanout(idle: Hypha) -> None:
    send, other = Counter(), Counter()

    def policy(ctx: Context) -> FanOut | Finish:
        if ctx.step == 0:
            return FanOut([Next("send"), Next("other")], reducer="join")
        return Finish(ctx.state)

    def join(state: dict[str, Any], outcomes: list[Outcome]) -> dict[str, Any]:
        return {"oks": [o.ok for o in outcomes], "values": [o.value for o in outcomes]}

    idle.register(Graph("e7", {"send": Node(send, side_effect="external_effect"),
                               "other": other}, policy, {"join": join}))
    run = idle.start("e7")
    lose_messages(idle)
    step_kickoff(idle, run.id)
    lose_messages(idle)
    edge = NodeMessage(run.id, f"{run.id}.1.0", "send", edge_of=f"{run.id}.1", index=0)
    assert failures.begin_effect(idle._rt, edge, 1, "gone:1")
    (decision,) = sweep(idle._rt, now=time.time() + LATER, policy=FAST)
    assert decision["action"] == "quarantined"
    assert idle.store.get(run.id)["quarantine"]["execution_id"] == f"{run.id}.1.0"
    w = worker(idle)
    try:
        idle.release(run.id)
        result = run.wait(WAIT)
    finally:
        w.stop()
    assert result == {"oks": [True, True], "values": [{"done": 2}, {"done": 1}]}
    assert send.calls == [2] and other.calls == [1]
    assert_well_formed(run)


def test_a_failed_publish_neither_stops_the_sweep_nor_burns_a_redrive(
        idle: Hypha, monkeypatch: pytest.MonkeyPatch) -> None:
    from hypha_celery.runtime import canvas

    idle.register(Graph("s9", {"a": lambda s, i: {}}, once()))
    first, second = idle.start("s9"), idle.start("s9")
    lose_messages(idle)
    real = canvas.kickoff

    def flaky_kickoff(app: Any, run_id: str, execution_id: str) -> None:
        if run_id == first.id:
            raise ConnectionError("broker down")
        real(app, run_id, execution_id)

    monkeypatch.setattr(canvas, "kickoff", flaky_kickoff)
    decisions = sweep(idle._rt, now=time.time() + LATER, policy=FAST)
    by_run = {d["run_id"]: d for d in decisions}
    assert by_run[first.id]["action"] == "error" and by_run[first.id]["why"] == "ConnectionError"
    assert by_run[second.id]["action"] == "redriven"
    assert not of_kind(first, "recovery.run.redriven")  # nothing recorded: the next sweep retries
    monkeypatch.setattr(canvas, "kickoff", real)
    (again,) = [d for d in sweep(idle._rt, now=time.time() + LATER, policy=FAST)
                if d["run_id"] == first.id]
    assert again["action"] == "redriven"
    assert of_kind(first, "recovery.run.redriven")[0].data["attempt"] == 1


def test_a_sweep_stops_deciding_when_its_time_budget_is_used(idle: Hypha) -> None:
    idle.register(Graph("s10", {"a": lambda s, i: {}}, once()))
    runs = [idle.start("s10") for _ in range(3)]
    lose_messages(idle)
    later = time.time() + LATER
    assert sweep(idle._rt, now=later, policy=RecoveryPolicy(budget=0.0)) == []
    decided = sweep(idle._rt, now=later, policy=FAST)
    assert sorted(d["run_id"] for d in decided) == sorted(r.id for r in runs)


def test_a_stuck_edge_is_timed_out_and_its_chord_completes(idle: Hypha) -> None:
    gate = threading.Event()

    def stuck(state: dict[str, Any], inp: Any) -> dict[str, Any]:
        gate.wait(WAIT)
        return {"late": True}

    def policy(ctx: Context) -> FanOut | Finish:
        if ctx.step == 0:
            return FanOut([Next("quick"), Next("stuck")], reducer="join")
        return Finish(ctx.state)

    def join(state: dict[str, Any], outcomes: list[Outcome]) -> dict[str, Any]:
        return {"errors": [o.error.type if o.error else None for o in outcomes]}

    idle.register(Graph("s11", {"quick": lambda s, i: {"q": 1},
                                "stuck": Node(stuck, timeout=0.2)}, policy, {"join": join}))
    run = idle.start("s11")
    w = worker(idle)
    try:
        decision = wait_until(lambda: sweep(idle._rt, policy=FAST), what="a decision")
        assert decision[0]["action"] == "redriven" and decision[0]["why"] == "timed_out"
        assert run.wait(WAIT) == {"errors": [None, "NodeTimeout"]}
        gate.set()
        late = wait_until(lambda: of_kind(run, "node.execution.late_result"),
                          what="the late result")
    finally:
        gate.set()
        w.stop()
    assert late[0].data == {"execution_id": f"{run.id}.1.1", "node_id": "stuck",
                            "reason": "timeout"}
    assert_well_formed(run)
