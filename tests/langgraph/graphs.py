"""The LangGraph programs of the differential tests, as uncompiled ``StateGraph`` s: the
test compiles each with LangGraph's ``InMemorySaver`` and distributes it on hypha; the
worker (:mod:`tests.langgraph.worker_app`) distributes the same builders."""

from __future__ import annotations

import asyncio
import operator
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from langchain_core.messages import AIMessage, AnyMessage, RemoveMessage
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, RetryPolicy, Send, interrupt
from pydantic import BaseModel
from typing_extensions import TypedDict

Builder = Callable[[], Any]


class Text(TypedDict):
    text: str


class Items(TypedDict):
    items: Annotated[list[str], operator.add]
    topic: str


def _append(s: str) -> Callable[[Text], dict[str, str]]:
    def node(state: Text) -> dict[str, str]:
        return {"text": state["text"] + s}
    return node


def linear() -> Any:
    b = StateGraph(Text)
    for n in ("a", "b", "c"):
        b.add_node(n, _append(n))
    b.add_edge(START, "a")
    b.add_edge("a", "b")
    b.add_edge("b", "c")
    b.add_edge("c", END)
    return b


def _items(tag: str) -> Callable[[Items], dict[str, list[str]]]:
    def node(state: Items) -> dict[str, list[str]]:
        return {"items": [tag]}
    return node


def parallel() -> Any:
    """``a``, then ``b`` and ``c`` in one superstep, then ``d`` after both."""
    b = StateGraph(Items)
    for n in ("a", "b", "c", "d"):
        b.add_node(n, _items(n))
    b.add_edge(START, "a")
    b.add_edge("a", "b")
    b.add_edge("a", "c")
    b.add_edge(["b", "c"], "d")
    b.add_edge("d", END)
    return b


def _map(state: Items) -> dict[str, list[str]]:
    return {"items": ["m:" + state["topic"]]}


def map_reduce() -> Any:
    """``Send`` one ``m`` per topic, then ``total`` sees every result."""
    b = StateGraph(Items)
    b.add_node("plan", _items("plan"))
    b.add_node("m", _map)
    b.add_node("total", lambda s: {"topic": ",".join(sorted(s["items"]))})
    b.add_edge(START, "plan")
    b.add_conditional_edges(
        "plan", lambda s: [Send("m", {"topic": t, "items": []}) for t in ("x", "y", "z")])
    b.add_edge("m", "total")
    b.add_edge("total", END)
    return b


def _route(state: Text) -> str:
    return "big" if len(state["text"]) > 3 else "small"


def conditional(path_map: bool) -> Builder:
    def build() -> Any:
        b = StateGraph(Text)
        b.add_node("start", _append("s"))
        b.add_node("big", _append("B"))
        b.add_node("small", _append("S"))
        if path_map:
            b.add_conditional_edges("start", lambda s: len(s["text"]) > 3,
                                    {True: "big", False: "small"})
        else:
            b.add_conditional_edges("start", _route)
        b.add_edge("big", END)
        b.add_edge("small", END)
        b.add_edge(START, "start")
        return b
    return build


def _command(state: Text) -> Command[Literal["left", "right"]]:
    return Command(goto="right" if "r" in state["text"] else "left", update={"text": "cmd"})


def command() -> Any:
    b = StateGraph(Text)
    b.add_node("pick", _command)
    b.add_node("left", _append("L"))
    b.add_node("right", _append("R"))
    b.add_edge(START, "pick")
    return b


def _ask(state: Items) -> dict[str, list[str]]:
    answer = interrupt({"question": "ok?", "items": state["items"]})
    return {"items": ["ask:" + str(answer)]}


def interrupting() -> Any:
    b = StateGraph(Items)
    b.add_node("a", _items("a"))
    b.add_node("ask", _ask)
    b.add_node("after", _items("after"))
    b.add_edge(START, "a")
    b.add_edge("a", "ask")
    b.add_edge("ask", "after")
    b.add_edge("after", END)
    return b


class PState(BaseModel):
    text: str = ""
    count: int = 0


def pydantic_state() -> Any:
    b = StateGraph(PState)
    b.add_node("one", lambda s: {"text": s.text + "1", "count": s.count + 1})
    b.add_node("two", lambda s: {"text": s.text + "2", "count": s.count + 1})
    b.add_edge(START, "one")
    b.add_edge("one", "two")
    return b


