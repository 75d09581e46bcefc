"""Model and tool calls made through a node's context: recorded live, served in replay.

A node that calls a model or a tool through ``ctx.model(...)`` / ``ctx.tool(...)`` gets
its calls recorded: the outcome envelope carries them and the step that records the node
writes ``model.call.started`` / ``model.call.completed | failed`` (and ``tool.call.*``)
before the node's own outcome, in the same transaction. The request itself is never
stored (it may hold prompt text or secrets): only ``request_hash``, the first 16 hex
digits of the SHA-256 of its canonical JSON. The output is stored: it is what a replay
serves.

Re-executing a recorded run (:mod:`hypha_celery.rerun`) gives the node a context whose
calls are *served*: the n-th call of the execution must name the same model or tool with
the same request hash, and gets the recorded output (or the recorded error, raised as
:class:`RecordedCallError`) without calling anything. Anything else raises
:class:`~hypha_celery.errors.ReplayDivergence`.

A node may also record *facts* about what it did (``ctx.record``: a governed tool's
``tool.call.requested`` / ``tool.policy.checked`` / ``tool.call.approved`` /
``tool.output.validated`` ...): they are written with its outcome too. A replay ignores them.

A failed model call's record carries ``error_kind``: the
:class:`~hypha_celery.backends.BackendError`'s kind (``rate_limited``,
``incomplete_stream`` ..., see :class:`~hypha_celery.backends.llm.errors.ModelErrorKind`),
None for any other exception; ``model.call.failed`` and ``after_call``'s
:class:`~hypha_celery.middleware.CallEnd` carry it.

A live call is told to the middleware that wants it (``before_call`` / ``after_call``,
:class:`~hypha_celery.middleware.Call`: ids, the kind, the model or tool name; never the
request or the output), around the call, in the node's thread; a served call is not.

Bounds: 1,000 calls and 1,000 facts per execution, 1 MiB of JSON per recorded output and
64 KiB per fact.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal, cast

from typing_extensions import TypedDict  # pydantic reads it (python < 3.12)

from hypha_celery.backends.llm.errors import error_kind
from hypha_celery.errors import InvalidCall, ReplayDivergence
from hypha_celery.events.envelope import canonical
from hypha_celery.events.view import ErrorJson
from hypha_celery.graph.jsonsafe import error_data
from hypha_celery.jsontypes import JsonObject, JsonValue
from hypha_celery.middleware import Call, CallEnd, MiddlewareStack

Family = Literal["model", "tool", "memory"]
#: The letter of a family's call ids (``<execution>:m0``, ``:t1``, ``:r2``).
_LETTER: dict[str, str] = {"model": "m", "tool": "t", "memory": "r"}
#: Calls one node execution may record.
MAX_CALLS = 1000
#: JSON bytes of one recorded call output.
MAX_OUTPUT_BYTES = 1_048_576
#: Facts one node execution may record, and the JSON bytes of one.
MAX_FACTS = 1000
MAX_FACT_BYTES = 65_536
#: The event families a node may record as facts (``ctx.record``): the governed tool
#: runner's steps, the MCP gateway's (its calls, and a discovery made by the node), what
#: went into a model call (the context build, skills, memory reads: counts, hashes and
#: references) and reasoning (summaries and decisions, never a provider's raw thinking).
NODE_FACTS = ("tool.call.requested", "tool.call.rejected", "tool.policy.checked",
              "tool.call.approved", "tool.output.validated", "tool.output.invalid",
              "mcp.call.started", "mcp.call.completed", "mcp.call.failed",
              "mcp.capability.discovered", "mcp.capability.trust.evaluated",
              "mcp.capability.drift.detected", "mcp.capability.quarantined",
              "mcp.capability.approved", "mcp.tool.normalized",
              "context.build.started", "context.build.completed", "context.build.failed",
              "context.compacted", "skill.selected", "skill.loaded", "skill.completed",
              "skill.failed", "memory.read.requested", "memory.read.completed",
              "memory.read.failed",
              "thinking.started", "thinking.completed", "agent.deliberation.started",
              "agent.deliberation.completed", "reasoning.decision.recorded",
              "agent.action.selected", "inference.completed", "react.step.completed")


#: What a call knows once it ended (``measures()``: a ``ctx.llm`` call's provider, usage,
#: latency and cost; keys of :class:`CallRecord`).
Measures = Callable[[], Mapping[str, object]]


class CallRecord(TypedDict, total=False):
    """One recorded call, as the outcome envelope carries it and ``model.call.*`` /
    ``tool.call.*`` events store it (the request only as its hash)."""

    call_id: str
    family: Family
    name: str
    attempt: int
    request_hash: str
    side_effect: str
    started_at: float
    ended_at: float
    output: JsonValue
    error: ErrorJson
    # a ``ctx.llm`` call's measures (see :mod:`hypha_celery.graph.llmcall`)
    provider: str
    request_bytes: int
    usage: dict[str, int]
    latency_ms: float
    wait_ms: float
    cost_usd: float
    # a failed model call's BackendError kind (None: another exception)
    error_kind: str | None
    # a memory call's scope key, read limit and record type (``ctx.recall`` / ``remember``)
    scope: str
    limit: int
    memory_type: str


class RecordedCallError(Exception):
    """In a replay: the recorded call failed; ``type`` / ``message`` are the recording's."""

    def __init__(self, error: ErrorJson) -> None:
        super().__init__(f"{error.get('type', 'Error')}: {error.get('message', '')}")
        self.type = str(error.get("type", "Error"))
        self.error = error


