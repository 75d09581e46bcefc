"""``AnthropicBackend``: a conversational agent on Anthropic's Messages API.

Extra start option: ``thinking_budget`` (tokens; enables extended thinking, reported as a
character count only, never kept). Everything else is :class:`HostedBackend`'s. Needs
``pip install 'hypha-celery[anthropic]'``; the SDK is imported at the first session, not
with this module.
"""

from __future__ import annotations

from typing import ClassVar

from hypha_celery.backends.hosted import HostedBackend

__all__ = ["AnthropicBackend"]


class AnthropicBackend(HostedBackend):
    provider: ClassVar[str] = "anthropic"
    extra_options: ClassVar[frozenset[str]] = frozenset({"thinking_budget"})
