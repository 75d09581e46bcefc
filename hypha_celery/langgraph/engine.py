"""One LangGraph superstep at a time, from a checkpoint kept as JSON.

A run begins with LangGraph's own loop (:meth:`Engine.advance`): on an ``InMemorySaver``
seeded with the thread's last position (:class:`Snapshot`), called with
``interrupt_before="*"`` so that it maps the input, applies it and prepares the first
tasks, and stops before running any node. Nodes run elsewhere, one task each, on workers
(:meth:`Engine.run_task`). A superstep ends (:meth:`Engine.apply`) as LangGraph's loop
ends one, with LangGraph's own functions: every task's writes applied through the
channels' reducers in its order (``apply_writes``: edges, ``Send`` s and ``Command``
writes included), the next checkpoint made (``create_checkpoint``), the next tasks
prepared (``prepare_next_tasks``), the ``updates`` and ``values`` chunks mapped
(``map_output_updates``, ``map_output_values``); not the loop itself, whose checkpointer,
executor and thread cost four times as much a step.

These are LangGraph internals (``langgraph.pregel._algo``, ``._checkpoint``, ``._io``,
``._retry``, ``._messages``, ``langgraph._internal._constants``): they come from
:func:`hypha_celery._private_api.langgraph_task_api` only, and
``tests/langgraph/test_internals.py`` fails when LangGraph changes them.
"""

from __future__ import annotations

import asyncio
import binascii
import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from hypha_celery._private_api import langgraph_task_api
from hypha_celery.langgraph.codec import Codec

#: The checkpoint namespace of the graph itself (subgraphs run inside their task).
_NS = ""


@dataclass(frozen=True, slots=True)
class PreparedTask:
    """A task LangGraph prepared for the next superstep: its id, its node and its path
    (``(PULL, node)`` or ``(PUSH, index)``: what prepares it again on a worker)."""

    id: str
    name: str
    path: tuple[Any, ...]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "path": list(self.path)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PreparedTask:
        return cls(data["id"], data["name"], tuple(data["path"]))


@dataclass(frozen=True, slots=True)
class RaisedInterrupt:
    """An ``interrupt()`` a task raised: the task, LangGraph's interrupt id and its value
    (JSON, as the codec wrote it)."""

    task_id: str
    id: str
    value: Any

    def to_json(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "id": self.id, "value": self.value}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RaisedInterrupt:
        return cls(data["task_id"], data["id"], data["value"])


@dataclass(slots=True)
class Snapshot:
    """A thread's position, as a run's state keeps it (JSON, see :meth:`to_json`): the
    checkpoint, its metadata, the pending writes of the superstep in progress
    (``[task_id, channel, value]``), the tasks LangGraph prepared next and the
    interrupts raised by them."""

    checkpoint: Any
    metadata: Any
    writes: list[list[Any]] = field(default_factory=list)
    tasks: list[PreparedTask] = field(default_factory=list)
    interrupts: list[RaisedInterrupt] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"checkpoint": self.checkpoint, "metadata": self.metadata,
                "writes": self.writes, "tasks": [t.to_json() for t in self.tasks],
                "interrupts": [i.to_json() for i in self.interrupts]}

    def dumps(self) -> str:
        """As a run's state and events keep it: one JSON string (a value the runtime copies
        and the store encodes as it is, where the nested checkpoint would be walked)."""
        return json.dumps(self.to_json(), separators=(",", ":"))

    @classmethod
    def of(cls, kept: str | dict[str, Any]) -> Snapshot:
        """What :meth:`dumps` (or :meth:`to_json`) gave."""
        return cls.from_json(json.loads(kept) if isinstance(kept, str) else kept)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Snapshot:
        return cls(data["checkpoint"], data["metadata"], list(data.get("writes") or []),
                   [PreparedTask.from_json(t) for t in data.get("tasks") or []],
                   [RaisedInterrupt.from_json(i) for i in data.get("interrupts") or []])

    def done(self) -> set[str]:
        """Tasks with writes of their own (not only an interrupt)."""
        return {w[0] for w in self.writes if w[1] != "__interrupt__"}

    def interrupted(self) -> set[str]:
        return {i.task_id for i in self.interrupts}


@dataclass(slots=True)
class Step:
    """What one advance gives: the new position and the stream chunks LangGraph emitted
    (``[mode, chunk]``, JSON)."""

    snapshot: Snapshot
    chunks: list[list[Any]]


