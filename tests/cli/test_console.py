"""``hypha console``: its settings checked before it serves, one readable line for bad
ones, and a real server that prints a sign-in link when no tokens are set."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import requests

from tests import services
from tests.cli.helpers import HYPHA, ROOT, assert_one_line_error, clean_env, hypha


def test_dry_run_says_what_it_would_serve(tmp_path: Path) -> None:
    env = clean_env(HYPHA_CONSOLE_TOKENS="admin:ops=" + "t" * 20 + ",user:alice=" + "u" * 20)
    proc = hypha("console", "--dry-run", "--port", "9999", "--fixtures", str(tmp_path), env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (
        f"hypha console on http://127.0.0.1:9999: 2 token(s) (admin:ops, user:alice); "
        f"content hidden; fixtures {tmp_path}")
    assert "t" * 20 not in proc.stdout + proc.stderr
    wide = hypha("console", "--dry-run", "--host", "0.0.0.0", env=clean_env())
    assert wide.returncode == 0 and "beyond this machine" in wide.stderr


def test_bad_settings_are_one_line(tmp_path: Path) -> None:
    short = hypha("console", "--dry-run", env=clean_env(HYPHA_CONSOLE_TOKENS="user:a=short"))
    assert "shorter than 16" in assert_one_line_error(short)
    secret = hypha("console", "--dry-run", env=clean_env(HYPHA_CONSOLE_SECRET="x"))
    assert "at least 32" in assert_one_line_error(secret)
    user = hypha("--as-user", "alice", "console", "--dry-run", env=clean_env())
    assert "the operator's" in assert_one_line_error(user)
    missing = hypha("console", "--fixtures", str(tmp_path / "nope"), env=clean_env())
    assert "does not exist" in assert_one_line_error(missing, code=2)
    port = hypha("console", "--port", "0", env=clean_env())
    assert "--port" in assert_one_line_error(port, code=2)


def test_it_serves_and_prints_a_sign_in_link(tmp_path: Path) -> None:
    port = services.free_port()
    env = clean_env(HYPHA_STORE_URL=f"sqlite:///{tmp_path / 'h.db'}")
    proc = subprocess.Popen([HYPHA, "console", "--port", str(port)], env=env, cwd=ROOT,
                            stderr=subprocess.PIPE, text=True)
    try:
        link = None
        assert proc.stderr is not None
        for line in proc.stderr:
            if (found := re.match(r"sign in: (http://\S+)", line)) is not None:
                link = found.group(1)
                break
        assert link is not None and link.startswith(f"http://127.0.0.1:{port}/login?token=")
        session = requests.Session()
        for _ in range(100):
            try:
                r = session.get(link, timeout=5)
                break
            except requests.ConnectionError:
                time.sleep(0.1)
        assert r.status_code == 200 and r.url == f"http://127.0.0.1:{port}/"
        assert "<h1>Overview</h1>" in r.text  # the first page
        assert 'id="principal">admin:console<' in r.text
        assert requests.get(f"http://127.0.0.1:{port}/runs", timeout=5,
                            allow_redirects=False).status_code == 401  # no browser: no redirect
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stderr is not None:
            proc.stderr.close()


def test_behind_a_tls_proxy_the_cookie_is_secure() -> None:
    """What ``--forwarded-allow-ips`` turns on: uvicorn's proxy headers, believed from
    the named proxies, make the request https, so the session cookie is ``Secure``."""
    from starlette.testclient import TestClient
    from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

    from hypha_celery.console import ConsoleConfig, create_app
    from hypha_celery.principals import Principal
    from tests.runtime.support import embedded

    token = "t" * 20
    hypha = embedded("sqlite://")
    try:
        app = create_app(hypha, ConsoleConfig(tokens={token: Principal.admin("ops")}))
        for trusted, secure in (("*", True), ("10.9.9.9", False)):
            proxied = ProxyHeadersMiddleware(app, trusted_hosts=trusted)
            c = TestClient(proxied, client=("10.0.0.1", 5000))
            r = c.post("/login", data={"token": token}, follow_redirects=False,
                       headers={"x-forwarded-proto": "https"})
            assert ("Secure" in r.headers["set-cookie"]) is secure
    finally:
        hypha.close()
