"""Each LangGraph program of :mod:`tests.langgraph.graphs` run twice: by LangGraph itself
(``compile(checkpointer=InMemorySaver())``) and by hypha (``distribute``) on a real
``celery worker`` process (prefork, :mod:`tests.langgraph.worker_app`) on real Redis and
PostgreSQL; results, stream chunks and state history compared.

Where hypha differs by design, the test pins what hypha does (``# differs:``)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import GraphRecursionError, InvalidUpdateError
from langgraph.types import Command, Interrupt

from hypha_celery import Hypha
from hypha_celery.errors import NotJsonState
from tests.integration.helpers import Backends, Worker, close_client, purge
from tests.langgraph import graphs

APP = "tests.langgraph.worker_app:celery"
WAIT = 30.0


@pytest.fixture(scope="module")
def hypha(redis_url: str, pg_url: str, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Any]]:
    """A client with every graph distributed, and one worker process serving them."""
    backends = Backends("redis", redis_url, redis_url, pg_url)
    client = Hypha(backends.settings())
    distributed = graphs.distribute_all(client)
    client.store.migrate()
    purge(redis_url, sorted(client.queues()))
    log = tmp_path_factory.mktemp("lg-worker") / "worker.log"
    worker = Worker(backends, log, queues=sorted(client.queues()), app=APP)
    try:
        worker.start(client.celery)
        yield distributed
    finally:
        worker.stop()
        close_client(client)


def reference(gid: str) -> Any:
    return graphs.BUILDERS[gid]().compile(checkpointer=InMemorySaver())


def config(**extra: Any) -> dict[str, Any]:
    return {"configurable": {"thread_id": uuid.uuid4().hex}, **extra}


def history(graph: Any, cfg: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Each ``StateSnapshot`` of the thread, newest first, as what should match: values,
    next, step and source, and each task's name, interrupt values and result."""
    return [(s.values, s.next, s.metadata.get("step"), s.metadata.get("source"),
             [(t.name, [i.value for i in t.interrupts], t.result) for t in s.tasks],
             [i.value for i in s.interrupts])
            for s in graph.get_state_history(cfg)]


def canon(chunks: list[Any]) -> list[str]:
    """Chunks as sorted JSON text: the order of one superstep's tasks' chunks differs
    (LangGraph: as tasks finish; hypha: in task order)."""
    return sorted(json.dumps(c, sort_keys=True, default=repr) for c in chunks)


def same_run(hypha: dict[str, Any], gid: str, inputs: Any, *,
             ordered: bool = True) -> tuple[Any, Any, dict[str, Any], dict[str, Any]]:
    """invoke, stream (updates, values) and history compared; returns both graphs and
    their invoke configs."""
    ref, ours = reference(gid), hypha[gid]
    rc, oc = config(), config()
    assert ours.invoke(inputs, oc, timeout=WAIT) == ref.invoke(inputs, rc)
    for mode in ("updates", "values", ["values", "updates"]):
        want = list(ref.stream(inputs, config(), stream_mode=mode))
        got = list(ours.stream(inputs, config(), stream_mode=mode, timeout=WAIT))
        if ordered:
            assert got == want, mode
        else:
            assert canon(got) == canon(want), mode
    # differs: LangGraph's history ends with the checkpoint of the input (step -1, next
    # ('__start__',)); hypha's starts at the first superstep after it.
    want_history = history(ref, rc)
    assert want_history[-1][1] == ("__start__",)
    assert history(ours, oc) == want_history[:-1]
    assert ours.get_state(oc).values == ref.get_state(rc).values
    return ref, ours, rc, oc


def test_linear(hypha: dict[str, Any]) -> None:
    same_run(hypha, "lg_linear", {"text": ">"})


def test_parallel_nodes_in_one_superstep(hypha: dict[str, Any]) -> None:
    same_run(hypha, "lg_parallel", {"items": [], "topic": ""}, ordered=False)