@dataclass(slots=True)
class TaskResult:
    """One task's end: its writes (``[channel, value]``, JSON), the interrupts it raised
    and the stream chunks it made (``[mode, chunk, id]``: ``custom``, ``messages``)."""

    writes: list[list[Any]] = field(default_factory=list)
    interrupts: list[RaisedInterrupt] = field(default_factory=list)
    chunks: list[list[Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"writes": self.writes, "interrupts": [i.to_json() for i in self.interrupts],
                "chunks": self.chunks}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskResult:
        return cls(data["writes"], [RaisedInterrupt.from_json(i) for i in data["interrupts"]],
                   data["chunks"])


class Engine:
    """A compiled LangGraph graph driven one superstep at a time (see the module)."""

    def __init__(self, compiled: Any, codec: Codec) -> None:
        self.compiled = compiled
        self.codec = codec
        self.retry_policies = node_retry_policies(compiled)
        from langgraph.checkpoint.memory import InMemorySaver

        #: Makes channel versions as LangGraph's in-memory checkpointer does.
        self._versions = InMemorySaver()
        self.async_nodes = async_nodes(compiled)

    # -- the thread's checkpointer, seeded from a snapshot ---------------------------------
    def seeded(self, thread: str, snap: Snapshot | None) -> tuple[Any, dict[str, Any]]:
        """An ``InMemorySaver`` holding ``snap``, and the config of the thread
        (``recursion_limit`` set by the caller)."""
        from langgraph.checkpoint.memory import InMemorySaver

        saver = InMemorySaver()
        config: dict[str, Any] = {"configurable": {"thread_id": thread,
                                                   "checkpoint_ns": _NS}}
        if snap is None:
            return saver, config
        checkpoint = self.codec.decode(snap.checkpoint)
        at = saver.put(cast(Any, config), checkpoint, self.codec.decode(snap.metadata),
                      checkpoint["channel_versions"])
        for task_id, writes in _by_task(snap.writes).items():
            saver.put_writes(at, [(c, self.codec.decode(v)) for c, v in writes], task_id)
        return saver, config

    # -- the loop's part -------------------------------------------------------------------
    def advance(self, thread: str, snap: Snapshot | None, value: Any, limit: int) -> Step:
        """Run LangGraph's loop from ``snap`` (the thread's last position; None for a new
        thread) on the input ``value`` until it stops before the first nodes: the input
        mapped to channel writes and applied, a superstep left unfinished at ``snap``
        dropped, the first tasks prepared, as LangGraph's ``invoke`` begins."""
        saver, config = self.seeded(thread, snap)
        graph = self._on(saver)
        chunks: list[list[Any]] = []
        # durability "sync": the checkpoint is put before stream returns, in this thread
        for mode, chunk in graph.stream(value, {**config, "recursion_limit": limit},
                                        stream_mode=["updates", "values"],
                                        interrupt_before="*", durability="sync"):
            if mode == "updates":
                chunk = _update_chunk(chunk)
                if chunk is None:
                    continue
            chunks.append([mode, self.codec.encode(chunk, f"a {mode} chunk")])
        return Step(self._read(saver, config), chunks)

    def apply(self, snap: Snapshot, writes: Sequence[list[Any]], limit: int) -> Step:
        """The superstep ``snap`` prepared, ended with ``writes`` (``[task_id, channel,
        value]``, every task's): the writes applied through the channels (LangGraph's
        ``apply_writes``: reducers, edges, ``Send``), the next checkpoint made
        (``create_checkpoint``) and its tasks prepared (``prepare_next_tasks``), and the
        ``updates`` and ``values`` chunks LangGraph's loop gives for it. What one pass of
        LangGraph's loop does after a superstep, without starting the loop (its
        checkpointer, executor and thread): about a fifth of the CPU of :meth:`advance`."""
        lg = langgraph_task_api()
        checkpoint = self.codec.decode(snap.checkpoint)
        metadata = self.codec.decode(snap.metadata)
        step = int(metadata.get("step", -1)) + 1
        channels, managed = lg.channels_from_checkpoint(self.compiled.channels, checkpoint)
        ordered = [self._prepared(lg, t, checkpoint, [], channels, managed,
                                  _config("", checkpoint, limit), step, limit)
                   for t in snap.tasks]
        by_task = _by_task(writes)
        for task in ordered:
            task.writes.extend((c, self.codec.decode(v)) for c, v in by_task.get(task.id, ()))
        updated = lg.apply_writes(checkpoint, channels, ordered, self._versions.get_next_version,
                                  self.compiled.trigger_to_nodes)
        chunks = self._applied_chunks(lg, ordered, channels)
        made = lg.create_checkpoint(checkpoint, channels, step, updated_channels=updated)
        metadata = {"source": "loop", "step": step, "parents": {}}
        return Step(Snapshot(self._encoded(lg, made, channels), metadata, [],
                             self._next_tasks(lg, made, metadata, [], channels, managed,
                                              _config("", made, limit), updated)), chunks)

    def _applied_chunks(self, lg: Any, tasks: list[Any], channels: Any) -> list[list[Any]]:
        """The ``updates`` chunk of each task with writes, then the ``values`` chunk, as
        LangGraph's ``stream`` gives them (its stream channels)."""
        keys = self.compiled.stream_channels_asis
        chunks: list[list[Any]] = []
        for task in tasks:
            if task.writes:
                for chunk in lg.map_output_updates(keys, [(task, list(task.writes))]):
                    chunks.append(["updates", self.codec.encode(chunk, "an updates chunk")])
        every = [w for t in tasks for w in t.writes]
        for chunk in lg.map_output_values(keys, every, channels):
            chunks.append(["values", self.codec.encode(chunk, "a values chunk")])
        return chunks

    def _encoded(self, lg: Any, checkpoint: Any, channels: Any) -> dict[str, Any]:
        """``checkpoint`` as JSON, each delta channel whole (LangGraph keeps only its
        writes in a checkpoint and replays its ancestors' to read it): a snapshot stands
        alone. A barrier's set is kept as a tagged set."""
        enc = self.codec.encode
        values = dict(checkpoint["channel_values"])
        for k, spec in self.compiled.channels.items():
            if isinstance(spec, lg.DeltaChannel) and k in checkpoint["channel_versions"] \
                    and channels[k].is_available():
                values[k] = channels[k].get()
        rest = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        return {**enc(rest, "the checkpoint"),
                "channel_values": {k: enc(v, f"channel {k!r}", sets=self._barrier(k))
                                   for k, v in values.items()}}

    def _next_tasks(self, lg: Any, checkpoint: Any, metadata: Any, pending: list[Any],
                    channels: Any, managed: Any, config: Any,
                    updated: set[str] | None) -> list[PreparedTask]:
        """The tasks LangGraph prepares at ``checkpoint`` (what its ``get_state`` shows as
        ``tasks``), in its order."""
        step = int(metadata.get("step", -1)) + 1
        tasks = lg.prepare_next_tasks(
            checkpoint, pending, self.compiled.nodes, channels, managed, config, step,
            step + 1, for_execution=False, trigger_to_nodes=self.compiled.trigger_to_nodes,
            updated_channels=updated)
        return [PreparedTask(t.id, t.name, tuple(t.path[:2])) for t in tasks.values()]

    def _on(self, saver: Any) -> Any:
        """The compiled graph with ``saver`` as its checkpointer."""
        return self.compiled.copy(update={"checkpointer": saver})

    def _read(self, saver: Any, config: dict[str, Any]) -> Snapshot:
        """The newest position ``saver`` holds for the thread."""
        lg = langgraph_task_api()
        tup = saver.get_tuple(config)
        enc = self.codec.encode
        channels, managed = lg.channels_from_checkpoint(self.compiled.channels, tup.checkpoint,
                                                        saver=saver, config=tup.config)
        pending = list(tup.pending_writes or [])
        interrupts = [RaisedInterrupt(t, i.id, enc(i.value, "an interrupt"))
                      for t, c, raised in pending if c == "__interrupt__" for i in raised]
        writes = [[t, c, enc(v, f"a write of task {t} to channel {c!r}")]
                  for t, c, v in pending]
        updated = tup.checkpoint.get("updated_channels")
        tasks = self._next_tasks(lg, tup.checkpoint, tup.metadata, pending, channels, managed,
                                 tup.config, None if updated is None else set(updated))
        return Snapshot(self._encoded(lg, tup.checkpoint, channels),
                        enc(tup.metadata, "metadata"), writes, tasks, interrupts)

    def _barrier(self, channel: str) -> bool:
        """Whether ``channel`` is one of LangGraph's barriers (its value: a set)."""
        from langgraph.channels.named_barrier_value import (
            NamedBarrierValue,
            NamedBarrierValueAfterFinish,
        )

        spec = self.compiled.channels.get(channel)
        return isinstance(spec, NamedBarrierValue | NamedBarrierValueAfterFinish)

    def state(self, thread: str, snaps: Sequence[Snapshot]) -> tuple[Any, Any]:
        """LangGraph's ``StateSnapshot`` of the newest of ``snaps`` and the history of all
        (newest first), through a saver holding every one."""
        from langgraph.checkpoint.memory import InMemorySaver

        saver = InMemorySaver()
        config: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": _NS}}
        at: Any = config
        for snap in snaps:
            checkpoint = self.codec.decode(snap.checkpoint)
            at = saver.put(at, checkpoint, self.codec.decode(snap.metadata),
                          checkpoint["channel_versions"])
            for task_id, writes in _by_task(snap.writes).items():
                saver.put_writes(at, [(c, self.codec.decode(v)) for c, v in writes], task_id)
            for task_id, raised in self._interrupt_writes(snap).items():
                saver.put_writes(at, [("__interrupt__", raised)], task_id)
        graph = self._on(saver)
        return graph.get_state(config), list(graph.get_state_history(config))

    def _interrupt_writes(self, snap: Snapshot) -> dict[str, list[Any]]:
        """The ``Interrupt`` s each task of ``snap`` raised, as LangGraph keeps them (a
        pending write to ``__interrupt__``): its ``StateSnapshot`` shows them."""
        from langgraph.types import Interrupt

        out: dict[str, list[Any]] = {}
        for i in snap.interrupts:
            out.setdefault(i.task_id, []).append(
                Interrupt(value=self.codec.decode(i.value), id=i.id))
        return out

    # -- a worker's part -------------------------------------------------------------------
    def run_task(self, thread: str, snap: Snapshot, task_id: str, limit: int,
                 resume: Any = None, resumed: bool = False, messages: bool = False,
                 live: Callable[[list[Any]], None] | None = None) -> TaskResult:
        """Run task ``task_id`` of ``snap``'s next superstep here, once (its retries are
        hypha's: :func:`retryable`); ``resume``: the value its ``interrupt()`` returns
        now; ``messages``: keep the ``messages`` stream chunks (its chat models' tokens,
        its output's messages); ``live``: called with each chunk as it is made (``[mode,
        chunk, id]``, the id ``<task id>:<n>``). Only this task is prepared (by its path),
        so a superstep of N tasks costs each of them what one costs."""
        lg = langgraph_task_api()
        found = [t for t in snap.tasks if t.id == task_id]
        if not found:
            raise LookupError(f"task {task_id} is not in this superstep")
        chunks = _Chunks(task_id, live)
        checkpoint = self.codec.decode(snap.checkpoint)
        pending = [(t, c, self.codec.decode(v)) for t, c, v in snap.writes if t != task_id]
        if resumed:
            pending.append((lg.NULL_TASK_ID, lg.RESUME, resume))
        runtime = lg.DEFAULT_RUNTIME.override(stream_writer=lambda c: chunks.add(
            "custom", self.codec.encode(c, "a custom chunk")))
        config = _config(thread, checkpoint, limit)
        config["configurable"][lg.CONFIG_KEY_RUNTIME] = runtime
        channels, managed = lg.channels_from_checkpoint(self.compiled.channels, checkpoint)
        step = int(self.codec.decode(snap.metadata).get("step", -1)) + 1
        task = self._prepared(lg, found[0], checkpoint, pending, channels, managed, config,
                              step, limit,
                              self._messages_manager(lg, chunks) if messages else None)
        if task is None or task.id != task_id:
            raise LookupError(f"task {task_id} did not prepare again")
        return self._run(lg, task, chunks)

    def _prepared(self, lg: Any, found: PreparedTask, checkpoint: Any, pending: list[Any],
                  channels: Any, managed: Any, config: Any, step: int, limit: int,
                  manager: Any = None) -> Any:
        """The executable task at ``found``'s path (LangGraph's ``prepare_single_task``):
        only that task, whatever the width of its superstep."""
        return lg.prepare_single_task(
            found.path, None, checkpoint=checkpoint,
            checkpoint_id_bytes=binascii.unhexlify(checkpoint["id"].replace("-", "")),
            checkpoint_null_version=lg.checkpoint_null_version(checkpoint),
            pending_writes=pending, processes=self.compiled.nodes, channels=channels,
            managed=managed, config=config, step=step, stop=step + limit + 1,
            for_execution=True, manager=manager)

    def _messages_manager(self, lg: Any, chunks: _Chunks) -> Any:
        """A callback run manager whose handler is LangGraph's own for ``messages``: the
        task's chat models and output messages become ``[message, metadata]`` chunks."""
        from langchain_core.callbacks import CallbackManager

        def keep(chunk: Any) -> None:
            _, _, (message, meta) = chunk
            chunks.add("messages", [self.codec.encode(message, "a message chunk"),
                                    self.codec.encode(_plain(meta), "a message's metadata")])

        handler = lg.StreamMessagesHandler(keep, False)
        manager = CallbackManager.configure(inheritable_callbacks=[handler])
        return manager.on_chain_start(None, None, name="LangGraph")

    def _run(self, lg: Any, task: Any, chunks: _Chunks) -> TaskResult:
        once = dataclasses.replace(task, retry_policy=())
        try:
            if task.name in self.async_nodes:
                asyncio.run(lg.arun_with_retry(once, ()))
            else:
                lg.run_with_retry(once, ())
        except lg.GraphInterrupt as exc:
            found = [RaisedInterrupt(task.id, i.id, self.codec.encode(i.value, "an interrupt"))
                     for i in (exc.args[0] if exc.args else ())]
            return TaskResult(interrupts=found, chunks=chunks.made)
        except Exception as exc:
            policies = self.retry_policies.get(task.name)
            if policies:  # LangGraph's retry_on decides; hypha's RetryPolicy retries
                exc.error_class = "transient" if retryable(policies, exc) else "validation"  # type: ignore[attr-defined]
            raise
        enc = self.codec.encode
        writes = [[c, enc(v, f"node {task.name!r}'s write to channel {c!r}")]
                  for c, v in task.writes]
        return TaskResult(writes=writes, chunks=chunks.made)


class _Chunks:
    """A task's stream chunks (``[mode, chunk, id]``), each handed to ``live`` too as it is
    made."""

    def __init__(self, task_id: str, live: Callable[[list[Any]], None] | None) -> None:
        self.task_id = task_id
        self.live = live
        self.made: list[list[Any]] = []

    def add(self, mode: str, chunk: Any) -> None:
        entry = [mode, chunk, f"{self.task_id}:{len(self.made)}"]
        self.made.append(entry)
        if self.live is not None:
            self.live(entry)


def _config(thread: str, checkpoint: Any, limit: int) -> dict[str, Any]:
    """The run config a task is prepared with, at ``checkpoint``."""
    return {"recursion_limit": limit, "configurable": {
        "thread_id": thread, "checkpoint_ns": _NS, "checkpoint_id": checkpoint["id"]}}


def _plain(meta: Any) -> dict[str, Any]:
    """A message's metadata as JSON can hold it (what is not JSON, as its text)."""
    out: dict[str, Any] = {}
    for key, value in dict(meta).items():
        try:
            json.dumps(value)
        except TypeError:
            value = list(value) if isinstance(value, tuple) else str(value)
        out[str(key)] = value
    return out


def retryable(policies: Sequence[Any], exc: Exception) -> bool:
    """Whether one of a node's LangGraph ``RetryPolicy`` s retries ``exc`` (its
    ``retry_on``: an exception class, a sequence of them, or a predicate)."""
    for policy in policies:
        on = policy.retry_on
        if isinstance(on, type) and issubclass(on, Exception):
            if isinstance(exc, on):
                return True
        elif isinstance(on, Sequence):
            if isinstance(exc, tuple(on)):
                return True
        elif callable(on) and on(exc):
            return True
    return False


def node_retry_policies(compiled: Any) -> dict[str, tuple[Any, ...]]:
    """Each node's LangGraph ``RetryPolicy`` s (the builder's), by node name."""
    out: dict[str, tuple[Any, ...]] = {}
    for name, spec in compiled.builder.nodes.items():
        policy = spec.retry_policy
        if policy is None:
            continue
        # a RetryPolicy is itself a tuple (a NamedTuple): one policy, or a sequence of them
        out[name] = (policy,) if hasattr(policy, "retry_on") else tuple(policy)
    return out


def async_nodes(compiled: Any) -> frozenset[str]:
    """The nodes whose function is a coroutine function only (``async def``)."""
    return frozenset(
        name for name, spec in compiled.builder.nodes.items()
        if getattr(spec.runnable, "func", True) is None
        and getattr(spec.runnable, "afunc", None) is not None)


def _by_task(writes: Sequence[list[Any]]) -> dict[str, list[tuple[str, Any]]]:
    out: dict[str, list[tuple[str, Any]]] = {}
    for task_id, channel, value in writes:
        out.setdefault(task_id, []).append((channel, value))
    return out


def _update_chunk(chunk: Any) -> Any:
    """An ``updates`` chunk as LangGraph gives it to a caller of ``stream``: without the
    replay marker a reapplied task's chunk carries, and None for the empty interrupt
    notice of ``interrupt_before``."""
    if not isinstance(chunk, dict):
        return chunk
    if set(chunk) == {"__interrupt__"} and not chunk["__interrupt__"]:
        return None
    return {k: v for k, v in chunk.items() if k != "__metadata__"}


__all__ = ["Engine", "PreparedTask", "RaisedInterrupt", "Snapshot", "Step", "TaskResult",
           "async_nodes", "node_retry_policies", "retryable"]
