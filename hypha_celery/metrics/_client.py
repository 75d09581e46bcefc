"""The optional ``prometheus_client`` import, with the extra to install when it is missing."""

from __future__ import annotations

from types import ModuleType

from hypha_celery.errors import ExtraNotInstalled

INSTALL_HINT = "pip install 'hypha-celery[metrics]'"


def prometheus() -> ModuleType:
    """``prometheus_client``, imported on first use; ``ExtraNotInstalled`` without it."""
    try:
        import prometheus_client
    except ImportError as exc:
        raise ExtraNotInstalled(f"Prometheus metrics need prometheus-client: {INSTALL_HINT}"
                                ) from exc
    return prometheus_client


def multiprocess() -> ModuleType:
    """``prometheus_client.multiprocess`` (not imported by the package itself)."""
    prometheus()
    import prometheus_client.multiprocess

    return prometheus_client.multiprocess


def core() -> ModuleType:
    """``prometheus_client.core`` (the metric families of custom collectors)."""
    prometheus()
    import prometheus_client.core

    return prometheus_client.core
