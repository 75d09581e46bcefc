"""Certificates made by the test, and private servers started with TLS on loopback.

:func:`make_certs` writes a CA, a server certificate for ``localhost`` (a DNS name only:
a client that connects to ``127.0.0.1`` fails host name verification), a client
certificate (mutual TLS) and a second, unrelated CA. The servers listen on TLS only:

- :func:`tls_redis`: ``redis-server --port 0 --tls-port P --tls-auth-clients yes``
  (clients must present a certificate of the CA);
- :func:`tls_postgres`: a cluster made by ``initdb`` with ``ssl = on`` and a
  ``pg_hba.conf`` of ``hostssl`` lines only (root runs it as ``postgres``);
- :func:`tls_rabbitmq`: a second RabbitMQ node (its own node name, distribution port,
  database and logs) with ``listeners.tcp = none`` and one ``listeners.ssl`` listener
  (root runs it as ``rabbitmq``).

Each yields its port, or None when this machine has no binary for it.
"""

from __future__ import annotations

import datetime as dt
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.services import free_port, port_open

#: Seconds a server may take to listen (a RabbitMQ node boots in 5-15 s).
START_TIMEOUT = 60.0


@dataclass(frozen=True)
class Certs:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    #: A CA that signed none of the above.
    other_ca: Path


# -- certificates -------------------------------------------------------------------
Key = ec.EllipticCurvePrivateKey


def _key() -> Key:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(digital_signature=True, content_commitment=False,
                         key_encipherment=False, data_encipherment=False, key_agreement=False,
                         key_cert_sign=ca, crl_sign=ca, encipher_only=False,
                         decipher_only=False)


def _builder(subject: x509.Name, issuer: x509.Name, key: Key) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False))


def _ca(common_name: str) -> tuple[Key, x509.Certificate]:
    key = _key()
    cert = (_builder(_name(common_name), _name(common_name), key)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_usage(ca=True), critical=True)
            .sign(key, hashes.SHA256()))
    return key, cert


def _leaf(ca_key: Key, ca_cert: x509.Certificate, common_name: str,
          purpose: x509.ObjectIdentifier,
          dns: tuple[str, ...] = ()) -> tuple[Key, x509.Certificate]:
    key = _key()
    builder = (_builder(_name(common_name), ca_cert.subject, key)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(_usage(ca=False), critical=True)
               .add_extension(x509.ExtendedKeyUsage([purpose]), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                   ca_key.public_key()), critical=False))
    if dns:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(name) for name in dns]), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def _write(path: Path, cert: x509.Certificate, key: Key | None = None) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        key_path = path.with_suffix(".key")
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                               serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        key_path.chmod(0o600)
    return path


def make_certs(directory: Path) -> Certs:
    """A CA, a server certificate for ``localhost``, a client certificate, another CA."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = _ca("hypha test CA")
    server_key, server_cert = _leaf(ca_key, ca_cert, "localhost", ExtendedKeyUsageOID.SERVER_AUTH,
                                    ("localhost",))
    client_key, client_cert = _leaf(ca_key, ca_cert, "hypha-client",
                                    ExtendedKeyUsageOID.CLIENT_AUTH)
    _, other = _ca("some other CA")
    _write(directory / "ca.pem", ca_cert)
    _write(directory / "server.pem", server_cert, server_key)
    _write(directory / "client.pem", client_cert, client_key)
    _write(directory / "other-ca.pem", other)
    return Certs(ca=directory / "ca.pem", server_cert=directory / "server.pem",
                 server_key=directory / "server.key", client_cert=directory / "client.pem",
                 client_key=directory / "client.key", other_ca=directory / "other-ca.pem")


# -- a private directory a service account can read --------------------------------
@contextmanager
def service_dir(user: str | None) -> Iterator[Path]:
    """A fresh directory owned by ``user`` (root runs servers as their own accounts);
    removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="hypha-tls-"))
    root.chmod(0o711)
    path = root / "srv"
    path.mkdir()
    try:
        if user is not None:
            shutil.chown(path, user, user)
        yield path
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _server_files(certs: Certs, directory: Path, user: str | None) -> tuple[Path, Path, Path]:
    """Copies of the CA, server certificate and key in ``directory`` (key 0600, owned by
    ``user``: PostgreSQL refuses a key others can read)."""
    out = []
    for src in (certs.ca, certs.server_cert, certs.server_key):
        dst = directory / src.name
        shutil.copyfile(src, dst)
        if user is not None:
            shutil.chown(dst, user, user)
        out.append(dst)
    out[2].chmod(0o600)
    return out[0], out[1], out[2]


