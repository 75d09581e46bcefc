"""Alembic environment: runs on the connection hypha hands it (see EventStore.migrate)."""

from alembic import context

from hypha_celery.store.memory import MEMORY_SEARCH_OBJECTS
from hypha_celery.store.schema import metadata

connection = context.config.attributes["connection"]
# the full-text index of memory (0010) is dialect DDL the metadata cannot describe
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True,
                  include_name=lambda name, *_: name not in MEMORY_SEARCH_OBJECTS)
with context.begin_transaction():
    context.run_migrations()
