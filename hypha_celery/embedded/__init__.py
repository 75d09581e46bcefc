"""The embedded default: a Celery worker thread in this process (memory transport)."""

from hypha_celery.embedded.worker import EmbeddedWorker

__all__ = ["EmbeddedWorker"]