def _run_as(user: str | None) -> list[str]:
    return [] if user is None else ["runuser", "-u", user, "--"]


def _account(name: str) -> str | None | bool:
    """``name`` when this process is root (it runs the server as that account), None when
    not root (the server runs as this user), False: root, and no such account."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return name


def _wait_listening(port: int, proc: subprocess.Popen[bytes] | None, log: Path,
                    timeout: float = START_TIMEOUT) -> None:
    end = time.monotonic() + timeout
    while not port_open("127.0.0.1", port, timeout=0.2):
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{_tail(log)}")
        if time.monotonic() > end:
            raise RuntimeError(f"server did not listen on {port} in {timeout}s:\n{_tail(log)}")
        time.sleep(0.1)


def _tail(log: Path, chars: int = 3000) -> str:
    try:
        return log.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def _stop(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """SIGTERM to the server's own process group (started with a new session), then
    SIGKILL if it outlives ``timeout``."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


# -- Redis ----------------------------------------------------------------------------
@contextmanager
def tls_redis(certs: Certs) -> Iterator[int | None]:
    """A ``redis-server`` on a TLS port only, requiring client certificates of the CA."""
    binary = shutil.which("redis-server")
    if binary is None:
        yield None
        return
    with service_dir(None) as d:
        port, log = free_port(), d / "redis.log"
        argv = [binary, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
                "--tls-cert-file", str(certs.server_cert), "--tls-key-file",
                str(certs.server_key), "--tls-ca-cert-file", str(certs.ca),
                "--tls-auth-clients", "yes", "--save", "", "--appendonly", "no",
                "--dir", str(d), "--logfile", str(log)]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            _wait_listening(port, proc, log)
            yield port
        finally:
            _stop(proc)


