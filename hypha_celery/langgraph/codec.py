"""LangGraph values as JSON, and back: what a distributed graph's checkpoints, pending
writes and stream chunks hold in our store and on the wire.

Plain JSON (``None``, booleans, numbers, strings, lists, string-keyed dicts) is itself.
LangGraph's own objects are tagged objects under the key ``"__lg__"``:

* ``Send(node, arg)`` — ``{"__lg__": "send", "node", "arg"}``;
* ``Interrupt(value, id)`` — ``{"__lg__": "interrupt", "value", "id"}``;
* a tuple — ``{"__lg__": "tuple", "items"}`` (LangGraph keeps some values as tuples);
* the set of a LangGraph barrier channel (``add_edge([a, b], c)``) —
  ``{"__lg__": "set", "items"}`` (a set in the graph's own state is still refused);
* a LangChain message or other serializable LangChain object (``add_messages``
  channels) — ``{"__lg__": "lc", "data"}``, LangChain's own JSON (``dumpd`` / ``load``,
  never pickle);
* a dict with a key other than a string, or with the key ``"__lg__"`` itself —
  ``{"__lg__": "dict", "items": [[key, value], ...]}``.

Anything else (a set, a datetime, an arbitrary object) is refused with
:class:`~hypha_celery.errors.NotJsonState`, naming the channel and the value's type,
unless the graph was given a ``serializer`` (:class:`Serializer`: ``dump(value) -> JSON``
and ``load(JSON) -> value``) that takes it: its JSON is kept as
``{"__lg__": "custom", "data"}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from hypha_celery.errors import NotJsonState

TAG = "__lg__"


class Serializer(Protocol):
    """A graph's codec for values that are not JSON (``distribute(serializer=)``):
    ``dump`` returns JSON (or raises ``TypeError`` for a value it does not take);
    ``load`` undoes it."""

    def dump(self, value: Any) -> Any: ...

    def load(self, data: Any) -> Any: ...


class Codec:
    """Encodes and decodes a graph's values (see the module docstring)."""

    def __init__(self, serializer: Serializer | None = None) -> None:
        self.serializer = serializer

    # -- encode ------------------------------------------------------------------------
    def encode(self, value: Any, where: str, *, sets: bool = False) -> Any:
        """``value`` as JSON; ``where`` names it in an error (a channel, a write).
        ``sets``: ``value`` may be a set (the node names LangGraph's own barrier channels
        of ``add_edge([a, b], c)`` keep), kept as ``{"__lg__": "set", "items"}``."""
        if sets and isinstance(value, set | frozenset):
            return {TAG: "set", "items": [self.encode(v, where) for v in sorted(value)]}
        if value is None or isinstance(value, bool | int | float | str):
            return value
        if isinstance(value, list):
            return [self.encode(v, where) for v in value]
        if isinstance(value, tuple):
            return {TAG: "tuple", "items": [self.encode(v, where) for v in value]}
        if isinstance(value, Mapping):
            return self._mapping(value, where)
        return self._object(value, where)

    def _mapping(self, value: Mapping[Any, Any], where: str) -> Any:
        if all(isinstance(k, str) for k in value) and TAG not in value:
            return {k: self.encode(v, where) for k, v in value.items()}
        return {TAG: "dict", "items": [[self.encode(k, where), self.encode(v, where)]
                                       for k, v in value.items()]}

    def _object(self, value: Any, where: str) -> Any:
        from langgraph.types import Interrupt, Send

        if isinstance(value, Send):
            return {TAG: "send", "node": value.node, "arg": self.encode(value.arg, where)}
        if isinstance(value, Interrupt):
            return {TAG: "interrupt", "value": self.encode(value.value, where),
                    "id": value.id}
        lc = _langchain_json(value)
        if lc is not None:
            return {TAG: "lc", "data": lc}
        if self.serializer is not None:
            try:
                return {TAG: "custom", "data": self.serializer.dump(value)}
            except TypeError:
                pass
        raise NotJsonState(
            f"{where} holds a {type(value).__module__}.{type(value).__qualname__}, which is "
            "not JSON: LangGraph keeps any object in memory, a distributed graph keeps "
            "JSON (give distribute(serializer=) a codec for it)")

    # -- decode ------------------------------------------------------------------------
    def decode(self, data: Any) -> Any:
        if isinstance(data, list):
            return [self.decode(v) for v in data]
        if not isinstance(data, dict):
            return data
        tag = data.get(TAG)
        if tag is None:
            return {k: self.decode(v) for k, v in data.items()}
        return self._tagged(tag, data)

    def _tagged(self, tag: str, data: dict[str, Any]) -> Any:
        from langgraph.types import Interrupt, Send

        if tag == "send":
            return Send(data["node"], self.decode(data["arg"]))
        if tag == "interrupt":
            return Interrupt(value=self.decode(data["value"]), id=data["id"])
        if tag == "set":
            return {_hashable(self.decode(v)) for v in data["items"]}
        if tag == "tuple":
            return tuple(self.decode(v) for v in data["items"])
        if tag == "dict":
            return {_hashable(self.decode(k)): self.decode(v) for k, v in data["items"]}
        if tag == "lc":
            return _langchain_load(data["data"])
        if tag == "custom" and self.serializer is not None:
            return self.serializer.load(data["data"])
        raise NotJsonState(f"a stored value is tagged {tag!r}, which this graph cannot read "
                           "(a custom value needs the serializer it was written with)")


def _hashable(key: Any) -> Any:
    return tuple(key) if isinstance(key, list) else key


def _langchain_load(data: Any) -> Any:
    """LangChain's ``load`` of its own JSON, without the beta warning it gives on each
    call (a warning per decoded message; an error under ``-W error``); the allowlist
    named (``core``: langchain_core's classes, messages and documents among them, the
    default LangChain warns will change)."""
    import warnings

    from langchain_core.load import load

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"The function `load` is in beta")
        return load(data, allowed_objects="core")


def _langchain_json(value: Any) -> Any:
    """LangChain's JSON of a serializable LangChain object (a message), else None."""
    try:
        from langchain_core.load import dumpd
        from langchain_core.load.serializable import Serializable
    except ImportError:
        return None
    if not isinstance(value, Serializable) or not value.is_lc_serializable():
        return None
    return dumpd(value)


__all__ = ["TAG", "Codec", "Serializer"]
