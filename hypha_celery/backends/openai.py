"""``OpenAIBackend``: a conversational agent on OpenAI (or any OpenAI-compatible server).

The Responses API by default; ``api="chat"`` (or a ``model`` written
``openai-chat:NAME``) uses Chat Completions, which vLLM, Ollama and LiteLLM proxies speak:
point ``base_url`` at them (``http://localhost:11434/v1``). Extra start options:
``api`` and ``reasoning_effort``. Everything else is :class:`HostedBackend`'s. Needs
``pip install 'hypha-celery[openai]'``; the SDK is imported at the first session, not
with this module.
"""

from __future__ import annotations

from typing import ClassVar

from hypha_celery.backends.hosted import HostedBackend

__all__ = ["OpenAIBackend"]


class OpenAIBackend(HostedBackend):
    provider: ClassVar[str] = "openai"
    extra_options: ClassVar[frozenset[str]] = frozenset({"api", "reasoning_effort"})