def request_hash(request: Any) -> str:
    try:
        text = canonical(request)
    except (TypeError, ValueError) as exc:
        raise InvalidCall(f"a call's request must be JSON ({exc})") from None
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Calls:
    """The calls of one node execution. ``recorded`` given: a replay that serves them."""

    def __init__(self, execution_id: str, node_id: str,
                 recorded: list[CallRecord] | None = None, attempt: int = 1, *,
                 run_id: str = "", middleware: MiddlewareStack | None = None) -> None:
        self.execution_id = execution_id
        self.node_id = node_id
        self.attempt = attempt
        self.run_id = run_id
        #: told of live calls; ``None`` when no middleware overrides the call hooks
        self.middleware = middleware if middleware is not None and (
            middleware.wants("before_call") or middleware.wants("after_call")) else None
        # a retried attempt's calls are kept too: its ids must not collide with the next's
        self._prefix = execution_id if attempt == 1 else f"{execution_id}:a{attempt}"
        self.records: list[CallRecord] = []
        #: ``(kind, data, calls made before it)``: the position keeps log order
        self.facts: list[tuple[str, JsonObject, int]] = []
        self._recorded = recorded

    def call(self, family: Family, name: str, fn: Callable[[Any], Any], request: Any,
             extra: CallRecord | None = None,
             measures: Measures | None = None) -> Any:
        """``fn(request)`` recorded (or served in a replay). ``extra``: fields of the
        record known before the call; ``measures()``: fields known after it (called once
        it returned or raised: usage, latency, cost)."""
        if not isinstance(name, str) or not name:
            raise InvalidCall(f"a {family} call needs a name")
        if len(self.records) >= MAX_CALLS:
            raise InvalidCall(f"more than {MAX_CALLS} calls in one node execution")
        digest = request_hash(request)
        record: CallRecord = {"call_id": self.next_id(family), "family": family, "name": name,
                              "attempt": self.attempt, "request_hash": digest}
        if extra:
            record.update(extra)
        if self._recorded is not None:
            return self._serve(record)
        if self.middleware is None:
            return self._live(record, fn, request, measures)
        return self._told(self.middleware, record, fn, request, measures)

    def _told(self, stack: MiddlewareStack, record: CallRecord, fn: Callable[[Any], Any],
              request: Any, measures: Measures | None) -> Any:
        """:meth:`_live` between ``before_call`` and ``after_call``."""
        call = Call(self.run_id, self.execution_id, self.node_id, record["family"],
                    record["name"], record["call_id"])
        stack.before_call(call)
        began = time.perf_counter()
        error: str | None = None
        try:
            return self._live(record, fn, request, measures)
        except BaseException as exc:
            error = type(exc).__name__
            raise
        finally:
            stack.after_call(call,
                             _ended(time.perf_counter() - began, error, record.get("usage"),
                                    record.get("error_kind")))

    def _live(self, record: CallRecord, fn: Callable[[Any], Any], request: Any,
              measures: Measures | None) -> Any:
        family, name = record["family"], record["name"]
        record["started_at"] = time.time()
        try:
            output = fn(request)
        except Exception as exc:
            record["ended_at"] = time.time()
            record["error"] = error_data(exc)
            _measured(record, measures)
            if family == "model":  # model.call.failed says what kind of failure, as a field
                record["error_kind"] = error_kind(exc)
            self.records.append(record)
            raise
        record["ended_at"] = time.time()
        record["output"] = _checked(output, family, name)
        _measured(record, measures)
        self.records.append(record)
        return output

    def next_id(self, family: Family) -> str:
        """The call id the next call of ``family`` gets."""
        return f"{self._prefix}:{_LETTER[family]}{len(self.records)}"

    @property
    def replaying(self) -> bool:
        """True when calls are served from a recording (nothing is called)."""
        return self._recorded is not None

    def _serve(self, record: CallRecord) -> Any:
        assert self._recorded is not None
        n = len(self.records)
        where = f"{self.node_id} ({self.execution_id}) call {n}"
        if n >= len(self._recorded):
            raise ReplayDivergence(where, f"new {record['family']} call {record['name']!r}")
        old = self._recorded[n]
        for key in ("family", "name", "request_hash"):
            was, now = old.get(key), record.get(key)
            if was != now:
                raise ReplayDivergence(where, f"{key} {was!r} became {now!r}")
        self.records.append(old)
        if "error" in old:
            raise RecordedCallError(old["error"])
        return old.get("output")

    def fact(self, kind: str, data: Mapping[str, object]) -> None:
        """Keep a fact for the outcome (dropped in a replay: the recording has them)."""
        if kind not in NODE_FACTS:
            raise InvalidCall(f"a node records only {', '.join(NODE_FACTS)}, not {kind!r}")
        if len(self.facts) >= MAX_FACTS:
            raise InvalidCall(f"more than {MAX_FACTS} facts in one node execution")
        try:
            size = len(canonical(data).encode())
        except (TypeError, ValueError):
            raise InvalidCall(f"fact {kind} is not JSON") from None
        if size > MAX_FACT_BYTES:
            raise InvalidCall(f"fact {kind} is {size} bytes of JSON; at most {MAX_FACT_BYTES}")
        if self._recorded is None:
            fact = cast(JsonObject, {**data, "execution_id": self.execution_id})  # checked
            self.facts.append((kind, fact, len(self.records)))

    def unused(self) -> int:
        """Recorded calls a replay did not serve (the new code made fewer calls)."""
        return 0 if self._recorded is None else len(self._recorded) - len(self.records)


