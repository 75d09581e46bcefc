"""``python -m workers NAME``: the ``celery worker`` options of ``workers/NAME.py``, for
a plain Celery command line::

    celery -A myapp:celery worker $(python -m workers llm)

(``hypha worker --app myapp:hypha --profile workers/llm.py`` reads the same file.)"""

import sys
from pathlib import Path

from hypha_celery.cli.worker import load_profile
from hypha_celery.errors import SetupError


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m workers NAME|FILE.py  (e.g. llm)", file=sys.stderr)
        return 2
    name = argv[0]
    path = Path(name) if name.endswith(".py") else Path(__file__).with_name(f"{name}.py")
    try:
        options = load_profile(path).celery_options()
    except SetupError as exc:
        print(f"workers: error: {exc}", file=sys.stderr)
        return 2
    print(" ".join(options))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
