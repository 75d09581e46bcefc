"""The console's Starlette application: :func:`create_app` (``hypha console`` serves it
with uvicorn). Pages are rendered on the server (Jinja2, autoescaped; plots and drawings
are SVG drawn in Python); the only script is ``static/console.js`` (a live run page's
rows, facts and drawing over server-sent events).

Every page and action runs as the signed-in principal's
:class:`~hypha_celery.client.scoped.ScopedHypha`: a user sees only their own runs,
agents and dead letters, and another user's run is "not found" exactly as a missing one;
actions (redrive, release, fail) need an admin and name it in the run's event."""

from __future__ import annotations

import gc
import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from hypha_celery.client.hypha import Hypha
from hypha_celery.client.scoped import ScopedHypha
from hypha_celery.console import auth, pages
from hypha_celery.console.config import ConsoleConfig
from hypha_celery.console.filters import BadQuery
from hypha_celery.console.live import live_rows
from hypha_celery.console.mcp import mcp as mcp_page
from hypha_celery.console.memorypage import memory_page
from hypha_celery.errors import AgentNotFound, HyphaError, NotPermitted, RunNotFound
from hypha_celery.principals import Principal

__all__ = ["Console", "create_app"]

log = logging.getLogger("hypha.console")
_HERE = Path(__file__).parent


class SignInNeeded(Exception):
    """No valid session or bearer token came with the request."""


class CsrfFailed(Exception):
    """A form without this session's CSRF token, or posted from another site."""


class Console:
    """The app's state: the Hypha it shows, its settings and its templates."""

    def __init__(self, hypha: Hypha, config: ConsoleConfig) -> None:
        self.hypha, self.config = hypha, config
        self.templates = Jinja2Templates(directory=str(_HERE / "templates"))
        self.templates.env.globals["show_content"] = config.show_content
        self.templates.env.filters["utc"] = _utc

    # -- who is asking -----------------------------------------------------------------
    def principal(self, request: Request) -> Principal | None:
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            return self.config.principal_for(header[7:].strip())
        return auth.open_session(self.config.secret, request.cookies.get(auth.COOKIE))

    def scoped(self, request: Request) -> ScopedHypha:
        principal = self.principal(request)
        if principal is None:
            raise SignInNeeded
        request.state.principal = principal
        return self.hypha.as_principal(principal)

    def check_form(self, request: Request, form: Any) -> None:
        """CSRF: a cookie session's form carries its token and comes from this site."""
        if request.headers.get("authorization", "").lower().startswith("bearer "):
            return
        origin = request.headers.get("origin")
        if origin and origin.rstrip("/") != str(request.base_url).rstrip("/"):
            raise CsrfFailed
        cookie = request.cookies.get(auth.COOKIE)
        if not auth.valid_csrf(self.config.secret, cookie, form.get("csrf")):
            raise CsrfFailed

    def render(self, request: Request, name: str, context: dict[str, Any],
               status: int = 200) -> Response:
        principal = getattr(request.state, "principal", None)
        cookie = request.cookies.get(auth.COOKIE)
        csrf = auth.csrf_token(self.config.secret, cookie) if cookie else ""
        response = self.templates.TemplateResponse(
            request, name, {"principal": principal, "csrf": csrf, **context},
            status_code=status)
        _secure_headers(response)
        return response


