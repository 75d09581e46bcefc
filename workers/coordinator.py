"""The coordinator: every run's step between two nodes (store transaction, policy,
next message) and the recovery supervisor's sweep (``hypha.supervisor``). Short and
CPU-light (3.7 ms of worker time per step in bench/README.md's linear bench), so a
few processes keep up with many runs.

    hypha worker --app myapp:hypha --profile workers/coordinator.py
    celery -A myapp:celery worker $(python -m workers coordinator)

Scale it when ``hypha.coordinator``'s queue depth grows (see workers/README.md).
Coordinator tasks ack late (at-least-once; a duplicate step is fenced by the run's
sequence number): the task decides that, not this file.
"""

#: The queues this worker consumes (Celery's ``-Q``).
queues = ["hypha.coordinator"]
#: prefork: one process per core; a step holds the GIL while it decides.
worker_pool = "prefork"
#: None: Celery's default, the number of CPUs.
worker_concurrency = None
#: Steps are short: Celery's default prefetch keeps the processes busy.
worker_prefetch_multiplier = 4
