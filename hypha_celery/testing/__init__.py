"""Testing your own graphs and agents: a pytest plugin (``hypha_celery.testing.plugin``,
registered as the ``hypha`` pytest11 entry point) and the helpers behind its fixtures.

Fixtures (docs/testing.md): ``hypha_store_url``, ``hypha_factory``, ``hypha_embedded``,
``hypha_mock_backend``, ``hypha_broker_url``, ``hypha_worker_app``, ``hypha_worker``,
``hypha_openai_server`` and ``hypha_anthropic_server`` (local model servers,
:mod:`hypha_celery.testing.llm_server`, scripted with :class:`Reply`); :func:`wait_until` to
wait on a condition.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hypha_celery.testing.waiting import wait_until
from hypha_celery.testing.worker import (
    WorkerProcess,
    embedded_settings,
    fresh_store_url,
    start_worker,
)

__all__ = ["AnthropicServer", "FakeLLM", "OpenAIServer", "Reply", "WorkerProcess",
           "embedded_settings", "fresh_store_url", "start_worker", "wait_until"]

if TYPE_CHECKING:
    from hypha_celery.testing.llm_server import AnthropicServer, FakeLLM, OpenAIServer, Reply

_SERVER_NAMES = frozenset({"AnthropicServer", "FakeLLM", "OpenAIServer", "Reply"})


def __getattr__(name: str) -> Any:
    """The model server's names, imported when first used: ``python -m
    hypha_celery.testing.llm_server`` must find its module not yet imported."""
    if name in _SERVER_NAMES:
        from hypha_celery.testing import llm_server

        return getattr(llm_server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