@dataclass
class DState:
    text: str = ""
    seen: Annotated[list[str], operator.add] = field(default_factory=list)


def dataclass_state() -> Any:
    b = StateGraph(DState)
    b.add_node("one", lambda s: {"text": s.text + "1", "seen": ["one"]})
    b.add_node("two", lambda s: {"text": s.text + "2", "seen": ["two"]})
    b.add_edge(START, "one")
    b.add_edge("one", "two")
    return b


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _reply(state: Chat) -> dict[str, list[AnyMessage]]:
    return {"messages": [AIMessage(f"heard {len(state['messages'])}", id="ai-1")]}


def messages() -> Any:
    b = StateGraph(Chat)
    b.add_node("reply", _reply)
    b.add_edge(START, "reply")
    return b


def _inner() -> Any:
    b = StateGraph(Text)
    b.add_node("i1", _append("<"))
    b.add_node("i2", _append(">"))
    b.add_edge(START, "i1")
    b.add_edge("i1", "i2")
    return b.compile()


def subgraph() -> Any:
    b = StateGraph(Text)
    b.add_node("before", _append("["))
    b.add_node("inner", _inner())
    b.add_node("after", _append("]"))
    b.add_edge(START, "before")
    b.add_edge("before", "inner")
    b.add_edge("inner", "after")
    return b


class Counter(TypedDict):
    n: int


def looping() -> Any:
    """Never stops by itself: ``recursion_limit`` ends it."""
    b = StateGraph(Counter)
    b.add_node("tick", lambda s: {"n": s["n"] + 1})
    b.add_edge(START, "tick")
    b.add_edge("tick", "tick")
    return b


def _boom(state: Text) -> dict[str, str]:
    raise ValueError("boom: " + state["text"])


def failing() -> Any:
    b = StateGraph(Text)
    b.add_node("ok", _append("o"))
    b.add_node("boom", _boom)
    b.add_edge(START, "ok")
    b.add_edge("ok", "boom")
    return b


def _keep_max(old: int, new: int) -> int:
    return max(old, new)


class Maxed(TypedDict):
    best: Annotated[int, _keep_max]


def custom_reducer() -> Any:
    b = StateGraph(Maxed)
    b.add_node("low", lambda s: {"best": 3})
    b.add_node("high", lambda s: {"best": 9})
    b.add_node("mid", lambda s: {"best": 5})
    b.add_edge(START, "low")
    b.add_edge("low", "high")
    b.add_edge("high", "mid")
    return b


def _writer(state: Text) -> dict[str, str]:
    write = get_stream_writer()
    write({"progress": 1})
    write({"progress": 2, "text": state["text"]})
    return {"text": state["text"] + "!"}


def custom_stream() -> Any:
    b = StateGraph(Text)
    b.add_node("w", _writer)
    b.add_node("v", _append("v"))
    b.add_edge(START, "w")
    b.add_edge("w", "v")
    return b


def parallel_interrupt() -> Any:
    """``ask`` (interrupts) and ``side`` in one superstep, then ``after``."""
    b = StateGraph(Items)
    b.add_node("a", _items("a"))
    b.add_node("ask", _ask)
    b.add_node("side", _items("side"))
    b.add_node("after", _items("after"))
    b.add_edge(START, "a")
    b.add_edge("a", "ask")
    b.add_edge("a", "side")
    b.add_edge(["ask", "side"], "after")
    return b


class Tagged(TypedDict):
    text: str
    tags: Any


def _tags(state: Tagged) -> dict[str, Any]:
    return {"tags": {state["text"], "t"}}


def not_json() -> Any:
    """A node writes a set to the channel ``tags``."""
    b = StateGraph(Tagged)
    b.add_node("tag", _tags)
    b.add_node("count", lambda s: {"text": str(len(s["tags"]))})
    b.add_edge(START, "tag")
    b.add_edge("tag", "count")
    return b


class SetSerializer:
    """The codec of sets as sorted lists (``distribute(serializer=)``)."""

    def dump(self, value: Any) -> Any:
        if isinstance(value, set):
            return sorted(value)
        raise TypeError(type(value).__name__)

    def load(self, data: Any) -> Any:
        return set(data)


