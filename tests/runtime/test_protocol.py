"""The typed messages write exactly the JSON the untyped runtime wrote, and read what
it wrote: each literal below is what the previous version put on the wire (Celery task
arguments and results) or in the store (``hypha_outcomes.data``, ``hypha_runs.doc``),
key order included."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from hypha_celery import Hypha
from hypha_celery.events import RunStatus, fold
from hypha_celery.events.view import view_of_row
from hypha_celery.graph import Finish, Graph, Next, NodeContext
from hypha_celery.runtime import nodes
from hypha_celery.runtime.coordinator import coordinate
from hypha_celery.runtime.failures import dead_lettered, envelope_problem
from hypha_celery.runtime.lanes import kickoff_id
from hypha_celery.runtime.protocol import (
    EdgeRef,
    FanoutMeta,
    Kickoff,
    NodeMessage,
    NodeOutcome,
    ReducerOutcome,
    parse_payload,
)
from tests.events.test_fold import LINEAR, R
from tests.runtime.support import WAIT, of_kind


def text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


NODE_MESSAGES = [
    '{"run_id":"r","execution_id":"r.1","node_id":"a","input":{"q":1}}',
    '{"run_id":"r","execution_id":"r.1","node_id":"a","input":{"q":1},"attempt":2}',
    '{"run_id":"r","edge_of":"r.2","index":1,"execution_id":"r.2.1","node_id":"b",'
    '"input":null}',
    '{"run_id":"r","edge_of":"r.2","index":1,"execution_id":"r.2.1","node_id":"b",'
    '"input":null,"attempt":3}',
]

STARTED = ('{"execution_id":"r.1","node_id":"ok","attempt":2,"worker":"h:1","at":10.0}')
OUTCOMES = [
    # a node's result, its calls, facts and start
    '{"run_id":"r","execution_id":"r.1","node_id":"ok","update":{"x":3},"duration":0.5,'
    '"calls":[{"call_id":"c","family":"tool"}],"facts":[["tool.call.requested",{"a":1},0]],'
    f'"started":{STARTED}}}',
    # an edge's non-JSON output
    '{"run_id":"r","execution_id":"r.2.1","node_id":"bad","edge_of":"r.2","index":1,'
    '"error":{"type":"InvalidState","class":"validation",'
    '"message":"node output is not JSON-serializable"},"duration":0.5}',
    # an exception
    '{"run_id":"r","execution_id":"r.1","node_id":"boom","error":{"type":"ValueError",'
    '"message":"no","class":"validation"},"duration":0.5}',
    # past its timeout
    '{"run_id":"r","execution_id":"r.1","node_id":"ok","duration":2.5,"late":true,'
    '"error":{"type":"NodeTimeout","class":"timeout",'
    '"message":"finished after 2.500s, timeout 1.0s"}}',
    # dead-lettered edge (delivery limit)
    '{"run_id":"r","execution_id":"r.2.1","node_id":"bad","edge_of":"r.2","index":1,'
    '"error":{"type":"DeliveryLimitExceeded","class":"unknown","dead_letter":"delivery_limit",'
    '"message":"m"},"duration":0.0,"dead_letter":{"task":"g.bad","queue":"hypha.nodes",'
    '"args":[{"run_id":"r","execution_id":"r.2.1","node_id":"bad","input":null,'
    '"edge_of":"r.2","index":1}],"reason":"delivery_limit","error_class":"unknown",'
    '"attempts":4}}',
    # dead-lettered node (retries exhausted)
    '{"run_id":"r","execution_id":"r.1","node_id":"ok","error":{"type":"ConnectionError",'
    '"class":"transient","message":"down","dead_letter":"retries_exhausted"},"duration":0.25,'
    f'"started":{STARTED},"calls":[{{"call_id":"c"}}],"dead_letter":{{"task":"g.ok",'
    '"queue":null,"args":[{"run_id":"r","execution_id":"r.1","node_id":"ok","input":3}],'
    '"reason":"retries_exhausted","error_class":"transient","attempts":2}}',
    # an at-most-once node's outcome read back from the store
    '{"run_id":"r","execution_id":"r.1","node_id":"pay","update":{"paid":true},'
    '"duration":0.1,"settled":true}',
]

EDGE = ('{"execution_id":"r.2.0","node_id":"a","edge_of":"r.2","index":0,"update":{"v":1},'
        '"duration":0.1}')
REDUCER_OUTCOMES = [
    f'{{"run_id":"r","execution_id":"r.2","reducer":"m","edges":[{EDGE}],'
    '"update":{"merged":[1]},"duration":0.02}',
    f'{{"run_id":"r","execution_id":"r.2","reducer":"m","edges":[{EDGE}],'
    '"error":{"type":"KeyError","message":"x","class":"validation"},"duration":0.02}',
    f'{{"run_id":"r","execution_id":"r.2","reducer":"m","edges":[{EDGE}],"stale":true}}',
]


@pytest.mark.parametrize("wire", NODE_MESSAGES)
def test_node_messages(wire: str) -> None:
    assert text(NodeMessage.from_json(json.loads(wire)).to_json()) == wire


@pytest.mark.parametrize("wire", OUTCOMES)
def test_node_outcomes(wire: str) -> None:
    data = json.loads(wire)
    outcome = parse_payload(data)
    assert isinstance(outcome, NodeOutcome)
    assert text(outcome.to_json()) == wire
    assert outcome.kind == ("edge" if "edge_of" in data else "node")
    stored = {k: v for k, v in data.items() if k not in ("run_id", "settled")}
    again = NodeOutcome.from_json(stored, "r")  # a hypha_outcomes row
    assert text(again.stored_json()) == text(stored)


@pytest.mark.parametrize("wire", REDUCER_OUTCOMES)
def test_reducer_outcomes(wire: str) -> None:
    outcome = parse_payload(json.loads(wire))
    assert isinstance(outcome, ReducerOutcome)
    assert text(outcome.to_json()) == wire
    assert outcome.edges[0].outcome().value == {"v": 1}


#: The ``node.execution.*`` / ``node.reducer.*`` data the previous version wrote for each
#: outcome above (a dead-lettered one: dead letter 7), by ``event_data``.
OUTCOME_EVENTS = [
    '{"execution_id":"r.1","node_id":"ok","duration":0.5,"update":{"x":3}}',
    '{"execution_id":"r.2.1","node_id":"bad","edge_of":"r.2","index":1,"error":{"type":'
    '"InvalidState","class":"validation","message":"node output is not JSON-serializable"},'
    '"duration":0.5}',
    '{"execution_id":"r.1","node_id":"boom","duration":0.5,"error":{"type":"ValueError",'
    '"message":"no","class":"validation"}}',
    '{"execution_id":"r.1","node_id":"ok","duration":2.5,"error":{"type":"NodeTimeout",'
    '"class":"timeout","message":"finished after 2.500s, timeout 1.0s"}}',
    '{"execution_id":"r.2.1","node_id":"bad","edge_of":"r.2","index":1,"error":{"type":'
    '"DeliveryLimitExceeded","class":"unknown","dead_letter":"delivery_limit","message":"m"},'
    '"duration":0.0,"dead_letter_id":7}',
    '{"execution_id":"r.1","node_id":"ok","duration":0.25,"error":{"type":"ConnectionError",'
    '"class":"transient","message":"down","dead_letter":"retries_exhausted"},'
    '"dead_letter_id":7}',
    '{"execution_id":"r.1","node_id":"pay","duration":0.1,"update":{"paid":true}}',
]
REDUCER_EVENTS = [
    '{"execution_id":"r.2","reducer":"m","duration":0.02,"update":{"merged":[1]}}',
    '{"execution_id":"r.2","reducer":"m","duration":0.02,"error":{"type":"KeyError",'
    '"message":"x","class":"validation"}}',
    '{"execution_id":"r.2","reducer":"m","duration":null,"error":{"type":"StaleEdge",'
    '"message":"an edge result was not awaited"}}',
]


def sorted_text(value: Any) -> str:
    """The canonical form an event's checksum is taken of (key order aside)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


