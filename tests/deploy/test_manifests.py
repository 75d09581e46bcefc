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
import time
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import requests
from kubernetes_validate import utils as kv

from hypha_celery.cli.worker import IO_QUEUES
from hypha_celery.runtime.config import COORDINATOR_QUEUE, EFFECTS_QUEUE, NODES_QUEUE
from tests import services
from tests.cli.helpers import HYPHA
from tests.deploy import manifests as m

#: The Kubernetes version the objects are validated for (a schema set kubernetes-validate ships).
KUBERNETES_VERSION = "1.30"
KEDA_SCHEMAS = {"ScaledObject": "keda-scaledobject-v1alpha1.json",
                "TriggerAuthentication": "keda-triggerauthentication-v1alpha1.json"}


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    env = m.dry_env(tmp_path_factory.mktemp("deploy"))
    m.write_console_tokens(env)
    return env


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
            "flower", "console"} <= set(services)
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
PYTHON = [c for c in COMMANDS if c.argv[:2] == ("python", "-c")]
#: ``python -c`` running the store's migration: run for real on SQLite
MIGRATIONS = [c for c in PYTHON if "EventStore(" in c.argv[2] and "migrate()" in c.argv[2]]
#: ``python -c`` fetching a URL (the console's compose health check): run against a
#: console that serves
HTTP_PROBES = [c for c in PYTHON if "urlopen(" in c.argv[2]]
DRY = [c for c in COMMANDS if c not in PYTHON]
CONSOLES = [c for c in DRY if c.argv[:2] == ("hypha", "console")]


def test_the_manifests_run_commands() -> None:
    assert len(MIGRATIONS) == 3  # compose, the Job, the systemd unit
    assert len(HTTP_PROBES) == 1  # the console's compose health check
    assert set(PYTHON) == set(MIGRATIONS) | set(HTTP_PROBES), "a python -c no test runs"
    assert len(CONSOLES) == 3  # compose, the Deployment, the systemd unit
    programs = {c.argv[:2] for c in DRY}
    assert programs >= {("hypha", "worker"), ("hypha", "beat"), ("hypha", "console"),
                        ("celery", "flower"), ("celery", "inspect")}


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
    ("hypha", "console", "--hots", "0.0.0.0", "--port", "8765"),
    ("hypha", "console", "--host", "0.0.0.0", "--port", "http"),
    ("hypha", "console", "--host", "0.0.0.0", "--port", "0"),
    ("hypha", "console", "--fixtures", "/nonexistent/fixtures"),
])
def test_the_dry_run_fails_on_a_bad_command(argv: tuple[str, ...], env: dict[str, str]) -> None:
    assert dry_run(argv, env).returncode != 0


