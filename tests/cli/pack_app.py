"""The worker app of ``hypha pack test``'s broker test: a Hypha on the worker's
environment (broker, store) with every workflow of the casework pack registered, as a
user's worker app registers the pack it tests."""

from __future__ import annotations

from pathlib import Path

from hypha_celery import Hypha, Settings
from hypha_celery.packs import compile_all, load_pack

PACK = Path(__file__).resolve().parents[1] / "packs" / "casework.yaml"


def build(settings: Settings) -> Hypha:
    hypha = Hypha(settings)
    for graph in compile_all(load_pack(PACK)).values():
        hypha.register(graph)
    return hypha
