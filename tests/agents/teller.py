"""One caller process of the admission test: waits until the start time, then makes one
``tell`` and prints ``accepted <ref>`` or ``overloaded <json info>``."""

from __future__ import annotations

import json
import sys
import time

from hypha_celery import Hypha, Settings
from hypha_celery.errors import Overloaded


def main(broker: str, store: str, name: str, at: float) -> None:
    hypha = Hypha(Settings(broker_url=broker, result_backend=broker, store_url=store,
                           embedded=False))
    hypha.store.ensure_schema()
    try:
        while time.time() < at:
            time.sleep(0.001)
        try:
            print("accepted", hypha.agents.tell(name, "x" * 10))
        except Overloaded as exc:
            print("overloaded", json.dumps(exc.info))
    finally:
        hypha.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]))