def _ended(duration_s: float, error: str | None, usage: Any, kind: str | None) -> CallEnd:
    """A :class:`CallEnd`, with the token counts of the call's ``usage`` (``ctx.llm``)
    and a failed model call's error kind."""
    if not isinstance(usage, dict):
        return CallEnd(duration_s, error, error_kind=kind)
    return CallEnd(duration_s, error, _count(usage, "input_tokens"),
                   _count(usage, "output_tokens"), _count(usage, "cache_read_tokens"),
                   _count(usage, "cache_write_tokens"), error_kind=kind)


def _count(usage: Mapping[str, object], key: str) -> int | None:
    value = usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _measured(record: CallRecord, measures: Measures | None) -> None:
    """``record`` with what ``measures()`` knows once the call ended."""
    if measures is not None:
        record.update(cast(CallRecord, measures()))


def _checked(output: Any, family: str, name: str) -> JsonValue:
    try:
        size = len(canonical(output).encode())
    except (TypeError, ValueError):
        raise InvalidCall(f"{family} {name!r} returned a value that is not JSON") from None
    if size > MAX_OUTPUT_BYTES:
        raise InvalidCall(f"{family} {name!r} returned {size} bytes of JSON; "
                          f"at most {MAX_OUTPUT_BYTES} are recorded")
    return cast(JsonValue, output)  # canonical encoded it: JSON
