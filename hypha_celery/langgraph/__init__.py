"""Run an unmodified LangGraph ``StateGraph`` on Celery workers, durably.

    from hypha_celery import Hypha
    from hypha_celery.langgraph import distribute

    hypha = Hypha.from_env()
    graph = distribute(builder, hypha, id="research")   # builder: an uncompiled StateGraph
    graph.invoke(inputs, config={"configurable": {"thread_id": "t1"}})

Each ``invoke`` / ``stream`` / ``start`` is one hypha run of the graph ``id`` in the
session ``thread_id`` (runs of one thread go one at a time, FIFO). Supersteps run on
workers: one task as one node execution, several as a chord; LangGraph's own code
applies the writes and picks the next tasks in the step that ends a superstep (see
:mod:`hypha_celery.langgraph.graph` and ``docs/langgraph.md``). Needs the ``langgraph``
extra (``pip install 'hypha-celery[langgraph]'``).
"""

from __future__ import annotations

import builtins
import json
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hypha_celery.errors import ExtraNotInstalled, LangGraphNodeError, NotJsonState, RunFailed
from hypha_celery.events.status import RunStatus
from hypha_celery.langgraph.codec import Codec, Serializer
from hypha_celery.langgraph.engine import Engine, Snapshot
from hypha_celery.langgraph.graph import INTERRUPT, RECURSION_LIMIT, Mapping_
from hypha_celery.live import run_topic
from hypha_celery.store.projection import RunFilter

if TYPE_CHECKING:
    from hypha_celery.client.hypha import Hypha
    from hypha_celery.client.run import RunHandle

#: How often ``invoke`` and ``stream`` look at the run (seconds).
POLL_S = 0.02
#: LangGraph's default ``recursion_limit``.
DEFAULT_RECURSION_LIMIT = 25
_DONE = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})
_STEP_KINDS = ("node.execution.completed", "node.reducer.completed")
#: The ``kind`` of a task's stream chunk on a run's live topic.
LIVE_KIND = "langgraph"


def distribute(builder: Any, hypha: Hypha, *, id: str,
               nodes: Mapping[str, Mapping[str, Any]] | None = None,
               serializer: Serializer | None = None,
               graph: Mapping[str, Any] | None = None) -> DistributedGraph:
    """Compile ``builder`` (LangGraph's own errors for a graph that does not compile) and
    register it with ``hypha`` as the graph ``id``; call it where the app is defined, so
    that every worker importing the app knows it. ``nodes``: per LangGraph node, the
    options of its hypha :class:`~hypha_celery.graph.Node` (``side_effect``, ``queue``,
    ``timeout``, ``retry``, ...). ``serializer``: the codec of values that are not JSON
    (:class:`~hypha_celery.langgraph.codec.Serializer`). ``graph``: options of the hypha
    :class:`~hypha_celery.graph.Graph` (``node_timeout`` — also ``__begin__``'s —,
    ``execution_timeout``, ``max_state_bytes``, ``max_fanout``, ``on_dead_letter``);
    its ``max_steps`` is LangGraph's ``recursion_limit``'s business and is not taken."""
    _require_langgraph()
    compiled = builder.compile()
    engine = Engine(compiled, Codec(serializer))
    dist = DistributedGraph(hypha, id, engine)
    unknown = set(nodes or {}) - set(compiled.nodes)
    if unknown:
        from hypha_celery.errors import GraphSpecError

        raise GraphSpecError(f"distribute(nodes=) names no node of the graph: {sorted(unknown)}")
    hypha.register(Mapping_(id, engine, dist.previous, nodes or {}, dist.publish)
                   .build(graph or {}))
    return dist


