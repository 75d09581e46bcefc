"""The local model server, now :mod:`hypha_celery.testing.llm_server` (the pytest plugin's
``hypha_openai_server`` / ``hypha_anthropic_server``); re-exported here for the tests and
``python -m tests.fakes.llm_server`` (bench/).

:class:`MeteredServer` is that server reporting input tokens the way OpenAI counts them:
when a request gets the default reply (nothing scripted for it), its usage's input tokens
are the request's prompt counted with ``o200k_base`` and the cookbook's chat framing
(:func:`prompt_tokens`); scripted replies keep the usage they were given. The count is
written here from OpenAI's documentation, apart from ``hypha_celery.context``, so the
tests can hold the builder's tokenizers against it.
"""

from __future__ import annotations

import dataclasses
import io
import json
import threading
import warnings
from typing import Any, Self

from hypha_celery.testing.llm_server import (
    STAMP,
    AnthropicServer,
    FakeLLM,
    OpenAIServer,
    Reply,
    Route,
    Seen,
    _Server,
    main,
)
from hypha_celery.testing.llm_server import _Handler as _BaseHandler

__all__ = ["STAMP", "AnthropicServer", "FakeLLM", "MeteredServer", "OpenAIServer", "Reply",
           "Route", "Seen", "main", "prompt_tokens"]

_ROUTES: dict[str, Route] = {"/v1/responses": "responses", "/v1/chat/completions": "chat",
                             "/v1/messages": "messages"}
_request = threading.local()  # the prompt tokens of the request this handler thread serves


def _encode(text: str) -> int:
    global _O200K
    if _O200K is None:
        with warnings.catch_warnings():  # bpe-openai reads its data with a deprecated API
            warnings.simplefilter("ignore", DeprecationWarning)
            import bpe_openai  # type: ignore[import-untyped]

            _O200K = bpe_openai.get_encoding("o200k_base")
    return len(_O200K.encode_ordinary(text))


_O200K: Any = None


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # content parts: their text
        return "".join(p.get("text", "") for p in value if isinstance(p, dict))
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _framed(messages: list[dict[str, Any]]) -> int:
    """OpenAI cookbook, ``num_tokens_from_messages`` for gpt-4o: 3 tokens per message,
    every value of it encoded (``name``: one more), 3 for the reply's priming."""
    total = 3
    for message in messages:
        total += 3
        for key, value in message.items():
            if value is None:
                continue
            total += _encode(_text(value)) + (key == "name")
    return total


def prompt_tokens(route: Route, body: dict[str, Any]) -> int:
    """The request's prompt tokens: Chat ``messages``; Responses ``instructions`` (a
    system message) and ``input`` (text: one user message); Messages ``system`` and
    ``messages``."""
    messages: list[dict[str, Any]] = []
    if route == "chat":
        messages = list(body.get("messages") or [])
    elif route == "responses":
        if body.get("instructions"):
            messages.append({"role": "system", "content": body["instructions"]})
        given = body.get("input")
        messages += [{"role": "user", "content": given}] if isinstance(given, str) \
            else [m for m in given or [] if isinstance(m, dict)]
    else:
        if body.get("system"):
            messages.append({"role": "system", "content": _text(body["system"])})
        messages += list(body.get("messages") or [])
    return _framed(messages)


class _MeteredHandler(_BaseHandler):
    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        self.rfile = io.BytesIO(raw)  # the base handler reads the body again
        route = _ROUTES.get(self.path.split("?", 1)[0])
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = None
        _request.prompt = prompt_tokens(route, body) if route and isinstance(body, dict) \
            else None
        try:
            super().do_POST()
        finally:
            _request.prompt = None


@dataclasses.dataclass
class MeteredServer(OpenAIServer):
    """:class:`OpenAIServer` whose default reply reports the request's prompt tokens."""

    def start(self) -> Self:
        server = _Server(("127.0.0.1", self.port), _MeteredHandler)
        server.fake = self
        self._server = server
        self.port = server.server_address[1]
        threading.Thread(target=server.serve_forever, args=(0.05,), name="fake-llm-metered",
                         daemon=True).start()
        return self

    def _take(self, route: Route) -> Reply:
        reply = super()._take(route)
        prompt = getattr(_request, "prompt", None)
        if reply is self.default and prompt is not None:
            _, out, read, write = reply.usage
            return dataclasses.replace(reply, usage=(prompt, out, read, write))
        return reply


if __name__ == "__main__":
    main()
