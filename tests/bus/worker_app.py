"""The app the bus's worker tests run (``build(settings) -> Hypha``)."""

from __future__ import annotations

from hypha_celery import Hypha, Settings


def build(settings: Settings) -> Hypha:
    return Hypha(settings)
