"""The worker app of the TLS tests, built from the environment::

    HYPHA_BROKER_URL=rediss://localhost:P/0 HYPHA_TLS_CA_FILE=... \
        celery -A tests.security.tls_app:celery worker ...

It registers the demo graph (classify -> three lookups in a chord -> merge -> answer):
a run crosses the broker, the result backend (the chord) and the store.
"""

from __future__ import annotations

import os

from hypha_celery import Hypha, Settings
from hypha_celery.demo import demo_graph

APP = "tests.security.tls_app:celery"


def build(settings: Settings) -> Hypha:
    hypha = Hypha(settings)
    hypha.register(demo_graph())
    return hypha


if os.environ.get("HYPHA_BROKER_URL"):
    hypha = build(Settings.from_env())
    celery = hypha.celery