@pytest.mark.parametrize(("wire", "stored"), list(zip(OUTCOMES, OUTCOME_EVENTS, strict=True)))
def test_outcome_events(wire: str, stored: str) -> None:
    """An outcome's event is its payload model, with the keys and values the hand-built
    data had (its key order is the model's: an event's checksum sorts keys)."""
    outcome = NodeOutcome.from_json(json.loads(wire))
    event = outcome.event(None if outcome.dead_letter is None else 7)
    assert event.kind == ("node.execution.completed" if outcome.ok
                          else "node.execution.failed")
    assert sorted_text(event.dump()) == sorted_text(json.loads(stored))


@pytest.mark.parametrize(("wire", "stored"), list(zip(REDUCER_OUTCOMES, REDUCER_EVENTS,
                                                      strict=True)))
def test_reducer_events(wire: str, stored: str) -> None:
    outcome = ReducerOutcome.from_json(json.loads(wire))
    event = outcome.event()
    assert event.kind == ("node.reducer.completed" if outcome.ok else "node.reducer.failed")
    assert sorted_text(event.dump()) == sorted_text(json.loads(stored))


@pytest.mark.parametrize("bad", [
    {"run_id": "r", "execution_id": "r.1", "node_id": "a", "duration": "slow"},
    {"run_id": "r", "execution_id": "r.1", "node_id": "a", "update": [1, 2]},
    {"run_id": "r", "execution_id": "r.1", "node_id": 3},
    {"run_id": "r", "execution_id": "r.2", "reducer": "m", "edges": [{"node_id": "a"}]},
    {"run_id": "r"},
])
def test_a_payload_of_another_shape_is_a_validation_error(bad: dict[str, Any]) -> None:
    """The coordinator's argument is validated where it is read (a ``ValueError``: the
    task records the message as an ``invalid_schema`` dead letter), not later."""
    with pytest.raises(ValidationError):
        parse_payload(bad)


