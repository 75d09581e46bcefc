"""At-most-once nodes (``side_effect="external_effect"`` or ``"irreversible"``, queue
``hypha.effects``): a payment, an e-mail. Their tasks ack EARLY (``acks_late=False``,
set by the task itself, whatever ``task_acks_late`` says): a worker that dies mid-call
loses the message, never runs the effect twice, and the recovery supervisor reconciles
the run from the node's ``receipt`` or quarantines it for a human (docs/operations.md).

    hypha worker --app myapp:hypha --profile workers/effects.py
    celery -A myapp:celery worker $(python -m workers effects)

Keep these workers apart from the others: restarting them is what may quarantine runs,
so they should be the workers you restart least.
"""

#: The queues this worker consumes (Celery's ``-Q``).
queues = ["hypha.effects"]
#: prefork: the node's timeout is enforced by Celery's time limits.
worker_pool = "prefork"
worker_concurrency = None
#: 1: a message is acked when its task starts; prefetched ones stay unacked and would
#: wait for the visibility timeout if this worker died.
worker_prefetch_multiplier = 1
