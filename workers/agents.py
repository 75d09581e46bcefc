"""Conversational agents' turns (``hypha.agent.pump``, queue ``hypha.agents``): a turn
streams a model's answer, so a thread each, not a process each.

    hypha worker --app myapp:hypha --profile workers/agents.py
    celery -A myapp:celery worker $(python -m workers agents)

Run one per core. Measured (bench/agents_io.py, docs/operations.md "Sizing, measured"):
two processes of 500 threads held 366-546 turns in flight on a 2-core machine (median
512), about 340 MB of RSS; each turn costs 14-19 ms of worker CPU, which is what bounds
a process. A turn is bounded by its watchdog (``watchdog_ms``), not by Celery time
limits. Turn tasks ack late (at-least-once; a turn is claimed in the store).
"""

#: The queues this worker consumes (Celery's ``-Q``).
queues = ["hypha.agents"]
worker_pool = "threads"
#: Turns in flight per process.
worker_concurrency = 500
worker_prefetch_multiplier = 1