def test_null_flags_and_durations_read_as_the_hand_readers_had_them() -> None:
    outcome = NodeOutcome.from_json({"execution_id": "r.1", "node_id": "a", "duration": None,
                                     "late": None, "settled": None, "update": {}}, "r")
    assert (outcome.duration, outcome.late, outcome.settled) == (0.0, False, False)
    assert EdgeRef.from_json({"execution_id": "r.2.1", "index": 1, "stale": None}) == (
        EdgeRef("r.2.1", 1))


def test_kickoff_meta_and_edge_refs() -> None:
    kickoff = parse_payload({"run_id": "r", "execution_id": "r.0"})
    assert kickoff == Kickoff("r", "r.0") and text(kickoff.to_json()) == (
        '{"run_id":"r","execution_id":"r.0"}')
    meta = '{"run_id":"r","execution_id":"r.2","reducer":"m","width":3}'
    assert text(FanoutMeta.from_json(json.loads(meta)).to_json()) == meta
    for ref in ('{"execution_id":"r.2.1","index":1}',
                '{"execution_id":"r.2.1","index":1,"stale":true}'):
        parsed = EdgeRef.from_json(json.loads(ref))
        assert parsed is not None and text(parsed.to_json()) == ref
    assert EdgeRef.from_json({"exc_type": "Boom"}) is None


def test_the_runtime_writes_those_shapes() -> None:
    """What the node code produces today, against the literals above."""
    def ok(state: dict[str, Any], inp: Any) -> dict[str, Any]:
        return {"x": inp}

    def bad(state: dict[str, Any], inp: Any) -> dict[str, Any]:
        return {"bad": object()}

    graph = Graph(id="g", nodes={"ok": ok, "bad": bad}, decision_policy=lambda c: Finish(None))
    ctx = NodeContext("r", "r.1", "ok", 1)
    msg = NodeMessage("r", "r.1", "ok", 3)
    out = nodes._execute(graph, graph.nodes["ok"], {}, msg, ctx)
    assert text({**out.to_json(), "duration": 0.5}) == (
        '{"run_id":"r","execution_id":"r.1","node_id":"ok","update":{"x":3},"duration":0.5}')
    edge = NodeMessage("r", "r.2.1", "bad", None, "r.2", 1)
    out = nodes._execute(graph, graph.nodes["bad"], {}, edge, ctx)
    assert text({**out.to_json(), "duration": 0.5}) == OUTCOMES[1]
    assert text(nodes.edge_ref(edge, out).to_json()) == '{"execution_id":"r.2.1","index":1}'
    dead = dead_lettered(edge, {"type": "DeliveryLimitExceeded", "class": "unknown",
                                "dead_letter": "delivery_limit", "message": "m"},
                         "g.bad", "hypha.nodes", attempts=4, reason="delivery_limit")
    assert text(dead.to_json()) == OUTCOMES[4]


