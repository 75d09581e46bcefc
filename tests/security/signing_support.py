"""Message-signing test helpers: RSA identities made with ``cryptography``, the graphs
the signing workers run, and a guard that puts kombu's process-wide serializer
registry back as it was (the test process signs as identity A while a test runs).

Imported by the worker app module :mod:`tests.security.signing_app` too: keep it free
of anything that needs the test process.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypha_celery import Context, FanOut, Finish, Graph, Hypha, Next, Outcome, Settings
from hypha_celery.runtime import signing

FAN_GRAPH = "signing_fan"
#: A Celery task outside the graphs: appends its argument to :data:`TOUCHED` (Redis).
TOUCH_TASK = "signing_app.touch"
TOUCHED = "signing_app:touched"
#: The worker app writes its node name to this file once it is ready (no ping: a ping
#: is a broadcast every worker decodes, and one that does not trust the sender would
#: dead-letter it).
READY_ENV = "HYPHA_TEST_READY_FILE"


# -- identities ---------------------------------------------------------------------
@dataclass(frozen=True)
class Identity:
    """A private key and its self-signed certificate, as PEM files."""

    name: str
    key_file: Path
    cert_file: Path


def make_identity(directory: Path, name: str, serial: int, *, password: str | None = None,
                  days: float = 1.0) -> Identity:
    """An RSA-2048 key and a self-signed certificate ``CN=name`` (``days`` of validity
    from an hour ago; negative: already expired)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    start = now - (datetime.timedelta(hours=1) if days > 0 else datetime.timedelta(days=2))
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(serial)
            .not_valid_before(start).not_valid_after(now + datetime.timedelta(days=days))
            .sign(key, hashes.SHA256()))
    directory.mkdir(parents=True, exist_ok=True)
    crypt: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password
        else serialization.NoEncryption())
    key_file, cert_file = directory / f"{name}.key", directory / f"{name}.pem"
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8, crypt))
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Identity(name, key_file, cert_file)


def cert_store(directory: Path, *trusted: Identity) -> Path:
    """A directory holding the certificates of ``trusted`` (and nothing else)."""
    directory.mkdir(parents=True)
    for ident in trusted:
        (directory / ident.cert_file.name).write_bytes(ident.cert_file.read_bytes())
    return directory


def signing_env(ident: Identity, store: Path, password: str | None = None) -> dict[str, str]:
    env = {signing.KEY_FILE: str(ident.key_file), signing.CERT_FILE: str(ident.cert_file),
           signing.CERT_STORE: str(store)}
    if password:
        env[signing.KEY_PASSWORD] = password
    return env


def signing_of(ident: Identity, store: Path, password: str | None = None) -> signing.Signing:
    found = signing.from_env(signing_env(ident, store, password))
    assert found is not None
    return found


@contextmanager
def registry_restored() -> Iterator[None]:
    """kombu's serializer registry (and hypha's record of this process's signing) as
    they were, whatever the block registered: signing is process-wide."""
    from kombu.serialization import registry

    saved = {name: getattr(registry, name) for name in (
        "_encoders", "_decoders", "_disabled_content_types", "type_to_name",
        "name_to_type")}
    copies = {name: value.copy() for name, value in saved.items()}
    defaults = (registry._default_encode, registry._default_content_type,
                registry._default_content_encoding)
    active = signing._active
    try:
        yield
    finally:
        for name, value in saved.items():
            value.clear()
            value.update(copies[name])
        (registry._default_encode, registry._default_content_type,
         registry._default_content_encoding) = defaults
        signing._active = active


# -- the graphs -----------------------------------------------------------------------
def edge(state: dict[str, Any], inp: dict[str, Any]) -> dict[str, Any]:
    return {"v": inp["k"] * 10}


def total(state: dict[str, Any], outcomes: list[Outcome]) -> dict[str, Any]:
    return {"sum": sum(o.value["v"] for o in outcomes if o.ok and o.value)}


def fan_policy(ctx: Context) -> FanOut | Finish:
    if ctx.step == 0:
        return FanOut([Next("edge", {"k": k}) for k in (1, 2, 3)], reducer="total")
    return Finish({"sum": ctx.state["sum"]})


def fan_graph() -> Graph:
    """A fan-out of three edges joined by a reducer: a Celery chord."""
    return Graph(id=FAN_GRAPH, nodes={"edge": edge}, reducers={"total": total},
                 decision_policy=fan_policy, max_steps=5, execution_timeout=60.0,
                 node_timeout=20.0)


def touch(value: str) -> None:
    import redis

    client = redis.Redis.from_url(os.environ["HYPHA_RESULT_BACKEND"])
    try:
        client.rpush(TOUCHED, value)
    finally:
        client.close()


def build(settings: Settings) -> Hypha:
    """The app of the signing tests: :func:`fan_graph` and :data:`TOUCH_TASK`."""
    hypha = Hypha(settings)
    hypha.register(fan_graph())
    hypha.celery.task(name=TOUCH_TASK, ignore_result=True, shared=False)(touch)
    return hypha