def _boom_items(state: Items) -> dict[str, list[str]]:
    raise ValueError("boom in parallel")


def parallel_failure() -> Any:
    """``b`` raises while ``c`` runs beside it."""
    b = StateGraph(Items)
    b.add_node("a", _items("a"))
    b.add_node("b", _boom_items)
    b.add_node("c", _items("c"))
    b.add_edge(START, "a")
    b.add_edge("a", "b")
    b.add_edge("a", "c")
    return b


def _ask_topic(state: Items) -> dict[str, list[str]]:
    answer = interrupt("topic " + state["topic"])
    return {"items": [f"{state['topic']}={answer}"]}


def send_interrupt() -> Any:
    """Two ``Send`` tasks that both interrupt in one superstep."""
    b = StateGraph(Items)
    b.add_node("plan", _items("plan"))
    b.add_node("ask", _ask_topic)
    b.add_edge(START, "plan")
    b.add_conditional_edges(
        "plan", lambda s: [Send("ask", {"topic": t, "items": []}) for t in ("x", "y")])
    return b


def _fan_command(state: Items) -> Command[Any]:
    return Command(goto=[Send("m", {"topic": t, "items": []}) for t in ("p", "q")],
                   update={"items": ["fan"]})


def command_send() -> Any:
    b = StateGraph(Items)
    b.add_node("fan", _fan_command)
    b.add_node("m", _map)
    b.add_edge(START, "fan")
    return b


def odd_names() -> Any:
    """Node names hypha's node ids do not take as they are."""
    b = StateGraph(Text)
    b.add_node("step one", _append("1"))
    b.add_node("step.one", _append("2"))
    b.add_node("3rd", _append("3"))
    b.add_edge(START, "step one")
    b.add_edge("step one", "step.one")
    b.add_edge("step.one", "3rd")
    return b


def flaky_calls(text: str) -> int:
    """Calls of ``flaky`` for ``text`` so far, counted in a file: hypha retries an attempt
    in whichever worker process takes it."""
    path = Path(tempfile.gettempdir()) / f"hypha-lg-flaky-{text}"
    return int(path.read_text()) if path.exists() else 0


def _flaky(state: Text) -> dict[str, str]:
    calls = flaky_calls(state["text"]) + 1
    (Path(tempfile.gettempdir()) / f"hypha-lg-flaky-{state['text']}").write_text(str(calls))
    if calls < 3:
        raise ConnectionError(f"attempt {calls}")
    return {"text": state["text"] + f"@{calls}"}


def retrying() -> Any:
    """``flaky`` fails twice, then LangGraph's ``RetryPolicy`` has it succeed."""
    b = StateGraph(Text)
    b.add_node("flaky", _flaky, retry_policy=RetryPolicy(max_attempts=3, initial_interval=0.01,
                                                         jitter=False))
    b.add_edge(START, "flaky")
    return b


def _inner_ask() -> Any:
    b = StateGraph(Text)
    b.add_node("q", lambda s: {"text": s["text"] + str(interrupt("inner?"))})
    b.add_edge(START, "q")
    return b.compile()


def subgraph_interrupt() -> Any:
    b = StateGraph(Text)
    b.add_node("before", _append("["))
    b.add_node("inner", _inner_ask())
    b.add_node("after", _append("]"))
    b.add_edge(START, "before")
    b.add_edge("before", "inner")
    b.add_edge("inner", "after")
    return b


def _forget(state: Chat) -> dict[str, list[AnyMessage]]:
    return {"messages": [RemoveMessage(id="h-1"), AIMessage("only me", id="ai-2")]}


def remove_messages() -> Any:
    b = StateGraph(Chat)
    b.add_node("reply", _reply)
    b.add_node("forget", _forget)
    b.add_edge(START, "reply")
    b.add_edge("reply", "forget")
    return b


async def _slow_upper(state: Text) -> dict[str, str]:
    await asyncio.sleep(0.01)
    return {"text": state["text"].upper()}


def async_node() -> Any:
    """An ``async def`` node, then a plain one."""
    b = StateGraph(Text)
    b.add_node("upper", _slow_upper)
    b.add_node("mark", _append("!"))
    b.add_edge(START, "upper")
    b.add_edge("upper", "mark")
    return b