def test_parallel_updates_follow_task_order(hypha: dict[str, Any]) -> None:
    # differs: LangGraph streams a superstep's updates as its tasks finish; hypha in the
    # order of the tasks (LangGraph's own order of applying their writes).
    got = list(hypha["lg_parallel"].stream({"items": [], "topic": ""}, config(),
                                           stream_mode="updates", timeout=WAIT))
    assert got == [{"a": {"items": ["a"]}}, {"b": {"items": ["b"]}}, {"c": {"items": ["c"]}},
                   {"d": {"items": ["d"]}}]


def test_send_map_reduce(hypha: dict[str, Any]) -> None:
    same_run(hypha, "lg_map_reduce", {"items": [], "topic": ""}, ordered=False)


@pytest.mark.parametrize("gid", ["lg_cond_map", "lg_cond_plain"])
@pytest.mark.parametrize("text", ["", "long text"])
def test_conditional_edges(hypha: dict[str, Any], gid: str, text: str) -> None:
    same_run(hypha, gid, {"text": text})


@pytest.mark.parametrize("text", ["l", "r"])
def test_command_goto_and_update(hypha: dict[str, Any], text: str) -> None:
    same_run(hypha, "lg_command", {"text": text})


def test_interrupt_and_resume(hypha: dict[str, Any]) -> None:
    gid, inputs = "lg_interrupt", {"items": [], "topic": ""}
    ref, ours = reference(gid), hypha[gid]
    rc, oc = config(), config()
    want, got = ref.invoke(inputs, rc), ours.invoke(inputs, oc, timeout=WAIT)
    assert [i.value for i in got.pop("__interrupt__")] == \
        [i.value for i in want.pop("__interrupt__")]
    assert got == want
    assert ours.get_state(oc).next == ref.get_state(rc).next == ("ask",)
    assert ours.invoke(Command(resume="yes"), oc, timeout=WAIT) == \
        ref.invoke(Command(resume="yes"), rc)
    assert ours.get_state(oc).values == ref.get_state(rc).values
    want_history = history(ref, rc)
    assert want_history[-1][1] == ("__start__",)  # differs: see same_run
    assert history(ours, oc) == want_history[:-1]


def test_new_input_while_interrupted_drops_the_interrupt(hypha: dict[str, Any]) -> None:
    """LangGraph applies new input to a thread stopped at an interrupt and runs on; the
    waiting run is cancelled (its lane goes on) and the new run starts from its
    position."""
    gid, inputs = "lg_interrupt", {"items": [], "topic": ""}
    ref, ours = reference(gid), hypha[gid]
    rc, oc = config(), config()
    ref.invoke(inputs, rc)
    first = ours.invoke(inputs, oc, timeout=WAIT)
    assert "__interrupt__" in first
    again = {"items": ["more"], "topic": ""}
    want, got = ref.invoke(again, rc), ours.invoke(again, oc, timeout=WAIT)
    assert without_ids(got) == without_ids(want)
    assert ours.get_state(oc).values == ref.get_state(rc).values
    assert ours.get_state(oc).next == ref.get_state(rc).next


def test_input_and_output_schemas(hypha: dict[str, Any]) -> None:
    same_run(hypha, "lg_schemas", {"question": "tides"})


def test_a_node_update_langgraph_refuses_fails_the_run_as_langgraph_fails(
        hypha: dict[str, Any]) -> None:
    with pytest.raises(InvalidUpdateError) as want:
        reference("lg_bad_return").invoke({"text": "x"}, config())
    with pytest.raises(InvalidUpdateError) as got:
        hypha["lg_bad_return"].invoke({"text": "x"}, config(), timeout=WAIT)
    assert str(got.value).split("\n")[0] == str(want.value).split("\n")[0]