class DistributedGraph:
    """A LangGraph graph run by hypha: LangGraph's calls (``invoke``, ``stream``,
    ``get_state``, ``get_state_history``) plus :meth:`start`."""

    def __init__(self, hypha: Hypha, graph_id: str, engine: Engine) -> None:
        self.hypha = hypha
        self.id = graph_id
        self.engine = engine

    # -- LangGraph's calls -------------------------------------------------------------
    def invoke(self, input: Any, config: Mapping[str, Any] | None = None, *,
               timeout: float | None = None) -> Any:
        """Run to the end (or to an interrupt) and return the graph's values, with
        ``__interrupt__`` when it stopped at one, as LangGraph's ``invoke`` does."""
        handle, thread, _ = self._run(input, config)
        self._wait(handle, timeout)
        return self._output(handle, thread)

    def stream(self, input: Any, config: Mapping[str, Any] | None = None, *,
               stream_mode: str | Sequence[str] = "values",
               timeout: float | None = None) -> Iterator[Any]:
        """The run's chunks of ``stream_mode`` (``values``, ``updates``, ``custom``,
        ``messages``; a list of them gives ``(mode, chunk)`` pairs), each as its step is
        recorded."""
        modes = [stream_mode] if isinstance(stream_mode, str) else list(stream_mode)
        handle, _, after = self._run(input, config, modes)
        for mode, chunk in self._chunks(handle, timeout, after):
            if mode in modes:
                yield chunk if isinstance(stream_mode, str) else (mode, chunk)

    def get_state(self, config: Mapping[str, Any]) -> Any:
        """LangGraph's ``StateSnapshot`` of the thread (built from the event log)."""
        thread = _thread(config)
        snaps = self._history(thread, _user(config))
        return self.engine.state(thread, snaps)[0]

    def get_state_history(self, config: Mapping[str, Any]) -> Iterator[Any]:
        """The thread's ``StateSnapshot`` s, newest first (one per superstep)."""
        thread = _thread(config)
        yield from self.engine.state(thread, self._history(thread, _user(config)))[1]

    def start(self, input: Any, config: Mapping[str, Any] | None = None) -> RunHandle:
        """Enqueue the run and return its handle at once."""
        return self._run(input, config)[0]

    # -- runs of a thread --------------------------------------------------------------
    def _run(self, input: Any, config: Mapping[str, Any] | None,
             modes: Sequence[str] = ()) -> tuple[RunHandle, str, int]:
        """The run of ``input`` (a resumed run: the one waiting), its thread, and the seq
        of its last event before this call (a resumed run streams what follows)."""
        from langgraph.types import Command

        config = config or {}
        thread = _thread(config) if "thread_id" in config.get("configurable", {}) \
            else uuid.uuid4().hex
        user = _user(config)
        if isinstance(input, Command) and input.resume is not None:
            handle, after = self._resume(thread, user, input.resume)
            return handle, thread, after
        limit = int(config.get("recursion_limit", DEFAULT_RECURSION_LIMIT))
        run_input = {"thread": thread, "limit": limit, "modes": sorted(set(modes)),
                     "input": self.engine.codec.encode(_as_input(input), "the input")}
        # new input on a thread stopped at an interrupt drops the interrupt, as LangGraph
        # does: the waiting run is cancelled (its position stays the thread's), so the
        # lane it holds goes on to this run
        for waiting in self._runs(thread, user, RunStatus.WAITING_HUMAN):
            self.hypha.cancel(waiting)
        handle = self.hypha.start(self.id, run_input, user_id=user, session_id=thread)
        return handle, thread, 0

    def _resume(self, thread: str, user: str | None, value: Any) -> tuple[RunHandle, int]:
        waiting = self._runs(thread, user, RunStatus.WAITING_HUMAN)
        if not waiting:
            raise LookupError(f"thread {thread!r} has no run waiting at an interrupt")
        run_id = waiting[0]
        note = json.dumps({"resume": self.engine.codec.encode(value, "the resume value")})
        after = max((ev.seq for ev in self.hypha.store.events(run_id)), default=0)
        self.hypha.approve(run_id, by="langgraph", note=note)
        return self.hypha.get_run(run_id), after

    def _runs(self, thread: str, user: str | None, status: str | None = None) -> list[str]:
        """The thread's runs (of ``user``'s session when given), newest first."""
        rows = self.hypha.store.list_runs(RunFilter(
            graph_id=self.id, session_id=thread, user_id=user, status=status), limit=500)
        return [r.run_id for r in rows]

    def previous(self, thread: str, run_id: str) -> Snapshot | None:
        """The thread's position before run ``run_id``: the newest earlier run's (of the
        same user's session)."""
        user = self.hypha.store.get(run_id).get("user_id")
        for other in self._runs(thread, user):
            if other == run_id:
                continue
            lg = self.hypha.store.get(other)["state"].get("lg")
            if isinstance(lg, str | dict):
                return Snapshot.of(lg)
        return None

    def _history(self, thread: str, user: str | None) -> list[Snapshot]:
        """Every position the thread's runs recorded, oldest first."""
        out: list[Snapshot] = []
        for run_id in reversed(self._runs(thread, user)):
            for ev in self.hypha.store.events(run_id):
                update = ev.data.get("update") if ev.kind in _STEP_KINDS else None
                if isinstance(update, dict) and "lg" in update and not ev.data.get("edge_of"):
                    snap = Snapshot.of(update["lg"])
                    applied = update.get("applied")
                    if out and isinstance(applied, list):
                        out[-1].writes = applied  # the superstep out[-1] began, applied
                    if out and out[-1].checkpoint == snap.checkpoint:
                        out[-1] = snap  # the same superstep, with more writes
                    else:
                        out.append(snap)
        return out

    # -- waiting and reading -----------------------------------------------------------
    def _wait(self, handle: RunHandle, timeout: float | None) -> None:
        """Until the run ends (woken by hypha's end-of-run notice) or waits at an
        interrupt (seen by looking every ``POLL_S``)."""
        end = None if timeout is None else time.monotonic() + timeout
        with self.hypha.notifier.listen(handle.id) as listener:
            while True:
                status = self.hypha.store.get(handle.id)["status"]
                if status in _DONE or status == RunStatus.WAITING_HUMAN:
                    return
                if end is not None and time.monotonic() > end:
                    from hypha_celery.errors import WaitTimeout

                    raise WaitTimeout(f"run {handle.id} still {status} after {timeout}s")
                listener.wait(POLL_S)

    def _output(self, handle: RunHandle, thread: str) -> Any:
        view = self.hypha.store.get(handle.id)
        if view["status"] == RunStatus.WAITING_HUMAN:
            values = self._output_of(self._values(view))
            values["__interrupt__"] = self._interrupts(view)
            return values
        if view["status"] != RunStatus.COMPLETED:
            self._raise(handle)
        return self._output_of(self.engine.codec.decode(view["result"]) or {})

    def _output_of(self, values: dict[str, Any]) -> Any:
        """What ``invoke`` returns of the graph's values: its output schema's channels
        (the ``values`` stream shows every state channel, as LangGraph's does)."""
        keys = self.engine.compiled.output_channels
        if isinstance(keys, str):
            return values.get(keys)
        return {k: v for k, v in values.items() if k in keys}

    def _values(self, view: Any) -> dict[str, Any]:
        """The graph's values the run's state holds (after its last superstep)."""
        return dict(self.engine.codec.decode(view["state"].get("values")) or {})

    def _interrupts(self, view: Any) -> list[Any]:
        from langgraph.types import Interrupt

        snap = Snapshot.of(view["state"]["lg"])
        return [Interrupt(value=self.engine.codec.decode(i.value), id=i.id)
                for i in snap.interrupts]

    def publish(self, run_id: str, entry: list[Any]) -> None:
        """A task's stream chunk (``[mode, chunk, id]``) on the run's live topic, as the
        node makes it (a worker calls this)."""
        mode, chunk, chunk_id = entry
        self.hypha.live.publish(run_topic(run_id), {"kind": LIVE_KIND, "mode": mode,
                                                     "chunk": chunk, "id": chunk_id})

    def _chunks(self, handle: RunHandle, timeout: float | None,
                after: int = 0) -> Iterator[list[Any]]:
        """The run's ``[mode, chunk]`` s after event ``after`` (a resumed run: first the
        values it stopped at, as LangGraph's resumed stream gives them); at an interrupt,
        the ``__interrupt__`` update and the values with ``__interrupt__``. ``custom`` and
        ``messages`` chunks come over the live topic as the node makes them; the event
        log's copy of each is given only when the live one was lost."""
        end = None if timeout is None else time.monotonic() + timeout
        seen: set[str] = set()
        with self.hypha.live.subscribe(run_topic(handle.id)) as sub:
            if after:
                yield ["values", self._values(self.hypha.store.get(handle.id))]
            seq = after
            while True:
                yield from self._live_chunks(sub, seen)
                status = self.hypha.store.get(handle.id)["status"]
                for ev in self.hypha.store.events(handle.id, after_seq=seq):
                    seq = ev.seq
                    yield from self._logged_chunks(ev, seen)
                if status == RunStatus.WAITING_HUMAN:
                    view = self.hypha.store.get(handle.id)
                    interrupts = tuple(self._interrupts(view))
                    yield ["updates", {"__interrupt__": interrupts}]
                    yield ["values", {**self._values(view), "__interrupt__": interrupts}]
                    return
                if status in _DONE:
                    if status != RunStatus.COMPLETED:
                        self._raise(handle)
                    return
                if end is not None and time.monotonic() > end:
                    return

    def _live_chunks(self, sub: Any, seen: set[str]) -> Iterator[list[Any]]:
        """What the live topic holds now (waiting up to ``POLL_S`` for the first)."""
        wait = POLL_S
        while (item := sub.get(timeout=wait)) is not None:
            wait = 0.0
            if item.get("kind") == LIVE_KIND and item.get("id") not in seen:
                seen.add(item["id"])
                yield self._chunk(item["mode"], item["chunk"])

    def _logged_chunks(self, ev: Any, seen: set[str]) -> Iterator[list[Any]]:
        update = ev.data.get("update") if ev.kind in _STEP_KINDS else None
        if not isinstance(update, dict) or ev.data.get("edge_of"):
            return
        for entry in update.get("chunks") or []:
            chunk_id = entry[2] if len(entry) > 2 else None
            if chunk_id is not None and chunk_id in seen:
                continue
            if chunk_id is not None:
                seen.add(chunk_id)
            yield self._chunk(entry[0], entry[1])

    def _chunk(self, mode: str, chunk: Any) -> list[Any]:
        value = self.engine.codec.decode(chunk)
        # a messages chunk is LangGraph's (message, metadata) pair
        return [mode, tuple(value) if mode == "messages" else value]

    def _raise(self, handle: RunHandle) -> None:
        """The node's exception, as LangGraph's ``invoke`` raises it."""
        failed = [e for e in self.hypha.store.events(handle.id)
                  if e.kind == "node.execution.failed" and e.data.get("error")]
        if not failed:
            view = self.hypha.store.get(handle.id)
            err: dict[str, Any] = dict(view["error"] or {})
            if err.get("reason") == RECURSION_LIMIT:
                from langgraph.errors import GraphRecursionError

                raise GraphRecursionError(str(err.get("message", "")))
            raise RunFailed(handle.id, str(err.get("reason", view["status"])),
                            str(err.get("message", "")))
        error = failed[-1].data["error"]
        raise _exception(handle.id, str(error.get("type", "Exception")),
                         str(error.get("message", "")),
                         modules=_node_modules(self.engine.compiled))


