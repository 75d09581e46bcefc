"""The local model server, now :mod:`hypha_celery.testing.llm_server` (the pytest plugin's
``hypha_openai_server`` / ``hypha_anthropic_server``); re-exported here for the tests and
``python -m tests.fakes.llm_server`` (bench/)."""

from __future__ import annotations

from hypha_celery.testing.llm_server import (
    STAMP,
    AnthropicServer,
    FakeLLM,
    OpenAIServer,
    Reply,
    Route,
    Seen,
    main,
)

__all__ = ["STAMP", "AnthropicServer", "FakeLLM", "OpenAIServer", "Reply", "Route", "Seen",
           "main"]

if __name__ == "__main__":
    main()
