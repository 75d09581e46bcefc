"""Load the ``Hypha`` object a ``--app MODULE:ATTR`` names."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from hypha_celery.client.hypha import Hypha
from hypha_celery.loading import AppLoadError, load_object
from hypha_celery.runtime.config import Settings

__all__ = ["AppLoadError", "app_from", "embedded_settings", "load_app", "load_object"]


def load_app(spec: str, *, cwd: str | os.PathLike[str] | None = None) -> Hypha:
    """Import ``MODULE`` (with the working directory on ``sys.path``) and return its
    ``ATTR`` (a dotted attribute path is allowed); it must be a :class:`Hypha`."""
    obj = load_object(spec, cwd=cwd)
    if not isinstance(obj, Hypha):
        raise AppLoadError(f"{spec} is a {type(obj).__name__}, not a Hypha instance "
                           "(define e.g. hypha = Hypha.from_env() in the module)")
    return obj


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
