"""TLS to Redis (``rediss://``) and RabbitMQ (``amqps://``) from one set of files; the
PostgreSQL store keeps its own URL parameters (``sslmode``, ``sslrootcert``).

``HYPHA_TLS_CA_FILE`` (the CA bundle that signs the servers' certificates; none: the
system's trust store) and, for mutual TLS, ``HYPHA_TLS_CERT_FILE`` with
``HYPHA_TLS_KEY_FILE`` (this client's certificate and key) apply to every ``rediss://``
and ``amqps://`` URL of the settings:

- Celery's broker connection: ``broker_use_ssl`` (redis-py's ``ssl_*`` keys for Redis,
  py-amqp's ``ca_certs`` / ``cert_reqs`` / ``server_hostname`` for RabbitMQ);
- Celery's Redis result backend: ``redis_backend_use_ssl``;
- hypha's own Redis clients (notifier, live bus, rate limiter, agent transport):
  :func:`redis_client_url` puts the same files in the URL's query for ``from_url``.

A TLS URL always requires a certificate chain to the CA and the URL's host name in the
certificate, with or without the files. A parameter already in a URL's query wins over the
files. The URLs Celery is given stay as they were (its worker banner prints them).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from hypha_celery.errors import SetupError

ENV_CA = "HYPHA_TLS_CA_FILE"
ENV_CERT = "HYPHA_TLS_CERT_FILE"
ENV_KEY = "HYPHA_TLS_KEY_FILE"
REDIS_TLS = "rediss://"
AMQP_TLS = "amqps://"
#: Schemes that send in the clear what a TLS setting is meant to protect.
PLAIN_SCHEMES = ("redis://", "amqp://", "pyamqp://")
#: libpq's file parameters in a store URL (``system``: the trust store, PostgreSQL 16+).
PG_FILES = ("sslrootcert", "sslcert", "sslkey")


@dataclass(frozen=True)
class TlsFiles:
    """Paths of the CA bundle and of the client certificate and key (mutual TLS)."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None

    @property
    def configured(self) -> bool:
        return any((self.ca_file, self.cert_file, self.key_file))


def tls_settings(env: Mapping[str, str], store_url: str) -> TlsFiles:
    """The ``HYPHA_TLS_*`` files, checked (and the store URL's TLS files): a missing or
    unreadable file, a certificate without its key, a key that does not match is a
    ``SetupError`` naming the variable (never a key's path)."""
    files = TlsFiles(*(env.get(name, "").strip() or None for name in (ENV_CA, ENV_CERT, ENV_KEY)))
    check_files(files)
    check_store_url(store_url)
    return files


def check_files(files: TlsFiles) -> None:
    if (files.cert_file is None) != (files.key_file is None):
        raise SetupError(f"{ENV_CERT} and {ENV_KEY} go together (mutual TLS): set both or "
                         "neither")
    if files.ca_file is not None:
        _readable(ENV_CA, files.ca_file, files.ca_file)
        try:
            ssl.create_default_context(cafile=files.ca_file)
        except (ssl.SSLError, ValueError):
            raise SetupError(f"{ENV_CA}: {files.ca_file} holds no PEM certificate") from None
    if files.cert_file is not None and files.key_file is not None:
        _readable(ENV_CERT, files.cert_file, files.cert_file)
        _readable(ENV_KEY, files.key_file, "the file")
        _check_pair(files.cert_file, files.key_file)


def _readable(name: str, path: str, shown: str) -> None:
    if not (os.path.isfile(path) and os.access(path, os.R_OK)):
        raise SetupError(f"{name}: {shown} does not exist or is not readable")


def _no_password() -> bytes:
    return b""  # an encrypted key fails to load instead of prompting on a terminal


def _check_pair(cert_file: str, key_file: str) -> None:
    try:
        ssl.create_default_context().load_cert_chain(cert_file, key_file, _no_password)
    except (ssl.SSLError, ValueError):
        raise SetupError(f"{ENV_CERT} / {ENV_KEY}: not a PEM certificate with its unencrypted "
                         "private key") from None


def check_store_url(url: str) -> None:
    """A ``postgresql`` store URL's ``sslrootcert`` / ``sslcert`` / ``sslkey`` exist."""
    if not url.startswith("postgresql"):
        return
    for key, value in parse_qsl(urlsplit(url).query):
        if key in PG_FILES and value != "system":
            _readable(f"HYPHA_STORE_URL {key}", value, "the file" if key == "sslkey" else value)


def check_encrypted(files: TlsFiles, *urls: str) -> None:
    """With TLS files set, a plain ``redis://`` / ``amqp://`` URL is a mistake: it would
    send in the clear what the files were meant to protect."""
    if not files.configured:
        return
    for url in urls:
        if url.startswith(PLAIN_SCHEMES):
            raise SetupError(f"HYPHA_TLS_* files are set but {where(url)} is not encrypted: "
                             "use rediss:// or amqps://")


def where(url: str) -> str:
    """``scheme://host:port`` of a URL: no credentials, path or query (for messages)."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname or ''}{port}"


def redis_ssl(files: TlsFiles) -> dict[str, Any]:
    """redis-py's ``ssl_*`` connection arguments (Celery's Redis broker and backend)."""
    return {"ssl_cert_reqs": ssl.CERT_REQUIRED, "ssl_check_hostname": True,
            **_redis_files(files)}


def _redis_files(files: TlsFiles) -> dict[str, str]:
    named = (("ssl_ca_certs", files.ca_file), ("ssl_certfile", files.cert_file),
             ("ssl_keyfile", files.key_file))
    return {key: value for key, value in named if value is not None}


def amqp_ssl(files: TlsFiles, url: str) -> dict[str, Any]:
    """py-amqp's ``ssl`` options: the chain to the CA and the URL's host name required
    (one host; failover URLs: kombu fills in the host it connects to)."""
    host = None if ";" in url else urlsplit(url).hostname
    out: dict[str, Any] = {"cert_reqs": ssl.CERT_REQUIRED, "server_hostname": host}
    for key, value in (("ca_certs", files.ca_file), ("certfile", files.cert_file),
                       ("keyfile", files.key_file)):
        if value is not None:
            out[key] = value
    return out


def celery_tls(broker_url: str, result_backend: str, files: TlsFiles) -> dict[str, Any]:
    """``broker_use_ssl`` / ``redis_backend_use_ssl`` for the TLS URLs among these."""
    conf: dict[str, Any] = {}
    if broker_url.startswith(REDIS_TLS):
        conf["broker_use_ssl"] = redis_ssl(files)
    elif broker_url.startswith(AMQP_TLS):
        conf["broker_use_ssl"] = amqp_ssl(files, broker_url)
    if result_backend.startswith(REDIS_TLS):
        conf["redis_backend_use_ssl"] = redis_ssl(files)
    return conf


def redis_client_url(url: str, files: TlsFiles) -> str:
    """``url`` for ``redis.Redis.from_url``: a ``rediss://`` URL gets the files (and
    certificate plus host name checks) as query parameters it does not already have."""
    if not url.startswith(REDIS_TLS):
        return url
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    checks = {} if "ssl_cert_reqs" in query else {  # else the URL decides what is checked
        "ssl_cert_reqs": "required", "ssl_check_hostname": "true"}
    query = {**checks, **_redis_files(files), **query}
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote, safe="/")))