def test_the_console_dry_run_checks_its_settings_and_never_serves(
        env: dict[str, str], tmp_path: Path) -> None:
    argv = CONSOLES[0].argv
    done = dry_run(argv, env)
    assert done.returncode == 0, done.stderr
    assert "2 token(s) (admin:ops, user:alice)" in done.stdout  # the mounted file was read
    tokens = tmp_path / "tokens"
    for broken in ({"HYPHA_CONSOLE_TOKENS_FILE": str(tmp_path / "missing")},
                   {"HYPHA_CONSOLE_TOKENS_FILE": str(tokens)},      # a short token
                   {"HYPHA_CONSOLE_SECRET": "too short"}):
        tokens.write_text("admin:ops=short\n")
        done = dry_run(argv, {**env, **broken})
        assert done.returncode != 0, broken
        assert "short" not in done.stderr.replace("shorter", "")  # no token in the message
    # what keeps a dry run dry: serving is refused
    done = subprocess.run([sys.executable, "-c", "import sys; from tests.deploy import dryrun; "
                           "dryrun._never_serve(); import uvicorn; uvicorn.run(None)"],
                          cwd=m.ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "would serve" in done.stderr


# -- the console ----------------------------------------------------------------------

def _kube(kind: str, name: str) -> dict[str, Any]:
    [doc] = [d for _, d in OBJECTS if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def test_the_console_listens_where_its_probes_and_ports_say() -> None:
    service = m.compose()["services"]["console"]
    argv = service["command"]
    port = argv[argv.index("--port") + 1]
    assert argv[argv.index("--host") + 1] == "0.0.0.0"  # in a container: beyond loopback
    assert service["ports"] == [f"127.0.0.1:{port}:{port}"]  # published to this machine
    assert service["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
    assert "environment" not in service and "console-tokens" in service["secrets"]
    assert f"127.0.0.1:{port}/healthz" in service["healthcheck"]["test"][-1]

    deployment = _kube("Deployment", "hypha-console")
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    argv = container["command"]
    [http] = container["ports"]
    assert argv[argv.index("--port") + 1] == str(http["containerPort"])
    assert argv[argv.index("--host") + 1] == "0.0.0.0"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": http["name"]}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": http["name"]}
    assert container["resources"]["requests"] and container["resources"]["limits"]
    env = {e["name"]: e for e in container["env"]}
    assert env["HYPHA_CONSOLE_SECRET"]["valueFrom"]["secretKeyRef"] == {
        "name": "hypha-console", "key": "secret"}
    tokens_file = Path(env["HYPHA_CONSOLE_TOKENS_FILE"]["value"])
    [mount] = [v for v in container["volumeMounts"] if tokens_file.parent == Path(v["mountPath"])]
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "hypha-console"
    assert {i["path"] for i in volume["secret"]["items"]} == {tokens_file.name}
    labels = deployment["spec"]["selector"]["matchLabels"]
    svc = _kube("Service", "hypha-console")
    assert svc["spec"]["selector"] == labels and svc["spec"].get("type") == "ClusterIP"
    assert [p["targetPort"] for p in svc["spec"]["ports"]] == [http["name"]]
    assert _kube("PodDisruptionBudget", "hypha-console")["spec"]["selector"]["matchLabels"] \
        == labels

    [systemd] = [c for c in CONSOLES if c.where.startswith("hypha-console.service")]
    assert systemd.argv[systemd.argv.index("--host") + 1] == "127.0.0.1"


@pytest.fixture
def serving_console(env: dict[str, str], tmp_path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    """``hypha console`` serving for real on a free port, with the test environment."""
    port = services.free_port()
    env = {**env, "HYPHA_STORE_URL": f"sqlite:///{tmp_path / 'store.db'}"}
    proc = subprocess.Popen([HYPHA, "console", "--port", str(port)], cwd=m.ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.communicate()[1]
            try:
                requests.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline, "the console did not listen"
                time.sleep(0.2)
        yield port, env
    finally:
        proc.terminate()
        proc.wait(30)
        assert proc.stderr is not None
        proc.stderr.close()


def _on_port(command: m.Command, port: int) -> list[str]:
    assert command.argv[2].count(":8765/") == 1, command.argv[2]
    return [sys.executable, "-c", command.argv[2].replace(":8765/", f":{port}/")]


@pytest.mark.parametrize("command", HTTP_PROBES, ids=[c.where for c in HTTP_PROBES])
def test_the_http_probe_passes_on_a_serving_console_and_fails_without(
        command: m.Command, serving_console: tuple[int, dict[str, str]]) -> None:
    port, env = serving_console
    done = subprocess.run(_on_port(command, port), env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    unused = services.free_port()
    done = subprocess.run(_on_port(command, unused), env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0


def test_the_kubernetes_probes_answer_on_a_serving_console(
        serving_console: tuple[int, dict[str, str]]) -> None:
    port, _ = serving_console
    [container] = _kube("Deployment", "hypha-console")["spec"]["template"]["spec"]["containers"]
    for probe in ("livenessProbe", "readinessProbe"):
        path = container[probe]["httpGet"]["path"]
        answer = requests.get(f"http://127.0.0.1:{port}{path}", timeout=30,
                              allow_redirects=False)
        assert answer.status_code == 200, (probe, answer.status_code, answer.text)


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
            for f, d in OBJECTS if f == "workers.yaml" and d["kind"] == "PodDisruptionBudget"}
    assert pdbs == {w["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"]
                    for w in workers.values()}
