"""One model call over a real provider SDK, shared by the agents' HTTP backends and the
graph nodes' ``ctx.llm``: neutral request/result types, provider modules (``openai``,
``anthropic``; SDKs imported lazily with an install hint), error normalization, keys,
shared rate limits and prices."""

from hypha_celery.backends.llm.types import (
    LLMRequest,
    LLMResult,
    Message,
    ToolCall,
    ToolDecl,
    Usage,
)

__all__ = ["LLMRequest", "LLMResult", "Message", "ToolCall", "ToolDecl", "Usage"]
