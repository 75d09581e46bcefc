"""The ``mcp`` SDK, imported when first needed, with the extra to install if it is not."""

from __future__ import annotations

from types import ModuleType

from hypha_celery.errors import ExtraNotInstalled

__all__ = ["require"]


def require() -> ModuleType:
    """The ``mcp`` package (1.x), or :class:`ExtraNotInstalled` naming the extra."""
    try:
        import mcp
        import mcp.client.stdio
        import mcp.client.streamable_http
    except ImportError:
        raise ExtraNotInstalled(
            "the MCP gateway needs the official MCP SDK: "
            "pip install 'hypha-celery[mcp]'") from None
    return mcp
