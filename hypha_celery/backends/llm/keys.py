"""API keys, resolved at call time and never kept.

Where a key comes from, first match wins:

1. ``key_env``, when the caller names an environment variable (an agent's ``key_env``
   option): that variable only;
2. a callback registered for the vendor (:func:`register_key_source`), for keys kept in a
   secret manager: called on every resolution, so a rotated key is picked up;
3. the vendor's default variable: ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``.

No key is a :class:`~hypha_celery.backends.BackendError` of kind ``missing_key`` (not
retryable) whose text names the variable, never a value. A key is handed to the SDK client
for one call and is not written to sessions, events, logs or exception text.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from hypha_celery.backends.error import BackendError

__all__ = ["DEFAULT_ENV", "KeySource", "check_env_name", "register_key_source", "resolve_key",
           "unregister_key_source"]

#: A callback returning the vendor's key, or None when it has none.
KeySource = Callable[[], "str | None"]

DEFAULT_ENV: dict[str, str] = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}

_sources: dict[str, KeySource] = {}
_lock = threading.Lock()


def register_key_source(vendor: str, source: KeySource) -> None:
    """Resolve ``vendor``'s key (``openai``, ``anthropic``) by calling ``source()``."""
    if not callable(source):
        raise TypeError("a key source is a callable returning the key (or None)")
    with _lock:
        _sources[vendor] = source


def unregister_key_source(vendor: str) -> None:
    with _lock:
        _sources.pop(vendor, None)


def resolve_key(vendor: str, key_env: str | None = None) -> str:
    """``vendor``'s key now; ``BackendError(kind="missing_key")`` when there is none."""
    if key_env is not None:
        return _present(vendor, os.environ.get(key_env), f"environment variable {key_env}")
    with _lock:
        source = _sources.get(vendor)
    if source is not None:
        failed: str | None = None
        try:
            key = source()
        except Exception as exc:  # the source's own failure, by type only (not chained)
            failed = type(exc).__name__
        if failed is not None:
            raise BackendError(vendor, "missing_key", False,
                               message=f"the key source raised {failed}")
        return _present(vendor, key, "the registered key source")
    env = DEFAULT_ENV.get(vendor, f"{vendor.upper()}_API_KEY")
    return _present(vendor, os.environ.get(env), f"environment variable {env}")


def check_env_name(key_env: object) -> str | None:
    """``key_env`` as given to an agent: None or a plausible variable name."""
    if key_env is None:
        return None
    if not isinstance(key_env, str) or not key_env or "=" in key_env or "\0" in key_env:
        raise ValueError("key_env names an environment variable")
    return key_env


def _present(vendor: str, key: object, where: str) -> str:
    if isinstance(key, str) and key.strip():
        return key.strip()
    raise BackendError(vendor, "missing_key", False, message=f"no {vendor} API key: set {where}")
