"""Load the ``Hypha`` object a ``--app MODULE:ATTR`` names."""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
from pathlib import Path

from hypha_celery.client.hypha import Hypha
from hypha_celery.errors import SetupError
from hypha_celery.runtime.config import Settings


class AppLoadError(SetupError):
    """``--app`` does not name an importable :class:`Hypha` instance."""


def load_app(spec: str, *, cwd: str | os.PathLike[str] | None = None) -> Hypha:
    """Import ``MODULE`` (with the working directory on ``sys.path``) and return its
    ``ATTR`` (a dotted attribute path is allowed); it must be a :class:`Hypha`."""
    obj = load_object(spec, cwd=cwd)
    if not isinstance(obj, Hypha):
        raise AppLoadError(f"{spec} is a {type(obj).__name__}, not a Hypha instance "
                           "(define e.g. hypha = Hypha.from_env() in the module)")
    return obj


def load_object(spec: str, *, option: str = "--app",
                cwd: str | os.PathLike[str] | None = None) -> object:
    """The object ``MODULE:ATTR`` names (``option`` is the flag it came from, for the
    error message)."""
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


def app_from(spec: str | None) -> Hypha:
    """The ``--app`` object, or ``Hypha.from_env()`` when none is given."""
    return load_app(spec) if spec else Hypha.from_env()


def embedded_settings(env: dict[str, str] | None = None) -> Settings:
    """Settings for the embedded default whatever ``HYPHA_BROKER_URL`` says (the
    store URL is still honoured). If the working directory cannot hold
    ``./.hypha/``, the store goes to a temporary directory."""
    env = dict(os.environ if env is None else env)
    env.pop("HYPHA_BROKER_URL", None)
    env.pop("HYPHA_RESULT_BACKEND", None)
    settings = Settings.from_env(env)
    if env.get("HYPHA_STORE_URL", "").strip():
        return settings
    try:
        Path(".hypha").mkdir(exist_ok=True)
        writable = os.access(".hypha", os.W_OK)
    except OSError:
        writable = False
    if writable:
        return settings
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="hypha-")) / "hypha.db"
    return dataclasses.replace(settings, store_url=f"sqlite:///{path}")
