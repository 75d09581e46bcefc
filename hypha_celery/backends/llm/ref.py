"""Model references (``"openai:gpt-4.1-mini"``) and the provider modules behind them.

A reference is ``provider:model``. Providers:

* ``openai``: the OpenAI Responses API (``POST /v1/responses``);
* ``openai-chat``: OpenAI Chat Completions (``POST /v1/chat/completions``), the API most
  OpenAI-compatible servers speak (vLLM, Ollama, a LiteLLM proxy: set ``base_url``);
* ``anthropic``: the Anthropic Messages API.

Everything after the first ``:`` is the provider's model name, verbatim (so
``openai-chat:llama3:8b`` names Ollama's ``llama3:8b``). A reference that does not parse
raises :class:`~hypha_celery.errors.InvalidModelRef` where it is written.

:func:`provider` returns the module that speaks a provider's API (it imports the SDK):
``open_stream(request, *, key, base_url, timeout) -> LLMStream``. A missing SDK raises
:class:`~hypha_celery.errors.ExtraNotInstalled` naming the extra to install.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from hypha_celery.backends.llm.types import LLMRequest, Message
from hypha_celery.errors import ExtraNotInstalled, InvalidModelRef

if TYPE_CHECKING:
    from hypha_celery.backends.llm.stream import LLMStream

__all__ = ["OPTIONS", "PROVIDERS", "ModelRef", "Provider", "provider"]


class Provider(Protocol):
    """What a provider module offers (``hypha_celery.backends.llm.openai`` / ``.anthropic``)."""

    #: The vendor: keys, errors and rate limits are per vendor (``openai``, ``anthropic``).
    VENDOR: str
    #: Request options the module understands (anything else is refused before a call).
    OPTIONS: frozenset[str]

    def open_stream(self, request: LLMRequest, *, key: str, base_url: str | None,
                    timeout: float) -> LLMStream: ...


@dataclass(frozen=True, slots=True)
class _Spec:
    vendor: str  # also the name of the module and of the pip extra
    options: dict[str, Any] = field(default_factory=dict)  # forced request options


#: provider name -> (vendor module, request options it implies)
PROVIDERS: dict[str, _Spec] = {
    "openai": _Spec("openai"),
    "openai-chat": _Spec("openai", {"api": "chat"}),
    "anthropic": _Spec("anthropic"),
}


#: Request options each vendor's module understands (the modules refuse any other).
OPTIONS: dict[str, frozenset[str]] = {
    "openai": frozenset({"api", "max_output_tokens", "temperature", "top_p",
                         "reasoning_effort"}),
    "anthropic": frozenset({"max_output_tokens", "temperature", "top_p", "thinking_budget"}),
}


class ModelRef(NamedTuple):
    """``provider:model``; unpacks as ``(provider, model)``."""

    provider: str
    model: str

    @classmethod
    def parse(cls, ref: str | ModelRef) -> ModelRef:
        if isinstance(ref, ModelRef):
            return cls.check(ref.provider, ref.model)
        if not isinstance(ref, str):
            raise InvalidModelRef(f"a model reference is a 'provider:model' string, "
                                  f"not {type(ref).__name__}")
        name, sep, model = ref.partition(":")
        if not sep:
            raise InvalidModelRef(f"model reference {ref!r} has no provider: write "
                                  f"'provider:model' with provider one of {_known()}")
        return cls.check(name, model)

    @classmethod
    def check(cls, provider: str, model: str) -> ModelRef:
        if provider not in PROVIDERS:
            raise InvalidModelRef(f"unknown model provider {provider!r}: one of {_known()}")
        if not isinstance(model, str) or not model.strip() or model != model.strip():
            raise InvalidModelRef(f"model reference '{provider}:{model}' has no model name "
                                  "(or one with surrounding spaces)")
        return cls(provider, model)

    @property
    def vendor(self) -> str:
        """Whose keys, errors and rate limits apply: ``openai`` or ``anthropic``."""
        return PROVIDERS[self.provider].vendor

    @property
    def options(self) -> dict[str, Any]:
        """Request options the provider name implies (``openai-chat``: ``api="chat"``)."""
        return dict(PROVIDERS[self.provider].options)

    def unknown_options(self, options: dict[str, Any]) -> list[str]:
        """The names in ``options`` this provider does not understand, sorted (checkable
        where a call is defined: no SDK is imported)."""
        return sorted(set(options) - OPTIONS[self.vendor])

    def request(self, messages: tuple[Message, ...], tools: tuple[Any, ...] = (),
                **options: Any) -> LLMRequest:
        """An :class:`LLMRequest` for this model (the implied options first)."""
        return LLMRequest(self.model, messages, tools, {**self.options, **options})

    def __str__(self) -> str:
        return f"{self.provider}:{self.model}"


def provider(name: str) -> Provider:
    """The module speaking ``name``'s API (``openai``, ``openai-chat`` -> the OpenAI
    module, ``anthropic``). Imports the SDK; raises ``ExtraNotInstalled`` without it."""
    spec = PROVIDERS.get(name)
    if spec is None:
        raise InvalidModelRef(f"unknown model provider {name!r}: one of {_known()}")
    try:
        module: Any = importlib.import_module(f"hypha_celery.backends.llm.{spec.vendor}")
    except ImportError as exc:
        if exc.name != spec.vendor:
            raise
        raise ExtraNotInstalled(
            f"the {spec.vendor!r} provider needs the {spec.vendor} SDK: "
            f"pip install 'hypha-celery[{spec.vendor}]'") from None
    return module  # type: ignore[no-any-return]


def _known() -> str:
    return ", ".join(sorted(PROVIDERS))
