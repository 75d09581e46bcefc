"""Optional Celery message signing: Celery's ``auth`` serializer over JSON.

With all three of ``HYPHA_SIGNING_KEY_FILE`` (this process's RSA private key, PEM),
``HYPHA_SIGNING_CERT_FILE`` (its X.509 certificate, PEM) and ``HYPHA_SIGNING_CERT_STORE``
(a directory of the trusted certificates, PEM) set, every task and control message a
:class:`~hypha_celery.Hypha` process publishes is signed with its key, and the process
accepts only messages whose signature verifies against a certificate of its store
(``accept_content=["auth"]``). ``HYPHA_SIGNING_KEY_PASSWORD`` decrypts an encrypted key;
it is never logged nor put in the Celery configuration. None of them: no signing.

A worker refuses a message that does not verify before anything runs: its consumer
records a dead letter with reason ``bad_signature`` (or ``unsigned``), see
:mod:`~hypha_celery.runtime.consumer`. Results, task events and the event store are not
signed; see docs/security.md.

Needs ``cryptography`` (``pip install 'hypha-celery[signing]'``), imported only when
signing is configured. kombu's serializer registry is process-wide, so a process signs
with one key: a second app asking for another is a ``SetupError``.
"""

from __future__ import annotations

import datetime
import glob
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hypha_celery.errors import ExtraNotInstalled, SetupError

KEY_FILE = "HYPHA_SIGNING_KEY_FILE"
CERT_FILE = "HYPHA_SIGNING_CERT_FILE"
CERT_STORE = "HYPHA_SIGNING_CERT_STORE"
KEY_PASSWORD = "HYPHA_SIGNING_KEY_PASSWORD"
FILES = (KEY_FILE, CERT_FILE, CERT_STORE)
#: Celery's name of the signing serializer and the content type of its messages.
SERIALIZER = "auth"
CONTENT_TYPE = "application/data"
DIGEST = "sha256"
INSTALL_HINT = "pip install 'hypha-celery[signing]'"

#: The signing set up in this process (kombu's registry holds one ``auth`` serializer).
_active: Signing | None = None


@dataclass(frozen=True)
class Signing:
    """Where this process's key, its certificate and the trusted certificates are."""

    key_file: str
    cert_file: str
    cert_store: str
    key_password: str | None = field(default=None, repr=False)


def from_env(env: Mapping[str, str]) -> Signing | None:
    """The signing settings of ``env``: None when none is set; all three files or a
    ``SetupError`` naming the missing ones."""
    values = {name: env.get(name, "").strip() for name in FILES}
    missing = [name for name, value in values.items() if not value]
    if len(missing) == len(FILES):
        return None
    if missing:
        raise SetupError(f"message signing needs {', '.join(FILES)} together; "
                         f"not set: {', '.join(missing)}")
    password = env.get(KEY_PASSWORD) or None
    return Signing(values[KEY_FILE], values[CERT_FILE], values[CERT_STORE], password)


def apply(app: Any, signing: Signing | None) -> None:
    """Make ``app`` sign what it publishes and accept only verified messages (nothing
    without ``signing``). Results stay JSON. Every problem is a one-line ``SetupError``;
    a missing ``cryptography`` is ``ExtraNotInstalled``."""
    global _active
    if signing is None:
        return
    if _active is not None and _active != signing:
        raise SetupError("this process already signs with another key: kombu's serializer "
                         "registry is process-wide, one signing key per process")
    try:
        import cryptography  # noqa: F401  (before celery.security, which needs it)
        from celery.security import setup_security
    except ImportError as exc:
        raise ExtraNotInstalled(
            f"message signing ({KEY_FILE}) needs cryptography: {INSTALL_HINT}") from exc
    _check(signing)
    app.conf.update(task_serializer=SERIALIZER, accept_content=[SERIALIZER],
                    result_serializer="json", result_accept_content=["json"],
                    event_serializer="json", security_key=signing.key_file,
                    security_certificate=signing.cert_file,
                    security_cert_store=signing.cert_store, security_digest=DIGEST)
    if _active == signing:
        return  # kombu's registry already holds this process's serializer
    try:
        setup_security(["json"], signing.key_file, signing.key_password, signing.cert_file,
                       signing.cert_store, DIGEST, "json", app=app)
    except Exception as exc:
        raise SetupError(f"message signing: {_line(exc)}") from None
    _active = signing


def _check(signing: Signing) -> None:
    """The files load, the key is the certificate's, nothing has expired, and the store
    holds at least one certificate."""
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    key_data, cert_data = _read(KEY_FILE, signing.key_file), _read(CERT_FILE, signing.cert_file)
    password = signing.key_password.encode() if signing.key_password else None
    try:
        key = load_pem_private_key(key_data, password)
    except (TypeError, ValueError) as exc:
        raise SetupError(f"{KEY_FILE}: not a PEM private key this password opens "
                         f"({type(exc).__name__})") from None
    try:
        cert = x509.load_pem_x509_certificate(cert_data)
    except ValueError:
        raise SetupError(f"{CERT_FILE}: not a PEM X.509 certificate") from None
    public = cert.public_key()
    if not isinstance(key, rsa.RSAPrivateKey) or not isinstance(public, rsa.RSAPublicKey):
        raise SetupError("message signing needs RSA keys (Celery's auth serializer)")
    if key.public_key().public_numbers() != public.public_numbers():
        raise SetupError(f"{KEY_FILE} is not the key of the certificate in {CERT_FILE}")
    if cert.not_valid_after_utc <= datetime.datetime.now(datetime.UTC):
        raise SetupError(f"{CERT_FILE}: the certificate expired on "
                         f"{cert.not_valid_after_utc:%Y-%m-%d}")
    store = signing.cert_store
    pattern = os.path.join(store, "*") if os.path.isdir(store) else store
    if not any(os.path.isfile(p) for p in glob.glob(pattern)):
        raise SetupError(f"{CERT_STORE}: no certificate there (a directory of trusted PEM "
                         "certificates)")


def _read(name: str, path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise SetupError(f"{name}: cannot read the file ({exc.strerror or type(exc).__name__})"
                         ) from None


def _line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
