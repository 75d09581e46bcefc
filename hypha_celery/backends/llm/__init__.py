"""One model call over a real provider SDK, shared by the agents' HTTP backends and the
graph nodes' ``ctx.llm``: neutral request/result types, provider modules (``openai``,
``anthropic``; SDKs imported lazily with an install hint), error normalization, keys,
shared rate limits and prices."""

from hypha_celery.backends.llm.keys import (
    register_key_source,
    resolve_key,
    unregister_key_source,
)
from hypha_celery.backends.llm.ref import ModelRef, Provider, provider
from hypha_celery.backends.llm.stream import LLMStream
from hypha_celery.backends.llm.types import (
    LLMRequest,
    LLMResult,
    Message,
    ToolCall,
    ToolDecl,
    Usage,
    tool_decls,
)

__all__ = ["LLMRequest", "LLMResult", "LLMStream", "Message", "ModelRef", "Provider",
           "ToolCall", "ToolDecl", "Usage", "provider", "register_key_source", "resolve_key",
           "tool_decls", "unregister_key_source"]
