"""Import the object a ``MODULE:ATTR`` reference names (``--app``, ``--against``, a
DomainPack's code and handler references)."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

from hypha_celery.errors import SetupError


class AppLoadError(SetupError):
    """A ``MODULE:ATTR`` reference (``--app``, ``--against``, a pack's ``code``) that does
    not name an importable object of the right kind."""


def load_object(spec: str, *, option: str = "--app",
                cwd: str | os.PathLike[str] | None = None) -> object:
    """The object ``MODULE:ATTR`` names (a dotted attribute path is allowed), imported
    with the working directory (or ``cwd``) on ``sys.path``; ``option`` is where the
    reference came from, for the error message."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise AppLoadError(f"{option} must look like MODULE:ATTR (e.g. examples.support:hypha), "
                           f"got {spec!r}")
    base = str(Path(cwd) if cwd is not None else Path.cwd())
    if base not in sys.path:
        sys.path.insert(0, base)
    module = _import(module_name)
    obj: object = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise AppLoadError(f"module {module_name!r} has no attribute {attr!r}") from None
    return obj


def _import(name: str) -> object:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise AppLoadError(f"no module named {name!r} (looked in the working directory "
                               "and sys.path)") from None
        raise AppLoadError(f"importing {name!r} failed: {exc}") from exc
    except Exception as exc:
        raise AppLoadError(f"importing {name!r} failed: {type(exc).__name__}: {exc}") from exc
