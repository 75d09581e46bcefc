"""Write a file so that readers see the old one or the whole new one, never half of it."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import IO, TypeVar

T = TypeVar("T")


def write_atomically(path: str | os.PathLike[str], write: Callable[[IO[str]], T]) -> T:
    """``write(out)`` into a temporary file in ``path``'s directory, then rename it over
    ``path``; on any error the temporary file is removed and the error raised (``OSError``
    included: the directory may be missing or read-only). Returns what ``write`` returned."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            result = write(out)
        os.replace(tmp, target)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise
    return result