# -- PostgreSQL -----------------------------------------------------------------------
def pg_bindir() -> Path | None:
    """The newest installed PostgreSQL server binaries (Debian layout, else PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    initdb = found[-1] if found else shutil.which("initdb")
    return None if initdb is None else Path(initdb).parent


def _pg_conf(port: int, d: Path, cert: Path, key: Path) -> str:
    return (f"listen_addresses = '127.0.0.1'\nport = {port}\n"
            f"unix_socket_directories = '{d}'\nssl = on\n"
            f"ssl_cert_file = '{cert}'\nssl_key_file = '{key}'\n"
            "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
            "max_connections = 100\nshared_buffers = 16MB\n")


#: TLS connections from loopback only; no ``host`` line: a plain connection is refused.
PG_HBA = "local all all trust\nhostssl all all 127.0.0.1/32 trust\n"


@contextmanager
def tls_postgres(certs: Certs) -> Iterator[int | None]:
    """A private PostgreSQL cluster accepting TLS connections only (user ``postgres``,
    trust authentication on loopback)."""
    bindir, user = pg_bindir(), _account("postgres")
    if bindir is None or user is False:
        yield None
        return
    owner = user if isinstance(user, str) else None
    with service_dir(owner) as d:
        _, cert, key = _server_files(certs, d, owner)
        data, log, port = d / "data", d / "postgres.log", free_port()
        run = _run_as(owner)
        subprocess.run([*run, str(bindir / "initdb"), "-D", str(data), "-U", "postgres",
                        "-A", "trust", "--no-sync"], check=True, capture_output=True,
                       timeout=120)
        with (data / "postgresql.conf").open("a") as conf:
            conf.write(_pg_conf(port, d, cert, key))
        (data / "pg_hba.conf").write_text(PG_HBA)
        ctl = [*run, str(bindir / "pg_ctl"), "-D", str(data), "-w", "-t", "60"]
        started = subprocess.run([*ctl, "-l", str(log), "start"], capture_output=True,
                                 timeout=90)
        if started.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed:\n{started.stdout!r}\n{_tail(log)}")
        try:
            yield port
        finally:
            subprocess.run([*ctl, "-m", "immediate", "stop"], capture_output=True, timeout=60)


def pg_url(port: int, ca: Path, database: str = "postgres", sslmode: str = "verify-full",
           host: str = "localhost") -> str:
    return (f"postgresql+psycopg://postgres@{host}:{port}/{database}"
            f"?sslmode={sslmode}&sslrootcert={ca}")


# -- RabbitMQ -------------------------------------------------------------------------
def rabbit_server() -> str | None:
    """The server script itself (Debian's /usr/sbin wrapper switches users via ``su``)."""
    direct = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
    return str(direct) if direct.exists() else shutil.which("rabbitmq-server")


def _rabbit_conf(port: int, ca: Path, cert: Path, key: Path) -> str:
    return (f"listeners.tcp = none\nlisteners.ssl.default = 127.0.0.1:{port}\n"
            f"ssl_options.cacertfile = {ca}\nssl_options.certfile = {cert}\n"
            f"ssl_options.keyfile = {key}\nssl_options.verify = verify_none\n"
            "ssl_options.fail_if_no_peer_cert = false\n")


def _rabbit_env(d: Path, owner: str | None, dist_port: int) -> dict[str, str]:
    home = pwd.getpwnam(owner).pw_dir if owner else os.environ.get("HOME", str(d))
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home,
            "LANG": "C.UTF-8",
            "RABBITMQ_NODENAME": f"hyphatls{uuid.uuid4().hex[:8]}@localhost",
            "RABBITMQ_DIST_PORT": str(dist_port),
            "RABBITMQ_CONFIG_FILE": str(d / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(d / "advanced.config"),
            "RABBITMQ_CONF_ENV_FILE": str(d / "rabbitmq-env.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(d / "enabled_plugins"),
            "RABBITMQ_MNESIA_BASE": str(d / "mnesia"), "RABBITMQ_LOG_BASE": str(d / "log"),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}"}


@contextmanager
def tls_rabbitmq(certs: Certs) -> Iterator[int | None]:
    """A second RabbitMQ node with one TLS listener on loopback and no plain one (the
    machine's own node, if any, is not touched: another node name, ports, directories).
    Its ``guest`` user may log in from loopback."""
    server, user = rabbit_server(), _account("rabbitmq")
    if server is None or user is False:
        yield None
        return
    owner = user if isinstance(user, str) else None
    with service_dir(owner) as d:
        ca, cert, key = _server_files(certs, d, owner)
        port, log = free_port(), d / "rabbit.out"
        (d / "rabbitmq.conf").write_text(_rabbit_conf(port, ca, cert, key))
        (d / "rabbitmq-env.conf").write_text("")
        (d / "enabled_plugins").write_text("[].\n")
        if owner is not None:
            for name in ("rabbitmq.conf", "rabbitmq-env.conf", "enabled_plugins"):
                shutil.chown(d / name, owner, owner)
        env = _rabbit_env(d, owner, free_port())
        with log.open("wb") as out:
            proc = subprocess.Popen([*_run_as(owner), "env", *[f"{k}={v}" for k, v in env.items()],
                                     server], cwd=d, env=env, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        try:
            _wait_listening(port, proc, log)
            yield port
        finally:
            _stop(proc, timeout=60.0)
