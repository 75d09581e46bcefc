"""The console in a real headless browser: Debian's chromium and chromedriver
(``scripts/install-browser``) driven by selenium, against the real console served by
uvicorn on a free loopback port, showing runs that a real ``celery worker`` process
executes (Redis broker on a claimed database, a fresh PostgreSQL store both read).

A missing chromium, Redis or PostgreSQL is :func:`tests.services.unavailable` (a
failure under ``CI=true``). Selenium Manager never downloads anything: ``SE_OFFLINE``
is set and the driver and browser paths are given."""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hypha_celery.client.hypha import Hypha
from hypha_celery.principals import Principal
from hypha_celery.testing.worker import WorkerProcess
from tests import services
from tests.integration.helpers import REPO, claim_db, release_db

BROWSER = "/usr/bin/chromium"
DRIVER = "/usr/bin/chromedriver"
APP = "tests.console.browser.app:build"
#: This machine's network is closed: without these chromium waits on connections
#: (component updates, sync, QUIC probes) and the first page load hangs.
CHROMIUM_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu",
                  "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--disable-extensions", "--window-size=1280,900")
#: Upper bound for anything a browser test waits on.
WAIT = 30.0


@dataclass
class Console:
    """The console being served: its address, its client and who may sign in."""

    url: str
    hypha: Hypha
    worker: WorkerProcess
    admin_token: str
    user_token: str

    def wait_status(self, run_id: str, *statuses: str, timeout: float = WAIT) -> str:
        end = time.monotonic() + timeout
        while True:
            row = self.hypha.store.get(run_id)
            if row is not None and row["status"] in statuses:
                return str(row["status"])
            if time.monotonic() > end:
                raise AssertionError(f"run {run_id} is {row and row['status']}, not "
                                     f"{statuses} after {timeout}s\n--- worker log ---\n"
                                     f"{self.worker.log()}")
            time.sleep(0.05)


@pytest.fixture(scope="package")
def console_store() -> Iterator[str]:
    """A fresh PostgreSQL database: the console's runs list shows this package's runs
    only (the session's shared store holds every other test's)."""
    with services.postgres_server() as url:
        if url is None:
            services.unavailable("PostgreSQL (127.0.0.1:5432, database 'test')")
        assert url is not None
        yield url


@pytest.fixture(scope="package")
def console_broker(redis_base: str) -> Iterator[str]:
    """A Redis database no other test session uses: queue names are fixed."""
    token = uuid.uuid4().hex
    url = claim_db(redis_base, token)
    try:
        yield url
    finally:
        release_db(url, token)


@pytest.fixture(scope="package")
def console_worker(console_broker: str, console_store: str,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    """A real prefork ``celery worker`` of :data:`APP`; ``.client`` is the console's Hypha."""
    log = tmp_path_factory.mktemp("console-worker") / "worker.log"
    worker = WorkerProcess(APP, broker_url=console_broker, store_url=console_store,
                           log=log, cwd=REPO, concurrency=4)
    try:
        yield worker.start()
    finally:
        worker.stop()


@pytest.fixture(scope="package")
def console(console_worker: WorkerProcess) -> Iterator[Console]:
    """``create_app`` served by uvicorn in a thread on a free 127.0.0.1 port."""
    import uvicorn

    from hypha_celery.console import ConsoleConfig, create_app

    admin, user = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    app = create_app(console_worker.client, ConsoleConfig(tokens={
        admin: Principal.admin("ops"), user: Principal.user("alice")}))
    port = services.free_port()
    server = uvicorn.Server(uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", lifespan="off", ws="none",
        http="h11", timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, name="console-uvicorn", daemon=True)
    thread.start()
    end = time.monotonic() + WAIT
    while not server.started:
        if not thread.is_alive() or time.monotonic() > end:
            raise RuntimeError("the console's uvicorn did not start")
        time.sleep(0.02)
    try:
        yield Console(f"http://127.0.0.1:{port}", console_worker.client, console_worker,
                      admin, user)
    finally:
        server.should_exit = True
        thread.join(15)


def chrome_options(profile: str) -> Any:
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = BROWSER
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    return options


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    """A headless chromium (selenium ``webdriver.Chrome``) with a fresh profile."""
    if not (os.access(BROWSER, os.X_OK) and os.access(DRIVER, os.X_OK)):
        services.unavailable(f"{BROWSER} and {DRIVER} (Debian's chromium and "
                             "chromium-driver: scripts/install-browser)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    offline = os.environ.get("SE_OFFLINE")
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager: never a download
    profile = tempfile.mkdtemp(prefix="hypha-chromium-")
    try:
        driver = webdriver.Chrome(service=Service(DRIVER), options=chrome_options(profile))
        driver.set_page_load_timeout(WAIT)
        try:
            yield driver
        finally:
            driver.quit()
    finally:
        shutil.rmtree(profile, ignore_errors=True)
        if offline is None:
            os.environ.pop("SE_OFFLINE", None)
        else:
            os.environ["SE_OFFLINE"] = offline


@pytest.fixture(scope="package")
def screenshots_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the screenshot test writes: ``HYPHA_SCREENSHOTS_DIR`` (``docs/images`` to
    refresh the committed ones), else a temporary directory."""
    named = os.environ.get("HYPHA_SCREENSHOTS_DIR", "").strip()
    if named:
        path = Path(named) if os.path.isabs(named) else REPO / named
        path.mkdir(parents=True, exist_ok=True)
        return path
    return tmp_path_factory.mktemp("screenshots")
