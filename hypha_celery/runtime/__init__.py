"""The runtime: Celery configuration, canvas, node/reducer/coordinator task bodies."""
