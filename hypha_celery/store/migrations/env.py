"""Alembic environment: runs on the connection hypha hands it (see EventStore.migrate)."""

from alembic import context

from hypha_celery.store.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