def test_messages_stream_of_a_chat_model(hypha: dict[str, Any]) -> None:
    """``stream_mode="messages"``: the node's chat model tokens, with LangGraph's
    metadata (the node, the step)."""
    inputs = {"messages": [HumanMessage("hi", id="h-1")]}
    want = list(reference("lg_chat").stream(inputs, config(), stream_mode="messages"))
    got = list(hypha["lg_chat"].stream(inputs, config(), stream_mode="messages",
                                       timeout=WAIT))
    assert [m.content for m, _ in got] == [m.content for m, _ in want]
    assert len(want) > 1  # token by token
    assert [(meta["langgraph_node"], meta["langgraph_step"]) for _, meta in got] == \
        [(meta["langgraph_node"], meta["langgraph_step"]) for _, meta in want]


def test_custom_chunks_arrive_while_the_node_runs(hypha: dict[str, Any],
                                                  tmp_path: Path) -> None:
    """``custom`` (and ``messages``) chunks come over the run's live topic as the node
    makes them, not when its step is recorded."""
    marker = tmp_path / "read"
    chunks = hypha["lg_live"].stream({"text": str(marker)}, config(),
                                     stream_mode=["custom", "values"], timeout=WAIT)
    got = []
    for mode, chunk in chunks:
        got.append((mode, chunk))
        if mode == "custom":
            marker.touch()
    assert ("custom", {"started": True}) in got
    assert got[-1] == ("values", {"text": "read while running"})


def test_a_user_id_in_the_config_makes_the_thread_that_user_s(
        hypha: dict[str, Any]) -> None:
    """``configurable.user_id``: the runs belong to that hypha user, and the thread is the
    session ``(user_id, thread_id)``: two users' threads of one id are two threads."""
    gid, inputs = "lg_parallel", {"items": [], "topic": ""}
    thread = uuid.uuid4().hex
    ours = hypha[gid]

    def as_user(user: str) -> dict[str, Any]:
        return {"configurable": {"thread_id": thread, "user_id": user}}

    ref = reference(gid)
    rc = config()
    ref.invoke(inputs, rc)
    twice = ref.invoke(inputs, rc)
    once = reference(gid).invoke(inputs, config())
    ours.invoke(inputs, as_user("ada"), timeout=WAIT)
    assert ours.invoke(inputs, as_user("ada"), timeout=WAIT) == twice
    assert ours.invoke(inputs, as_user("bob"), timeout=WAIT) == once
    handle = ours.start(inputs, as_user("bob"))
    handle.wait(timeout=WAIT)
    assert hypha[gid].hypha.store.get(handle.id)["user_id"] == "bob"
    assert ours.get_state(as_user("ada")).values == twice


def test_a_user_defined_exception_is_raised_by_its_type(hypha: dict[str, Any]) -> None:
    """An exception class defined beside the graph's nodes is found by its name there."""
    with pytest.raises(graphs.QuotaExceeded, match="no quota left for x"):
        reference("lg_user_error").invoke({"text": "x"}, config())
    with pytest.raises(graphs.QuotaExceeded, match="no quota left for x"):
        hypha["lg_user_error"].invoke({"text": "x"}, config(), timeout=WAIT)


