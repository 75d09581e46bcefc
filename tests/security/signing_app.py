"""The app the message-signing tests run in real worker processes::

    celery -A tests.security.signing_app:celery worker -P prefork -c 1 -Q ...

``build(Settings.from_env())``: the broker, result backend and store of
``HYPHA_BROKER_URL`` / ``HYPHA_RESULT_BACKEND`` / ``HYPHA_STORE_URL`` and the identity
of ``HYPHA_SIGNING_*`` (each worker its own). Once the worker is ready it writes its
node name to ``$HYPHA_TEST_READY_FILE``.

As a client process, ``python -m tests.security.signing_app start GRAPH`` starts a run
signed with this process's key and prints its run id.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from celery.signals import worker_ready

from hypha_celery import Settings
from tests.security.signing_support import READY_ENV, build

hypha = build(Settings.from_env())
celery = hypha.celery


@worker_ready.connect(weak=False)
def _ready(sender: Any = None, **_: Any) -> None:
    path = os.environ.get(READY_ENV)
    if path:
        Path(path).write_text(str(getattr(sender, "hostname", "?")))


if __name__ == "__main__":
    if sys.argv[1:2] != ["start"] or len(sys.argv) != 3:
        sys.exit("usage: python -m tests.security.signing_app start GRAPH")
    try:
        print(hypha.start(sys.argv[2]).id, flush=True)
    finally:
        hypha.close()
        celery.close()
