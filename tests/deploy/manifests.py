"""Reading deploy/: its files, the objects in them and the commands they run, as argv
lists with the placeholders of their format resolved against a test environment."""

from __future__ import annotations

import configparser
import os
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "compose" / "compose.yaml"
KUBERNETES = DEPLOY / "kubernetes"
SYSTEMD = DEPLOY / "systemd"
SCHEMAS = Path(__file__).resolve().parent / "schemas"
#: Where the systemd units expect the virtualenv (stripped: the test runs the project's).
UNIT_VENV = "/opt/hypha/venv/bin/"
#: The instances the worker template unit is meant for (hypha worker --profile %i).
WORKER_INSTANCES = ("default", "cpu", "io")
#: The console's sign-in tokens in the test environment (HYPHA_CONSOLE_TOKENS_FILE).
CONSOLE_TOKENS = "admin:ops=" + "o" * 32 + "\nuser:alice=" + "a" * 32 + "\n"


@dataclass(frozen=True)
class Command:
    """A command a manifest runs: where (for messages) and its argv."""

    where: str
    argv: tuple[str, ...]


def kubernetes_objects() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted(KUBERNETES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                yield path.name, doc


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def _shell(argv: list[str], env: Mapping[str, str]) -> list[str]:
    """``sh -c STRING`` -> the argv the shell runs (variables expanded, ``exec`` dropped)."""
    if argv[:2] != ["sh", "-c"]:
        return argv
    assert len(argv) == 3, f"sh -c takes one string: {argv}"
    words = shlex.split(re.sub(r"\$(\w+)|\$\{(\w+)\}",
                               lambda m: env[m.group(1) or m.group(2)], argv[2]))
    return words[1:] if words[:1] == ["exec"] else words


def _our_image(service: Mapping[str, Any]) -> bool:
    return str(service.get("image", "")).startswith("${HYPHA_IMAGE")


def compose_commands(env: Mapping[str, str]) -> Iterator[Command]:
    """The commands of the services that run the application image: ``command`` and the
    healthcheck (``$$`` is compose's escaped ``$``)."""
    for name, service in compose()["services"].items():
        if not _our_image(service):
            continue  # redis, postgres: their images' own commands
        found = []
        if "command" in service:
            found.append(("command", list(service["command"])))
        test = service.get("healthcheck", {}).get("test")
        if test:
            assert test[0] == "CMD", f"{name}: healthcheck must be an exec form (CMD)"
            found.append(("healthcheck", list(test[1:])))
        for what, argv in found:
            argv = [a.replace("$$", "$") for a in argv]
            yield Command(f"compose {name} {what}", tuple(_shell(argv, env)))


def _containers(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    spec = doc.get("spec", {})
    pod = spec.get("template", {}).get("spec", {})
    return list(pod.get("containers", [])) + list(pod.get("initContainers", []))


def kubernetes_commands(env: Mapping[str, str]) -> Iterator[Command]:
    """Every container's command + args and every exec probe (``$(VAR)`` as Kubernetes
    expands it in command and args)."""
    for filename, doc in kubernetes_objects():
        for c in _containers(doc):
            where = f"{filename} {doc['kind']}/{doc['metadata']['name']} {c['name']}"
            argv = [*c.get("command", []), *c.get("args", [])]
            if argv:
                argv = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in argv]
                yield Command(where, tuple(_shell(argv, env)))
            for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                exec_ = c.get(probe, {}).get("exec")
                if exec_:
                    yield Command(f"{where} {probe}", tuple(_shell(exec_["command"], env)))


def unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None,
                                       delimiters=("=",), comment_prefixes=("#", ";"))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(path.read_text())
    return parser


def systemd_commands() -> Iterator[Command]:
    """Every ExecStart, with the template's instance (``%i``) for each profile and
    ``%H`` a host name."""
    for path in sorted(SYSTEMD.glob("*.service")):
        line = unit(path)["Service"]["ExecStart"]
        instances = WORKER_INSTANCES if path.name.endswith("@.service") else ("",)
        for instance in instances:
            argv = shlex.split(line.replace("%i", instance).replace("%H", "testhost"))
            assert argv[0].startswith(UNIT_VENV), f"{path.name}: run from {UNIT_VENV}"
            argv[0] = argv[0].removeprefix(UNIT_VENV)
            yield Command(f"{path.name}{' ' + instance if instance else ''}", tuple(argv))


def all_commands(env: Mapping[str, str]) -> list[Command]:
    return [*compose_commands(env), *kubernetes_commands(env), *systemd_commands()]


def dry_env(tmp: Path) -> dict[str, str]:
    """The variables the manifests get from their Secret / env file, with test values: an
    app of examples/, a broker no one listens on (nothing here connects), a SQLite store,
    the console's tokens file (``tmp/console-tokens``: :func:`write_console_tokens`) and
    cookie key."""
    return {**os.environ,
            "HYPHA_CONSOLE_TOKENS_FILE": str(tmp / "console-tokens"),
            "HYPHA_CONSOLE_SECRET": "s" * 40,
            "HYPHA_APP": "examples.support:hypha", "CELERY_APP": "examples.support",
            "HYPHA_BROKER_URL": "redis://127.0.0.1:1/0",
            "HYPHA_RESULT_BACKEND": "redis://127.0.0.1:1/1",
            "HYPHA_STORE_URL": f"sqlite:///{tmp / 'store.db'}", "HOSTNAME": "testhost",
            "PYTHONPATH": str(ROOT)}


def write_console_tokens(env: Mapping[str, str], text: str = CONSOLE_TOKENS) -> None:
    Path(env["HYPHA_CONSOLE_TOKENS_FILE"]).write_text(text)
