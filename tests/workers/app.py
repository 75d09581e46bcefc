"""The app the profile tests' worker runs: ``Hypha.from_env()`` with no graphs."""

from __future__ import annotations

from hypha_celery import Hypha

hypha = Hypha.from_env()
celery = hypha.celery