def without_ids(value: Any) -> Any:
    """``value`` with each ``Interrupt`` as its value (interrupt ids differ)."""
    if isinstance(value, Interrupt):
        return ("Interrupt", without_ids(value.value))
    if isinstance(value, dict):
        return {k: without_ids(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(without_ids(v) for v in value)
    return value


@pytest.mark.parametrize("mode", ["updates", "values", ["updates", "values", "custom"]])
def test_interrupt_stream_then_resume(hypha: dict[str, Any], mode: Any) -> None:
    gid, inputs = "lg_interrupt", {"items": [], "topic": ""}
    ref, ours = reference(gid), hypha[gid]
    rc, oc = config(), config()
    want = list(ref.stream(inputs, rc, stream_mode=mode))
    got = list(ours.stream(inputs, oc, stream_mode=mode, timeout=WAIT))
    assert without_ids(got) == without_ids(want)
    assert list(ours.stream(Command(resume=1), oc, stream_mode=mode, timeout=WAIT)) == \
        list(ref.stream(Command(resume=1), rc, stream_mode=mode))


def test_a_second_run_on_the_thread(hypha: dict[str, Any]) -> None:
    gid, inputs = "lg_interrupt", {"items": [], "topic": ""}
    ref, ours = reference(gid), hypha[gid]
    rc, oc = config(), config()
    for graph, cfg, kw in ((ref, rc, {}), (ours, oc, {"timeout": WAIT})):
        graph.invoke(inputs, cfg, **kw)
        graph.invoke(Command(resume="y"), cfg, **kw)
    want = without_ids(ref.invoke({"items": ["again"]}, rc))
    assert without_ids(ours.invoke({"items": ["again"]}, oc, timeout=WAIT)) == want
    # differs: LangGraph's history holds each run's __start__ input checkpoint; hypha's
    # holds none (see same_run).
    assert history(ours, oc) == [h for h in history(ref, rc) if h[1] != ("__start__",)]


def test_interrupt_in_a_parallel_superstep(hypha: dict[str, Any]) -> None:
    gid, inputs = "lg_par_interrupt", {"items": [], "topic": ""}
    ref, ours = reference(gid), hypha[gid]
    rc, oc = config(), config()
    want = list(ref.stream(inputs, rc, stream_mode="updates"))
    got = list(ours.stream(inputs, oc, stream_mode="updates", timeout=WAIT))
    # differs: LangGraph streams the update of the task that finished beside the
    # interrupted one ({'side': ...}) before it stops; hypha keeps a superstep's writes
    # pending until every task of it is done, so that update comes after the resume.
    assert want[0] == got[0] == {"a": {"items": ["a"]}}
    assert "__interrupt__" in want[1] and "__interrupt__" in got[1] and len(got) == 2
    assert want[2] == {"side": {"items": ["side"]}}
    assert ours.get_state(oc).values == ref.get_state(rc).values  # side's write is there
    assert ours.get_state(oc).next == ref.get_state(rc).next == ("ask",)
    want = list(ref.stream(Command(resume=2), rc, stream_mode="updates"))
    got = list(ours.stream(Command(resume=2), oc, stream_mode="updates", timeout=WAIT))
    # differs: LangGraph replays side's update first, marked {'cached': True}; hypha
    # streams the superstep's updates in task order, unmarked.
    assert want == [{"side": {"items": ["side"]}, "__metadata__": {"cached": True}},
                    {"ask": {"items": ["ask:2"]}}, {"after": {"items": ["after"]}}]
    assert got == [{"ask": {"items": ["ask:2"]}}, {"side": {"items": ["side"]}},
                   {"after": {"items": ["after"]}}]
    assert ours.get_state(oc).values == ref.get_state(rc).values


@pytest.mark.parametrize("gid", ["lg_pydantic", "lg_dataclass"])
def test_pydantic_and_dataclass_states(hypha: dict[str, Any], gid: str) -> None:
    same_run(hypha, gid, {"text": ">"})


@pytest.mark.parametrize(("gid", "inputs"), [
    ("lg_pydantic", graphs.PState(text=">")),
    ("lg_dataclass", graphs.DState(text=">")),
])
def test_a_state_instance_as_input(hypha: dict[str, Any], gid: str, inputs: Any) -> None:
    assert hypha[gid].invoke(inputs, config(), timeout=WAIT) == \
        reference(gid).invoke(inputs, config())


def test_a_node_writing_a_set_fails_naming_the_channel(hypha: dict[str, Any]) -> None:
    assert reference("lg_not_json").invoke({"text": "x"}, config())["text"] == "2"
    with pytest.raises(NotJsonState, match=r"channel 'tags' holds a builtins\.set"):
        hypha["lg_not_json"].invoke({"text": "x"}, config(), timeout=WAIT)
    with pytest.raises(NotJsonState, match=r"the input holds a builtins\.set"):
        hypha["lg_linear"].invoke({"text": {1}}, config(), timeout=WAIT)


def test_a_serializer_takes_the_set(hypha: dict[str, Any]) -> None:
    cfg = config()
    got = hypha["lg_serialized"].invoke({"text": "x"}, cfg, timeout=WAIT)
    assert got == reference("lg_not_json").invoke({"text": "x"}, config()) == \
        {"text": "2", "tags": {"x", "t"}}
    assert hypha["lg_serialized"].get_state(cfg).values["tags"] == {"x", "t"}


def test_start_returns_the_run_at_once(hypha: dict[str, Any]) -> None:
    cfg = config()
    run = hypha["lg_linear"].start({"text": "s"}, cfg)
    assert run.wait(timeout=WAIT) == {"text": "sabc"}
    assert hypha["lg_linear"].get_state(cfg).values == {"text": "sabc"}


def test_add_messages(hypha: dict[str, Any]) -> None:
    same_run(hypha, "lg_messages", {"messages": [HumanMessage("hi", id="h-1")]})


def test_compiled_subgraph_as_a_node(hypha: dict[str, Any]) -> None:
    same_run(hypha, "lg_subgraph", {"text": ""})


def test_custom_reducer(hypha: dict[str, Any]) -> None:
    same_run(hypha, "lg_reducer", {"best": 0})


def test_custom_stream_mode(hypha: dict[str, Any]) -> None:
    gid, inputs = "lg_custom", {"text": "x"}
    want = list(reference(gid).stream(inputs, config(), stream_mode="custom"))
    got = list(hypha[gid].stream(inputs, config(), stream_mode="custom", timeout=WAIT))
    assert got == want == [{"progress": 1}, {"progress": 2, "text": "x"}]
    modes = ["custom", "updates"]
    want = list(reference(gid).stream(inputs, config(), stream_mode=modes))
    got = list(hypha[gid].stream(inputs, config(), stream_mode=modes, timeout=WAIT))
    assert got == want


def test_recursion_limit(hypha: dict[str, Any]) -> None:
    ref, ours = reference("lg_loop"), hypha["lg_loop"]
    rc, oc = config(recursion_limit=5), config(recursion_limit=5)
    with pytest.raises(GraphRecursionError) as want:
        ref.invoke({"n": 0}, rc)
    with pytest.raises(GraphRecursionError) as got:
        ours.invoke({"n": 0}, oc, timeout=WAIT)
    assert str(got.value).split(".")[0] == str(want.value).split(".")[0]
    assert history(ours, oc) == history(ref, rc)[:-1]  # differs: see same_run


def test_a_node_error_is_raised_by_invoke(hypha: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="boom: >o") as want:
        reference("lg_fail").invoke({"text": ">"}, config())
    with pytest.raises(ValueError, match="boom: >o") as got:
        hypha["lg_fail"].invoke({"text": ">"}, config(), timeout=WAIT)
    assert type(got.value) is type(want.value)



def test_a_node_error_beside_a_parallel_task(hypha: dict[str, Any]) -> None:
    inputs = {"items": [], "topic": ""}
    with pytest.raises(ValueError, match="boom in parallel"):
        reference("lg_par_fail").invoke(inputs, config())
    with pytest.raises(ValueError, match="boom in parallel"):
        hypha["lg_par_fail"].invoke(inputs, config(), timeout=WAIT)


def test_command_goto_sends(hypha: dict[str, Any]) -> None:
    same_run(hypha, "lg_command_send", {"items": [], "topic": ""}, ordered=False)


def test_node_names_hypha_ids_do_not_take(hypha: dict[str, Any]) -> None:
    same_run(hypha, "lg_odd_names", {"text": ""})


def test_interrupts_of_two_send_tasks(hypha: dict[str, Any]) -> None:
    gid, inputs = "lg_send_interrupt", {"items": [], "topic": ""}
    ref, ours = reference(gid), hypha[gid]
    rc, oc = config(), config()
    assert without_ids(ours.invoke(inputs, oc, timeout=WAIT)) == \
        without_ids(ref.invoke(inputs, rc))
    ids = [i.id for t in ref.get_state(rc).tasks for i in t.interrupts]
    want = ref.invoke(Command(resume=dict.fromkeys(ids, "v")), rc)
    # differs: LangGraph resumes several interrupts with {interrupt_id: value}; hypha
    # resumes every interrupted task of the superstep with the one value given.
    assert ours.invoke(Command(resume="v"), oc, timeout=WAIT) == want
    assert history(ours, oc) == history(ref, rc)[:-1]


def test_langgraph_retry_policy_is_hypha_s_retry(hypha: dict[str, Any]) -> None:
    """The node's LangGraph ``RetryPolicy`` is hypha's: each attempt is a node execution
    of the run (its own events), in whichever worker process takes it."""
    text = uuid.uuid4().hex  # flaky counts its calls per text, in a file
    want = reference("lg_retry").invoke({"text": text}, config())
    assert want == {"text": text + "@3"}
    text = uuid.uuid4().hex
    handle = hypha["lg_retry"].start({"text": text}, config())
    assert handle.wait(timeout=WAIT) == {"text": text + "@3"}
    started = [e.data["attempt"] for e in handle.events()
               if e.kind == "node.execution.started" and e.data["node_id"] == "flaky"]
    assert started == [1, 2, 3]


def test_an_async_node(hypha: dict[str, Any]) -> None:
    """An ``async def`` node (LangGraph runs it with ``ainvoke`` only; the worker runs
    its task in an event loop of its own)."""
    ref, ours = reference("lg_async"), hypha["lg_async"]
    want = asyncio.run(ref.ainvoke({"text": "ab"}, config()))
    assert ours.invoke({"text": "ab"}, config(), timeout=WAIT) == want == {"text": "AB!"}


def test_remove_message(hypha: dict[str, Any]) -> None:
    same_run(hypha, "lg_remove_messages", {"messages": [HumanMessage("hi", id="h-1")]})


def test_interrupt_inside_a_subgraph(hypha: dict[str, Any]) -> None:
    gid, inputs = "lg_sub_interrupt", {"text": ""}
    ref, ours = reference(gid), hypha[gid]
    rc, oc = config(), config()
    assert without_ids(ours.invoke(inputs, oc, timeout=WAIT)) == \
        without_ids(ref.invoke(inputs, rc))
    assert ours.invoke(Command(resume="R"), oc, timeout=WAIT) == \
        ref.invoke(Command(resume="R"), rc) == {"text": "[R]"}
    assert history(ours, oc) == history(ref, rc)[:-1]


def test_a_thread_without_runs(hypha: dict[str, Any]) -> None:
    want, got = reference("lg_linear").get_state(config()), \
        hypha["lg_linear"].get_state(config())
    assert (got.values, got.next, got.tasks) == (want.values, want.next, want.tasks) == \
        ({}, (), ())
    # differs: LangGraph runs a Command(resume=) on a thread with nothing to resume (here
    # its node fails on the empty state); hypha finds no run waiting and says so.
    with pytest.raises(KeyError):
        reference("lg_linear").invoke(Command(resume=1), config())
    with pytest.raises(LookupError, match="no run waiting at an interrupt"):
        hypha["lg_linear"].invoke(Command(resume=1), config(), timeout=WAIT)


def test_invoke_without_a_thread_id(hypha: dict[str, Any]) -> None:
    # differs: a graph compiled with a checkpointer refuses a config without thread_id;
    # hypha runs it on a new thread of its own, as a graph compiled without one does.
    with pytest.raises(ValueError, match="thread_id"):
        reference("lg_linear").invoke({"text": "n"}, {})
    want = graphs.linear().compile().invoke({"text": "n"}, {})
    assert hypha["lg_linear"].invoke({"text": "n"}, {}, timeout=WAIT) == want
