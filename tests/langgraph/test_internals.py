"""Guards of the LangGraph internals :mod:`hypha_celery.langgraph.engine` uses (through
:func:`hypha_celery._private_api.langgraph_task_api`): each test
fails with a message naming what changed, so a LangGraph upgrade breaks here first, not in
a worker."""

from __future__ import annotations

import inspect
import re
from importlib import metadata
from pathlib import Path
from typing import Any

from hypha_celery._private_api import langgraph_task_api as _internals

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _params(fn: Any) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(fn).parameters)


def test_every_internal_imports() -> None:
    lg = _internals()  # ImportError here: LangGraph moved one of them
    assert callable(lg.prepare_next_tasks) and callable(lg.channels_from_checkpoint)
    assert callable(lg.run_with_retry)


def test_prepare_next_tasks_takes_the_arguments_engine_passes() -> None:
    params = _params(_internals().prepare_next_tasks)
    positional = ["checkpoint", "pending_writes", "processes", "channels", "managed",
                  "config", "step", "stop"]
    assert list(params)[:8] == positional, (
        f"prepare_next_tasks' leading parameters changed: {list(params)[:8]}")
    for kw in ("for_execution", "store", "checkpointer", "manager", "trigger_to_nodes"):
        assert kw in params, f"prepare_next_tasks no longer takes {kw}="


def test_channels_from_checkpoint_takes_saver_and_config() -> None:
    params = _params(_internals().channels_from_checkpoint)
    assert list(params)[:2] == ["specs", "checkpoint"], (
        f"channels_from_checkpoint's parameters changed: {list(params)}")
    for kw in ("saver", "config"):
        assert kw in params, f"channels_from_checkpoint no longer takes {kw}="


def test_run_with_retry_takes_a_task_and_a_retry_policy() -> None:
    params = list(_params(_internals().run_with_retry))
    assert params[:2] == ["task", "retry_policy"], f"run_with_retry's parameters: {params}"


def test_constants_keep_their_values() -> None:
    lg = _internals()
    assert (lg.CONFIG_KEY_RUNTIME, lg.NULL_TASK_ID, lg.RESUME) == (
        "__pregel_runtime", "00000000-0000-0000-0000-000000000000", "__resume__"), (
        "LangGraph's CONFIG_KEY_RUNTIME / NULL_TASK_ID / RESUME changed: stored pending "
        "writes (resume values) name them")


def test_delta_channel_is_a_channel_class() -> None:
    from langgraph.channels.base import BaseChannel

    lg = _internals()
    assert isinstance(lg.DeltaChannel, type) and issubclass(lg.DeltaChannel, BaseChannel), (
        "langgraph.channels.delta.DeltaChannel is no longer a BaseChannel")


def test_default_runtime_override_sets_the_stream_writer() -> None:
    seen: list[Any] = []
    runtime = _internals().DEFAULT_RUNTIME.override(stream_writer=seen.append)
    runtime.stream_writer("chunk")
    assert seen == ["chunk"], "Runtime.override(stream_writer=) no longer routes chunks"


def test_graph_interrupt_carries_interrupts_in_args() -> None:
    from langgraph.types import Interrupt

    lg = _internals()
    exc = lg.GraphInterrupt((Interrupt(value=1, id="i"),))
    assert exc.args[0][0].value == 1, "GraphInterrupt no longer carries its interrupts in args[0]"


def test_pregel_copy_replaces_the_checkpointer() -> None:
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, StateGraph
    from typing_extensions import TypedDict

    class S(TypedDict):
        x: int

    builder = StateGraph(S)
    builder.add_node("n", lambda s: {"x": s["x"] + 1})
    builder.add_edge(START, "n")
    compiled = builder.compile()
    saver = InMemorySaver()
    copy = compiled.copy(update={"checkpointer": saver})
    assert copy.checkpointer is saver and compiled.checkpointer is None, (
        "Pregel.copy(update={'checkpointer': ...}) no longer makes a graph on that saver")
    for attr in ("channels", "nodes", "trigger_to_nodes", "retry_policy"):
        assert hasattr(compiled, attr), f"a compiled graph has no .{attr} any more"


def test_in_memory_saver_put_put_writes_get_tuple() -> None:
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.memory import InMemorySaver

    saver = InMemorySaver()
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    checkpoint = empty_checkpoint()
    at = saver.put(config, checkpoint, {"step": 0}, {})
    saver.put_writes(at, [("x", 1)], "task-1")
    tup = saver.get_tuple(config)
    assert tup is not None and tup.checkpoint["id"] == checkpoint["id"]
    assert tup.metadata["step"] == 0
    assert list(tup.pending_writes or []) == [("task-1", "x", 1)], (
        "InMemorySaver's pending_writes are no longer (task_id, channel, value)")


