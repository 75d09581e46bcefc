"""Graph nodes that compute (queue ``hypha.nodes``, and your nodes' own queues:
``Node(queue="gpu")``; add them below). Nodes that call a model go to ``hypha.io``
(workers/llm.py), at-most-once nodes to ``hypha.effects`` (workers/effects.py).

    hypha worker --app myapp:hypha --profile workers/nodes.py
    celery -A myapp:celery worker $(python -m workers nodes)

prefork: a node that computes needs a core, and Celery's soft and hard time limits (a
node's timeout) exist only on prefork. Node tasks ack late (at-least-once): a worker
killed mid-node has its message redelivered.
"""

#: The queues this worker consumes (Celery's ``-Q``): add your nodes' own queues.
queues = ["hypha.nodes"]
worker_pool = "prefork"
#: None: Celery's default, the number of CPUs.
worker_concurrency = None
#: 1: a message prefetched by a worker that dies waits for the broker's visibility
#: timeout (Redis, HYPHA_VISIBILITY_TIMEOUT) before another worker gets it. Raise it
#: (Celery's default is 4) for many short nodes.
worker_prefetch_multiplier = 1
#: Recycle a process after this many tasks (None: never); a bound on leaks in node code.
worker_max_tasks_per_child = None