def _utc(ts: float | None) -> str:
    return "" if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _secure_headers(response: Response) -> None:
    response.headers["content-security-policy"] = (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
    response.headers["x-content-type-options"] = "nosniff"
    response.headers["referrer-policy"] = "same-origin"
    response.headers["cache-control"] = "no-store"


# -- error pages ---------------------------------------------------------------------------
def _error(console: Console, request: Request, status: int, title: str, message: str
           ) -> Response:
    return console.render(request, "error.html", {"title": title, "message": message},
                          status)


def _handlers(console: Console) -> dict[Any, Any]:
    async def sign_in(request: Request, exc: Exception) -> Response:
        browser = "text/html" in request.headers.get("accept", "")
        if request.method == "GET" and browser and "authorization" not in request.headers:
            return RedirectResponse(f"/login?next={_quote(request.url.path)}", 303)
        return _error(console, request, 401, "Sign-in needed",
                      "Sign in with a console token (or send Authorization: Bearer).")

    async def csrf(request: Request, exc: Exception) -> Response:
        return _error(console, request, 403, "Form refused",
                      "The form expired or came from another site: nothing was changed. "
                      "Reload the page and try again.")

    async def not_found(request: Request, exc: Exception) -> Response:
        return _error(console, request, 404, "Not found", _safe(exc) or "No such page.")

    async def not_permitted(request: Request, exc: Exception) -> Response:
        return _error(console, request, 403, "Not permitted", _safe(exc))

    async def bad_query(request: Request, exc: Exception) -> Response:
        return _error(console, request, 400, "Bad request", _safe(exc))

    async def refused(request: Request, exc: Exception) -> Response:
        return _error(console, request, 409, "Not done", _safe(exc))

    async def http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404:
            return _error(console, request, 404, "Not found", "No such page.")
        return _error(console, request, exc.status_code, str(exc.detail), "")

    async def crash(request: Request, exc: Exception) -> Response:
        ref = secrets.token_hex(4)
        log.error("console: %s on %s %s (ref %s)", type(exc).__name__, request.method,
                  request.url.path, ref)
        return _error(console, request, 500, "Something went wrong",
                      f"The console could not show this page (reference {ref}); nothing "
                      "was changed. The server log has the error's type under this "
                      "reference.")

    return {SignInNeeded: sign_in, CsrfFailed: csrf, RunNotFound: not_found,
            AgentNotFound: not_found, pages.DeadLetterNotFound: not_found,
            NotPermitted: not_permitted, BadQuery: bad_query,
            HyphaError: refused, HTTPException: http, Exception: crash, 500: crash}


def _safe(exc: Exception) -> str:
    """An error's message for a page: typed errors only, one line, bounded."""
    return " ".join(str(exc).split())[:300]


def _quote(path: str) -> str:
    from urllib.parse import quote

    return quote(path, safe="/")


def create_app(hypha: Hypha, config: ConsoleConfig | None = None) -> Starlette:
    """The console for ``hypha`` (settings from the environment when not given)."""
    console = Console(hypha, config or ConsoleConfig.from_env())
    routes = [
        Route("/healthz", _healthz),
        Route("/readyz", pages.readyz(console)),
        Route("/login", pages.login(console), methods=["GET", "POST"]),
        Route("/logout", pages.logout(console), methods=["POST"]),
        Route("/", pages.home(console)),
        Route("/runs", pages.runs(console)),
        Route("/runs/{run_id}", pages.run(console)),
        Route("/runs/{run_id}/live", live_rows(console)),
        Route("/agents", pages.agents(console)),
        Route("/sessions", pages.sessions(console)),
        Route("/memory", memory_page(console)),
        Route("/mcp", mcp_page(console)),
        Route("/agents/{name:path}", pages.agent(console)),
        Route("/dead-letters", pages.dead_letters(console)),
        Route("/dead-letters/{dead_letter_id:int}", pages.dead_letter(console)),
        Route("/dead-letters/{dead_letter_id:int}/redrive", pages.redrive(console),
              methods=["POST"]),
        Route("/quarantine/{run_id}/release", pages.release(console), methods=["POST"]),
        Route("/quarantine/{run_id}/fail", pages.fail(console), methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(_HERE / "static")), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers=_handlers(console), lifespan=_lifespan)
    app.state.console = console
    return app


@asynccontextmanager
async def _lifespan(app: Starlette) -> AsyncIterator[None]:
    """At startup, every object alive (modules, templates, the app) moves to the
    collector's permanent generation (``gc.freeze``): a page that builds thousands of
    events then pays for collections over its own objects only."""
    gc.collect()
    gc.freeze()
    yield


async def _healthz(request: Request) -> Response:
    return PlainTextResponse("ok")