class Question(TypedDict):
    question: str


class Answer(TypedDict):
    answer: str


class Work(TypedDict):
    question: str
    notes: str
    answer: str


def _note(state: Question) -> dict[str, str]:
    return {"notes": f"about {state['question']}"}


def _answer(state: Work) -> dict[str, str]:
    return {"answer": state["notes"].upper()}


def schemas() -> Any:
    """Input and output schemas narrower than the state."""
    b = StateGraph(Work, input_schema=Question, output_schema=Answer)
    b.add_node("note", _note)
    b.add_node("answer", _answer)
    b.add_edge(START, "note")
    b.add_edge("note", "answer")
    return b


def _not_a_dict(state: Text) -> Any:
    return ["not", "an", "update"]


def bad_return() -> Any:
    """A node returns what LangGraph refuses as an update."""
    b = StateGraph(Text)
    b.add_node("bad", _not_a_dict)
    b.add_edge(START, "bad")
    return b


def _chat(state: Chat) -> dict[str, list[AnyMessage]]:
    """A LangChain chat model streamed inside a node (a fake model: the tokens are
    scripted, the callbacks are LangChain's own)."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    model = GenericFakeChatModel(messages=iter([AIMessage("tides turn twice", id="ai-1")]))
    return {"messages": [model.invoke(state["messages"])]}


def chat_model() -> Any:
    b = StateGraph(Chat)
    b.add_node("chat", _chat)
    b.add_edge(START, "chat")
    return b


def _waits_for_its_reader(state: Text) -> dict[str, str]:
    """Writes a custom chunk, then waits (up to 10 s) for the file named by ``text`` that
    the test makes once it has read that chunk: only a chunk delivered while the node runs
    lets it end at once."""
    get_stream_writer()({"started": True})
    marker = Path(state["text"])
    for _ in range(500):
        if marker.exists():
            return {"text": "read while running"}
        time.sleep(0.02)
    return {"text": "not read while running"}


def live_custom() -> Any:
    b = StateGraph(Text)
    b.add_node("wait", _waits_for_its_reader)
    b.add_edge(START, "wait")
    return b


class QuotaExceeded(Exception):
    """A user-defined error a node raises (defined beside the node)."""


def _over_quota(state: Text) -> dict[str, str]:
    raise QuotaExceeded(f"no quota left for {state['text']}")


def user_error() -> Any:
    b = StateGraph(Text)
    b.add_node("spend", _over_quota)
    b.add_edge(START, "spend")
    return b


#: graph id -> builder.
BUILDERS: dict[str, Builder] = {
    "lg_linear": linear,
    "lg_parallel": parallel,
    "lg_map_reduce": map_reduce,
    "lg_cond_map": conditional(True),
    "lg_cond_plain": conditional(False),
    "lg_command": command,
    "lg_interrupt": interrupting,
    "lg_pydantic": pydantic_state,
    "lg_dataclass": dataclass_state,
    "lg_messages": messages,
    "lg_subgraph": subgraph,
    "lg_loop": looping,
    "lg_fail": failing,
    "lg_reducer": custom_reducer,
    "lg_custom": custom_stream,
    "lg_par_interrupt": parallel_interrupt,
    "lg_not_json": not_json,
    "lg_par_fail": parallel_failure,
    "lg_send_interrupt": send_interrupt,
    "lg_command_send": command_send,
    "lg_odd_names": odd_names,
    "lg_retry": retrying,
    "lg_sub_interrupt": subgraph_interrupt,
    "lg_remove_messages": remove_messages,
    "lg_async": async_node,
    "lg_schemas": schemas,
    "lg_bad_return": bad_return,
    "lg_chat": chat_model,
    "lg_live": live_custom,
    "lg_user_error": user_error,
}


def distribute_all(hypha: Any) -> dict[str, Any]:
    """Every graph of :data:`BUILDERS` distributed on ``hypha`` (id -> DistributedGraph)."""
    from hypha_celery.langgraph import distribute

    out = {gid: distribute(build(), hypha, id=gid) for gid, build in BUILDERS.items()}
    out["lg_serialized"] = distribute(not_json(), hypha, id="lg_serialized",
                                      serializer=SetSerializer())
    return out
