"""Runnable example apps (``hypha worker --app examples.support:hypha``)."""
