"""Graph nodes that call a model (``Node(models=...)``, queue ``hypha.io``): a call
waits on the provider for seconds, so a greenlet each (gevent's pool), not a process each.

    hypha worker --app myapp:hypha --profile workers/llm.py
    celery -A myapp:celery worker $(python -m workers llm)

Run one per core. Measured (bench/graph_io.py, docs/operations.md "Sizing, measured"):
two of these with one coordinator worker held 540-600 model calls in flight on a 2-core
machine, about 520 MB of RSS in all. No Celery hard time limits on gevent: a call is
bounded by its own timeout. Tasks ack late (at-least-once).
"""

#: The queues this worker consumes (Celery's ``-Q``).
queues = ["hypha.io"]
worker_pool = "gevent"
#: Model calls in flight per process.
worker_concurrency = 1000
#: 1: a call is long; a dying worker strands no prefetched messages.
worker_prefetch_multiplier = 1