def _as_input(input: Any) -> Any:
    """A pydantic model or dataclass input as the dict of the channel writes LangGraph
    makes of it (its fields; a None left out where the field's default is None too and,
    for pydantic, it was not set explicitly): the JSON codec takes the dict."""
    import dataclasses

    from pydantic import BaseModel

    if isinstance(input, BaseModel):
        fields = type(input).model_fields
        return {k: v for k in fields if (v := getattr(input, k)) is not None
                or fields[k].default is not None or k in input.model_fields_set}
    if dataclasses.is_dataclass(input) and not isinstance(input, type):
        return {f.name: v for f in dataclasses.fields(input)
                if (v := getattr(input, f.name)) is not None or f.default is not None}
    return input


def _exception(run_id: str, type_name: str, message: str,
               modules: Sequence[Any] = ()) -> BaseException:
    """An instance of the node's exception type when it can be found by its name
    (built-in, LangGraph's errors, :class:`NotJsonState` of a node's write, or a class of
    that name in ``modules``: where the graph's node functions are defined), else
    :class:`LangGraphNodeError`."""
    import langgraph.errors as lg_errors

    name = type_name.rsplit(".", 1)[-1]
    if name == NotJsonState.__name__:
        return NotJsonState(message)
    for where in (builtins, lg_errors, *modules):
        found = getattr(where, name, None)
        if isinstance(found, type) and issubclass(found, Exception):
            try:
                return found(message)
            except TypeError:
                break
    return LangGraphNodeError(run_id, type_name, message)


