"""Conversational agents' turns (``hypha.agent.pump``, queue ``hypha.agents``): a turn
streams a model's answer, so a greenlet each (gevent's pool), not a process each.

    hypha worker --app myapp:hypha --profile workers/agents.py
    celery -A myapp:celery worker $(python -m workers agents)

Run one per core. Measured (bench/agents_io.py, docs/operations.md "Sizing, measured"):
the worker CPU a turn costs is what bounds a process, not its 1,000 greenlets. A turn is
bounded by its watchdog (``watchdog_ms``), not by Celery time limits. ``worker_pool =
"threads"`` runs the same on a thread pool (docs/operations.md, "Why gevent"). Turn tasks ack late (at-least-once; a turn is claimed in the store).
"""

#: The queues this worker consumes (Celery's ``-Q``).
queues = ["hypha.agents"]
worker_pool = "gevent"
#: Turns in flight per process.
worker_concurrency = 1000
worker_prefetch_multiplier = 1