#: ``hypha_runs.doc`` of tests/events/test_fold.py's LINEAR run as the previous version
#: folded it.
DOC = (
    '{"run_id":"run1","graph_id":"g","status":"completed","user_id":"u","session_id":"s",'
    '"lane":"[\\"u\\", \\"s\\"]","input":{"q":1},"state":{"x":1,"y":2},"step":2,'
    '"waiting":null,"waiting_nodes":[],"last":{"node_id":"m","execution_id":"run1.2",'
    '"ok":true,"value":{"y":2},"error":null},"result":{"ok":true},"error":null,'
    '"deadline":99.0,"max_steps":5,"notify":null,"idempotency_key":"k",'
    '"cancel_requested":false,"attempt":1,"retry_at":null,"deliveries":1,"recoveries":0,'
    '"quarantine":null,"parked":null,"fanout":2,"created_at":1.0,"fsm":null,"reviews":{},'
    '"held_since":null}')
#: ... and of a run reviewed by a human inside a workflow.
REVIEWED = (
    '{"run_id":"run1","graph_id":"g","status":"running","user_id":"u","session_id":"s",'
    '"lane":"[\\"u\\", \\"s\\"]","input":{"q":1},"state":{},"step":1,"waiting":"r.r1",'
    '"waiting_nodes":[],"last":null,"result":null,"error":null,"deadline":100.0,'
    '"max_steps":5,"notify":null,"idempotency_key":"k","cancel_requested":false,'
    '"attempt":1,"retry_at":null,"deliveries":1,"recoveries":0,"quarantine":null,'
    '"parked":null,"fanout":0,"created_at":1.0,"fsm":{"workflow":"w","state":"S",'
    '"path":["S"],"step":1},"reviews":{"r.r1":{"status":"approved","subject":{"a":1},'
    '"reason":"check","expires_at":null,"step":1,"by":"ann"}},"held_since":null}')


def _doc(view: Any) -> str:
    return text({k: v for k, v in view.items() if k not in ("seq", "updated_at")})


def test_the_run_view_document() -> None:
    assert _doc(fold(R, LINEAR)) == DOC
    evs = [*LINEAR[:4],
           ("human.review.requested", {"review_id": "r.r1", "reason": "check",
                                       "subject": {"a": 1}, "step": 1, "expires_at": None}, 4.0),
           ("run.waiting_human", {"review_id": "r.r1", "at": 4.0}, 4.0),
           ("human.review.approved", {"review_id": "r.r1", "by": "ann", "at": 5.0}, 5.0),
           ("fsm.state.entered", {"workflow": "w", "state": "S", "step": 1}, 5.0)]
    assert _doc(fold(R, evs)) == REVIEWED
    for doc in (DOC, REVIEWED):  # a row the previous version wrote loads as it was
        view = view_of_row(json.loads(doc), 7, 9.0)
        assert view["seq"] == 7 and isinstance(view["status"], RunStatus)
        assert _doc(view) == doc


def test_a_duplicate_kickoff_is_fenced_and_logs_nothing(hypha: Hypha) -> None:
    """A kickoff (or review resume) carries no outcome: once the run moved on, a second
    copy is fenced without a late result (an outcome that comes late is logged)."""
    hypha.register(Graph(id="once", nodes={"a": lambda s, i: {"x": 1}},
                         decision_policy=lambda c: Next("a") if c.step == 0 else Finish(c.state)))
    run = hypha.start("once")
    assert run.wait(WAIT) == {"x": 1}
    before = len(run.events())
    coordinate(hypha._rt, Kickoff(run.id, kickoff_id(run.id)))
    assert len(run.events()) == before
    coordinate(hypha._rt, NodeOutcome(run.id, f"{run.id}.1", "a", {"x": 2}, duration=0.1))
    assert len(run.events()) == before  # a duplicate of a recorded outcome
    coordinate(hypha._rt, NodeOutcome(run.id, f"{run.id}.9", "a", {"x": 2}, duration=0.1))
    (late,) = of_kind(run, "node.execution.late_result")
    assert late.data == {"execution_id": f"{run.id}.9", "node_id": "a", "reason": "run_ended"}


@pytest.mark.parametrize("index", ["x", 1.5, [1]])
def test_an_envelope_the_check_passes_reads_as_a_message(index: object) -> None:
    """The envelope check covers every field the message's adapter reads: an ``index``
    that is no integer is the check's problem (the message is dead-lettered), never a
    ``ValidationError`` out of the task."""
    graph = Graph(id="g", nodes={"a": lambda s, i: {}}, decision_policy=lambda c: Finish(None))
    env = {"run_id": "r", "execution_id": "r.1", "node_id": "a", "index": index}
    assert envelope_problem(env, graph, "g.a") == "'index' must be an integer"
    assert envelope_problem({**env, "index": None}, graph, "g.a") is None
    assert NodeMessage.from_json({**env, "index": None}).index is None
