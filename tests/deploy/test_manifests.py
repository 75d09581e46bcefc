"""deploy/ checked offline: Kubernetes objects against the schemas kubernetes-validate
ships, KEDA objects and compose.yaml against the schemas in tests/deploy/schemas/,
systemd units with systemd-analyze, and every command any of them runs, executed (the
migration for real on SQLite, the rest as a dry run: tests/deploy/dryrun.py), so that a
renamed flag fails here. Needs no Docker engine and no cluster."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from kubernetes_validate import utils as kv

from hypha_celery.cli.worker import IO_QUEUES
from hypha_celery.runtime.config import COORDINATOR_QUEUE, EFFECTS_QUEUE, NODES_QUEUE
from tests import services
from tests.deploy import manifests as m

#: The Kubernetes version the objects are validated for (a schema set kubernetes-validate ships).
KUBERNETES_VERSION = "1.30"
KEDA_SCHEMAS = {"ScaledObject": "keda-scaledobject-v1alpha1.json",
                "TriggerAuthentication": "keda-triggerauthentication-v1alpha1.json"}


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return m.dry_env(tmp_path_factory.mktemp("deploy"))


def dry_run(argv: tuple[str, ...] | list[str],
            env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tests.deploy.dryrun", *argv], cwd=m.ROOT,
                          env=dict(env), capture_output=True, text=True, timeout=120)


# -- schemas ---------------------------------------------------------------------------

def closed(schema: Any) -> Any:
    """``schema`` with ``additionalProperties: false`` on every object that lists its
    properties and says nothing about others: what the API server's strict field validation
    (kubectl's default) does with an unknown field, where the CRD's schema would prune it."""
    if isinstance(schema, dict):
        out = {k: closed(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out \
                and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [closed(v) for v in schema]
    return schema


@cache
def keda_validator(kind: str) -> jsonschema.Draft7Validator:
    schema = closed(json.loads((m.SCHEMAS / KEDA_SCHEMAS[kind]).read_text()))
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


OBJECTS = list(m.kubernetes_objects())


@pytest.mark.parametrize("doc", [d for _, d in OBJECTS],
                         ids=[f"{f}:{d['kind']}/{d['metadata']['name']}" for f, d in OBJECTS])
def test_kubernetes_object_is_valid(doc: dict[str, Any]) -> None:
    if doc["apiVersion"].startswith("keda.sh/"):
        keda_validator(doc["kind"]).validate(doc)
    else:
        kv.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_validators_refuse_a_misspelt_field() -> None:
    deployment = next(d for _, d in OBJECTS if d["kind"] == "Deployment")
    bad = json.loads(json.dumps(deployment))
    bad["spec"]["template"]["spec"]["containers"][0]["comand"] = ["hypha"]
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, KUBERNETES_VERSION, strict=True)
    scaled = next(d for _, d in OBJECTS if d["kind"] == "ScaledObject")
    bad = json.loads(json.dumps(scaled))
    bad["spec"]["minReplicas"] = 1
    with pytest.raises(jsonschema.ValidationError):
        keda_validator("ScaledObject").validate(bad)
    bad = json.loads(json.dumps(scaled))
    bad["spec"]["triggers"][0]["metadata"]["listLength"] = 5  # metadata values are strings
    with pytest.raises(jsonschema.ValidationError):
        keda_validator("ScaledObject").validate(bad)


def compose_validator() -> jsonschema.Draft7Validator:
    schema = json.loads((m.SCHEMAS / "compose-spec.json").read_text())
    return jsonschema.Draft7Validator(schema)


def test_compose_file_is_valid() -> None:
    compose_validator().validate(m.compose())
    bad = m.compose()
    bad["services"]["beat"]["comand"] = ["hypha", "beat"]
    with pytest.raises(jsonschema.ValidationError):
        compose_validator().validate(bad)


def test_compose_has_a_service_for_each_part() -> None:
    services = m.compose()["services"]
    assert {"redis", "postgres", "migrate", "worker-cpu", "worker-io", "beat",
            "flower"} <= set(services)
    for name, service in services.items():
        assert "environment" not in service, f"{name}: secrets come from hypha.env only"


# -- systemd ---------------------------------------------------------------------------

UNITS = sorted(m.SYSTEMD.glob("*.service"))


@pytest.mark.parametrize("path", UNITS, ids=[p.name for p in UNITS])
def test_systemd_unit(path: Path, tmp_path: Path) -> None:
    parsed = m.unit(path)
    assert {"Unit", "Service"} <= set(parsed.sections())
    assert "EnvironmentFile=/etc/hypha/env" in path.read_text().splitlines()
    assert parsed["Service"]["ExecStart"]
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        services.unavailable("systemd-analyze (the unit was only parsed)")
    # systemd-analyze checks that the commands exist: point them at this venv
    venv_bin = str(Path(sys.executable).parent) + "/"
    env_file = tmp_path / "env"
    env_file.write_text("")
    text = (path.read_text().replace(m.UNIT_VENV, venv_bin)
            .replace("/etc/hypha/env", str(env_file)).replace("/opt/hypha", str(tmp_path)))
    name = path.name.replace("@.service", "@cpu.service")
    (tmp_path / name).write_text(text)
    done = subprocess.run([analyze, "verify", f"./{name}"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr


# -- the commands ----------------------------------------------------------------------

COMMANDS = m.all_commands(m.dry_env(Path("/nonexistent")))
MIGRATIONS = [c for c in COMMANDS if c.argv[:2] == ("python", "-c")]
DRY = [c for c in COMMANDS if c not in MIGRATIONS]


def test_the_manifests_run_commands() -> None:
    assert len(MIGRATIONS) == 3  # compose, the Job, the systemd unit
    programs = {c.argv[:2] for c in DRY}
    assert programs >= {("hypha", "worker"), ("hypha", "beat"), ("celery", "flower"),
                        ("celery", "inspect")}


@pytest.mark.parametrize("command", DRY, ids=[c.where for c in DRY])
def test_command_runs(command: m.Command, env: dict[str, str]) -> None:
    done = dry_run(command.argv, env)
    assert done.returncode == 0, f"{command.where}: {' '.join(command.argv)}\n{done.stderr}"


@pytest.mark.parametrize("command", MIGRATIONS, ids=[c.where for c in MIGRATIONS])
def test_migration_migrates(command: m.Command, tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    env = {**m.dry_env(tmp_path), "HYPHA_STORE_URL": f"sqlite:///{store}"}
    done = subprocess.run([sys.executable, *command.argv[1:]], cwd=m.ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(store) as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"alembic_version", "hypha_events", "hypha_runs"} <= tables


@pytest.mark.parametrize("argv", [
    ("hypha", "worker", "--profiles", "io"),          # a renamed hypha option
    ("hypha", "worker", "--profile", "gpu"),          # a value no longer accepted
    ("hypha", "worker", "--profile", "io", "--hostnam", "x@y"),  # passed on to Celery
    ("hypha", "beat", "--schedul", "/tmp/s"),
    ("hypha", "no-such-command"),
    ("celery", "inspect", "ping", "--timeot", "10"),
    ("celery", "flower", "--prt=5555"),               # Flower itself would ignore it
    ("celery", "flower", "--port=http"),
])
def test_the_dry_run_fails_on_a_bad_command(argv: tuple[str, ...], env: dict[str, str]) -> None:
    assert dry_run(argv, env).returncode != 0


# -- scaling ---------------------------------------------------------------------------

def consumed(doc: Mapping[str, Any]) -> set[str]:
    """The queues a worker Deployment's command consumes."""
    argv = doc["spec"]["template"]["spec"]["containers"][0]["command"]
    if "-Q" in argv:
        return set(argv[argv.index("-Q") + 1].split(","))
    assert argv[argv.index("--profile") + 1] == "io"
    return set(IO_QUEUES)


@pytest.mark.parametrize("keda", ["keda-redis.yaml", "keda-rabbitmq.yaml"])
def test_each_worker_deployment_scales_on_its_own_queues(keda: str) -> None:
    workers = {d["metadata"]["name"]: d for f, d in OBJECTS
               if f == "workers.yaml" and d["kind"] == "Deployment"}
    scaled = {d["spec"]["scaleTargetRef"]["name"]: d for f, d in OBJECTS
              if f == keda and d["kind"] == "ScaledObject"}
    assert set(scaled) == set(workers)
    for name, so in scaled.items():
        key = "listName" if keda == "keda-redis.yaml" else "queueName"
        queues = {t["metadata"][key] for t in so["spec"]["triggers"]}
        assert queues == consumed(workers[name]), name
    every = set().union(*(consumed(w) for w in workers.values()))
    assert every == {COORDINATOR_QUEUE, NODES_QUEUE, EFFECTS_QUEUE, *IO_QUEUES}
    pdbs = {d["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"]
            for _, d in OBJECTS if d["kind"] == "PodDisruptionBudget"}
    assert pdbs == {w["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"]
                    for w in workers.values()}
