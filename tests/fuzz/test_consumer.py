"""Fuzzing message decoding in the worker's consumer
(:mod:`hypha_celery.runtime.consumer`) and the node task's envelope check
(:func:`hypha_celery.runtime.failures.envelope_problem`), without a broker: a fake
message with arbitrary headers, body, content type and delivery info.
``protocol_error`` returns a reason or None and ``dead_letter_record`` a JSON record the
store can write, for any message; nothing raises. An envelope the check passes reads as
a :class:`NodeMessage`."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from celery.exceptions import InvalidTaskError
from hypothesis import given
from hypothesis import strategies as st
from kombu.serialization import loads

from hypha_celery.demo import demo_graph
from hypha_celery.runtime.consumer import dead_letter_record, protocol_error
from hypha_celery.runtime.failures import envelope_problem
from hypha_celery.runtime.protocol import NodeMessage
from tests.fuzz._mutate import JSON
from tests.fuzz.conftest import budget

KNOWN = {"support.classify": None, "hypha.coordinator": None}
TEXT = st.text(max_size=12) | st.sampled_from(["support.classify", "hypha.coordinator", ""])
HEADER_VALUES = JSON | TEXT | st.lists(st.none() | st.integers() | st.floats() | TEXT,
                                       max_size=3)
HEADERS = st.none() | JSON | st.fixed_dictionaries(
    {}, optional={"task": HEADER_VALUES, "id": HEADER_VALUES, "timelimit": HEADER_VALUES,
                  "root_id": HEADER_VALUES, "argsrepr": HEADER_VALUES})
ENVELOPE = st.fixed_dictionaries({}, optional={
    "run_id": TEXT | JSON, "execution_id": TEXT | JSON, "node_id": TEXT | JSON,
    "input": JSON, "edge_of": TEXT | JSON, "index": st.integers() | JSON,
    "attempt": st.integers() | JSON})
BODY_VALUES = st.one_of(
    st.tuples(st.lists(ENVELOPE | JSON, max_size=2), st.dictionaries(TEXT, JSON, max_size=2),
              st.none() | st.dictionaries(TEXT, JSON, max_size=2)).map(list),
    JSON)
BODIES = st.one_of(
    BODY_VALUES.map(lambda v: json.dumps(v).encode()),
    BODY_VALUES.map(json.dumps),
    st.binary(max_size=60),
    st.text(max_size=60),
    st.none(), st.integers(), st.sampled_from([b"[1e999]", b"[NaN]", b"[[[]]]", "\ud800"]))
CONTENT_TYPES = st.sampled_from(["application/json", "application/x-python-serialize",
                                 "application/x-yaml", "text/plain", "", None])
ENCODINGS = st.sampled_from(["utf-8", "binary", "latin-1", "no-such-codec", "", None])


@dataclass
class FakeMessage:
    """What the consumer reads of a kombu message."""

    headers: Any
    body: Any
    content_type: Any
    content_encoding: Any
    delivery_info: Any = field(default_factory=dict)
    acknowledged: bool = False

    def decode(self) -> Any:
        return loads(self.body, self.content_type, self.content_encoding,
                     accept=["application/json"])


MESSAGES = st.builds(FakeMessage, HEADERS, BODIES, CONTENT_TYPES, ENCODINGS,
                     st.none() | JSON | st.fixed_dictionaries(
                         {}, optional={"routing_key": HEADER_VALUES, "queue": HEADER_VALUES}))


@budget(500)
@given(MESSAGES, st.sampled_from(["malformed", "unknown_task", "invalid_task"]))
def test_any_message_gets_a_decision_and_a_record(message: FakeMessage, reason: str) -> None:
    problem = protocol_error(message, KNOWN)
    assert problem is None or isinstance(problem, str)
    record = dead_letter_record(message, reason, InvalidTaskError(problem or "x"))
    assert json.loads(json.dumps(record, allow_nan=False)) == record  # the store can write it
    assert record["reason"] == reason and isinstance(record["task"], str)
    assert record["run_id"] is None or (isinstance(record["run_id"], str)
                                        and len(record["run_id"]) <= 64)


GRAPH = demo_graph()  # id "support", a node "classify"


@budget(500)
@given(ENVELOPE | JSON, st.sampled_from(["support.classify", "support.other", "x"]))
def test_any_node_envelope_is_checked(env: Any, task: str) -> None:
    problem = envelope_problem(env, GRAPH, task)
    if problem is None:
        msg = NodeMessage.from_json(env)
        assert int(msg.attempt or 1) >= 1
        assert msg.kind in ("node", "edge")
    else:
        assert isinstance(problem, str)