def _node_modules(compiled: Any) -> list[Any]:
    """The modules that define the graph's node functions (where their exceptions
    usually are), as imported here."""
    names: list[str] = []
    for spec in compiled.builder.nodes.values():
        fn = getattr(spec.runnable, "func", None) or getattr(spec.runnable, "afunc", None)
        module = getattr(fn, "__module__", None)
        if isinstance(module, str) and module not in names:
            names.append(module)
    return [sys.modules[n] for n in names if n in sys.modules]


def _user(config: Mapping[str, Any]) -> str | None:
    """``config["configurable"]["user_id"]``: the hypha user the thread's runs belong to
    (their session is ``(user_id, thread_id)``), or None."""
    user = (config.get("configurable") or {}).get("user_id")
    return None if user is None else str(user)


def _thread(config: Mapping[str, Any]) -> str:
    thread = (config.get("configurable") or {}).get("thread_id")
    if thread is None:
        raise KeyError("config['configurable']['thread_id'] is needed to read a thread")
    return str(thread)


def _require_langgraph() -> None:
    try:
        import langgraph  # noqa: F401
    except ImportError:
        raise ExtraNotInstalled(
            "hypha_celery.langgraph needs LangGraph: pip install 'hypha-celery[langgraph]'"
        ) from None


__all__ = ["INTERRUPT", "DistributedGraph", "Serializer", "distribute"]