def test_installed_langgraph_is_inside_the_extras_range() -> None:
    text = PYPROJECT.read_text()
    found = re.search(r'^langgraph = \["langgraph>=([\d.]+),<([\d.]+)"\]', text, re.M)
    assert found, "pyproject's langgraph extra is no longer langgraph>=X,<Y"
    low, high = (tuple(int(p) for p in v.split(".")) for v in found.groups())
    installed = tuple(int(p) for p in metadata.version("langgraph").split(".")[:3])
    assert low <= installed < high, (
        f"langgraph {installed} is outside the extra's range [{low}, {high}): the "
        "internals above were checked for that range only")


def test_prepare_single_task_takes_a_path_and_the_keywords_engine_passes() -> None:
    lg = _internals()
    params = _params(lg.prepare_single_task)
    assert list(params)[:2] == ["task_path", "task_id_checksum"], (
        f"prepare_single_task's leading parameters changed: {list(params)[:2]}")
    for kw in ("checkpoint", "checkpoint_id_bytes", "checkpoint_null_version",
               "pending_writes", "processes", "channels", "managed", "config", "step",
               "stop", "for_execution"):
        assert kw in params, f"prepare_single_task no longer takes {kw}="
    assert list(_params(lg.checkpoint_null_version)) == ["checkpoint"], (
        "checkpoint_null_version's parameters changed")


def test_arun_with_retry_takes_a_task_and_a_retry_policy() -> None:
    params = list(_params(_internals().arun_with_retry))
    assert params[:2] == ["task", "retry_policy"], f"arun_with_retry's parameters: {params}"
    assert inspect.iscoroutinefunction(_internals().arun_with_retry)


def test_an_executable_task_is_a_dataclass_with_a_retry_policy() -> None:
    """The engine runs a task once (``dataclasses.replace(task, retry_policy=())``):
    hypha's RetryPolicy retries it."""
    import dataclasses

    from langgraph.types import PregelExecutableTask

    assert dataclasses.is_dataclass(PregelExecutableTask), "PregelExecutableTask changed"
    names = {f.name for f in dataclasses.fields(PregelExecutableTask)}
    assert {"retry_policy", "writes", "name", "id"} <= names, f"its fields: {names}"


def test_a_builders_node_spec_has_its_runnable_and_retry_policy() -> None:
    from langgraph.graph import START, StateGraph
    from langgraph.types import RetryPolicy
    from typing_extensions import TypedDict

    class State(TypedDict):
        n: int

    async def bump(state: State) -> dict[str, int]:
        return {"n": state["n"] + 1}

    b = StateGraph(State)
    b.add_node("bump", bump, retry_policy=RetryPolicy(max_attempts=2))
    b.add_edge(START, "bump")
    spec = b.compile().builder.nodes["bump"]
    assert spec.retry_policy == RetryPolicy(max_attempts=2), "StateNodeSpec.retry_policy"
    assert spec.runnable.func is None and spec.runnable.afunc is not None, (
        "an async node's runnable no longer has func=None and afunc set")


def test_the_messages_handler_takes_a_stream_and_subgraphs() -> None:
    """A worker hands LangGraph's own ``messages`` callback handler to the task's run
    manager: ``StreamMessagesHandler(stream, subgraphs)``, calling ``stream`` with
    ``(namespace, "messages", (message, metadata))``."""
    from langchain_core.callbacks import BaseCallbackHandler

    handler = _internals().StreamMessagesHandler
    assert list(_params(handler))[:2] == ["stream", "subgraphs"], (
        f"StreamMessagesHandler's parameters: {list(_params(handler))}")
    assert issubclass(handler, BaseCallbackHandler)


def test_the_functions_of_a_superstep_s_end_take_what_engine_apply_passes() -> None:
    """``Engine.apply`` ends a superstep as LangGraph's loop does, with its functions:
    ``apply_writes``, ``create_checkpoint``, ``map_output_updates``, ``map_output_values``."""
    lg = _internals()
    assert list(_params(lg.apply_writes))[:5] == [
        "checkpoint", "channels", "tasks", "get_next_version", "trigger_to_nodes"], (
        f"apply_writes' parameters: {list(_params(lg.apply_writes))}")
    params = _params(lg.create_checkpoint)
    assert list(params)[:3] == ["checkpoint", "channels", "step"], (
        f"create_checkpoint's parameters: {list(params)}")
    assert "updated_channels" in params, "create_checkpoint no longer takes updated_channels="
    assert list(_params(lg.map_output_updates))[:2] == ["output_channels", "tasks"]
    assert list(_params(lg.map_output_values))[:3] == [
        "output_channels", "pending_writes", "channels"]
