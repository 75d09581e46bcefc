"""The console's pages and actions, one function each (made by a factory that closes
over the :class:`~hypha_celery.console.app.Console`). Plain ``def`` endpoints: Starlette
runs them in its thread pool, where the store's blocking calls belong."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from hypha_celery.console import auth
from hypha_celery.console.content import shown
from hypha_celery.console.filters import BadQuery, parse_query
from hypha_celery.console.messages import message_rows
from hypha_celery.console.overview import overview
from hypha_celery.console.runpage import DEAD_LETTERS_SHOWN, TIMELINE_PAGE, diff_rows, run_page
from hypha_celery.errors import AgentNotFound, NotPermitted, RunNotFound
from hypha_celery.events import Event
from hypha_celery.events import payloads as ev
from hypha_celery.replay._store import FileFixtureStore
from hypha_celery.store import RunFilter, SessionRow

if TYPE_CHECKING:
    from hypha_celery.console.app import Console

__all__ = ["DeadLetterNotFound", "TurnRow", "agent", "agents", "dead_letter", "dead_letters",
           "fail", "home", "login", "logout", "readyz", "redrive", "release", "run", "runs",
           "turn_row"]

Endpoint = Callable[[Request], Any]
#: Fixed notices an action's redirect may ask a page to show (never free text).
#: The most sessions the sessions page lists (newest first).
SESSIONS_SHOWN = 200
NOTICES = {"redriven": "Dead letter redriven.", "released": "Run released: its node runs "
           "again.", "failed": "Run failed by you.", "signed-out": "Signed out."}


class DeadLetterNotFound(LookupError):
    """No dead letter of that id among the principal's (a 404 page)."""


def _int(request: Request, name: str) -> int:
    value = request.query_params.get(name, "0") or "0"
    if not value.isdigit() or len(value) > 18:
        raise BadQuery(name, "not a whole number")
    return int(value)


def run_id_of(request: Request) -> str:
    """The path's run id; one no run can have (too long, not printable) is not found
    (it never reaches the store)."""
    run_id = str(request.path_params["run_id"])
    if not run_id or len(run_id) > 64 or not run_id.isprintable():
        raise RunNotFound(f"no run {run_id[:64]!r} in the event store")
    return run_id


def _notice(request: Request) -> str:
    return NOTICES.get(request.query_params.get("done", ""), "")


def readyz(console: Console) -> Endpoint:
    def page(request: Request) -> Response:
        console.hypha.store.ensure_schema()
        return PlainTextResponse("ready")
    return page


def _next(request: Request, form: Any) -> str:
    target = str(form.get("next") or request.query_params.get("next") or "/")
    return target if target.startswith("/") and not target.startswith("//") else "/"


def login(console: Console) -> Endpoint:
    def page(request: Request) -> Response:
        return console.render(request, "login.html", {"next": _next(request, {}),
                                                      "failed": False,
                                                      "notice": _notice(request)})

    async def endpoint(request: Request) -> Response:
        form: Any = await request.form() if request.method == "POST" else {}
        token = form.get("token") or request.query_params.get("token")
        if request.method == "GET" and not token:
            return page(request)
        principal = console.config.principal_for(str(token or ""))
        if principal is None:
            return console.render(request, "login.html",
                                  {"next": _next(request, form), "failed": True}, 401)
        response = RedirectResponse(_next(request, form), 303)
        response.set_cookie(auth.COOKIE, auth.seal_session(
            console.config.secret, principal, console.config.session_seconds),
            max_age=console.config.session_seconds, httponly=True, samesite="strict",
            secure=request.url.scheme == "https", path="/")
        return response
    return endpoint


def logout(console: Console) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        console.check_form(request, await request.form())
        response = RedirectResponse("/login?done=signed-out", 303)
        response.delete_cookie(auth.COOKIE, path="/")
        return response
    return endpoint


def home(console: Console) -> Endpoint:
    """The first page: the last hour's figures (:mod:`.overview`)."""
    def page(request: Request) -> Response:
        hypha = console.scoped(request)
        return console.render(request, "overview.html", {
            "page": overview(hypha, console.hypha, time.time())})
    return page


def runs(console: Console) -> Endpoint:
    def page(request: Request) -> Response:
        hypha = console.scoped(request)
        query = parse_query(request.query_params)
        rows = hypha.list_runs(query.filter(), limit=query.limit, before=query.before)
        more = len(rows) == query.limit
        return console.render(request, "runs.html", {
            "query": query, "rows": rows,
            "next_link": query.link(rows[-1].id) if rows and more else None,
            "notice": _notice(request)})
    return page


def _fixtures(console: Console) -> FileFixtureStore | None:
    return None if console.config.fixtures is None else FileFixtureStore(
        console.config.fixtures)


def run(console: Console) -> Endpoint:
    def page(request: Request) -> Response:
        hypha = console.scoped(request)
        run_id = run_id_of(request)
        view = hypha.store.get(run_id)
        after, content = _int(request, "after"), console.config.show_content
        window = hypha.store.events(run_id, after, TIMELINE_PAGE)
        prior = islice(hypha.store.history(run_id, batch=max(after, 1)), after)
        letters = hypha.store.dead_letters(status=None, run_id=run_id,
                                           limit=DEAD_LETTERS_SHOWN)
        data = run_page(view, prior, window, content=content, letters=letters)
        fixtures, chosen = _fixtures(console), request.query_params.get("fixture", "")
        if chosen and fixtures is not None:
            fixture = fixtures.load(chosen)
            if fixture is None:
                raise BadQuery("fixture", f"no fixture {chosen[:80]!r}")
            data.diff = diff_rows(fixture, hypha.store.events(run_id), content)
        return console.render(request, "run.html", {
            "page": data, "run_id": run_id, "fixture": chosen,
            "fixture_ids": [] if fixtures is None else fixtures.names(),
            "messages": [] if view is None else message_rows(hypha.store, run_id,
                                                             content=content),
            "notice": _notice(request), "page_size": TIMELINE_PAGE})
    return page


def agents(console: Console) -> Endpoint:
    def page(request: Request) -> Response:
        hypha = console.scoped(request)
        found = []
        for name in sorted(hypha.agents.list())[:500]:
            try:
                found.append((name, hypha.agents.runtime_snapshot(name)))
            except AgentNotFound:
                continue  # stopped between the list and the read
        return console.render(request, "agents.html", {"agents": found})
    return page


@dataclass(frozen=True, slots=True)
class SessionLine:
    """One row of the sessions page (metadata shown only with ``show_content``)."""

    user_id: str | None
    session_id: str
    profile: str
    runs: int
    first_run_id: str
    created: str
    status: str
    metadata: str
    query: str  # the runs page filtered to this session


def session_line(s: SessionRow) -> SessionLine:
    profile = "" if s.profile is None else (f"{s.pack}:{s.profile}" if s.pack else s.profile)
    query = urlencode({"session": s.session_id, **({"user": s.user_id} if s.user_id else {})})
    return SessionLine(s.user_id, s.session_id, profile, s.runs, s.first_run_id,
                       time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(s.created_at)),
                       s.status.value, json.dumps(s.metadata, sort_keys=True), query)


def sessions(console: Console) -> Endpoint:
    def page(request: Request) -> Response:
        hypha = console.scoped(request)
        rows = [session_line(s) for s in hypha.sessions(limit=SESSIONS_SHOWN)]
        return console.render(request, "sessions.html", {
            "sessions": rows, "limit": SESSIONS_SHOWN,
            "show_content": console.config.show_content})
    return page


def agent(console: Console) -> Endpoint:
    def page(request: Request) -> Response:
        hypha = console.scoped(request)
        name = str(request.path_params["name"])
        if len(name) > 300 or not name.isprintable():
            raise AgentNotFound(f"no live agent {name[:64]!r}")
        info = hypha.agents.whereis(name)
        if info is None:
            raise AgentNotFound(f"no live agent {name!r}")
        snapshot = hypha.agents.runtime_snapshot(name)
        status = hypha.agents.status(name)
        # the incarnation's events (access was checked by the scoped whereis above)
        turns = [turn_row(e) for e in console.hypha.store.events(info.incarnation)
                 if e.type.startswith(AGENT_PAGE_KINDS)][-200:]
        return console.render(request, "agent.html", {
            "name": name, "info": info, "snapshot": snapshot, "turns": turns,
            "state": shown(status.agent_state, console.config.show_content)})
    return page


@dataclass(frozen=True, slots=True)
class TurnRow:
    """A line of an agent page's turns table: what its event's payload model carries."""

    seq: int
    ts: float
    type: str
    ref: str
    detail: str


def turn_row(e: Event) -> TurnRow:
    """The request a turn event is about, and its origin and attempt (a failed turn's
    reason too; a cancelled request's, a stop's), or the agent's kind for its start."""
    body = e.body
    ref, detail = "", ""
    match body:
        case ev.AgentTurnStarted() | ev.AgentTurnCompleted() | ev.AgentTurnLateResult():
            ref, detail = body.ref, f"{body.origin}, attempt {body.attempt}"
        case ev.AgentTurnFailed():
            ref, detail = body.ref, f"{body.origin}, attempt {body.attempt}: {body.reason}"
        case ev.AgentRequestCancelled():
            ref, detail = body.ref, body.reason or ""
        case ev.AgentStopped():
            detail = body.reason
        case ev.AgentStarted():
            detail = body.kind_
        case _:
            detail = _fact_detail(body)
    return TurnRow(e.seq, e.ts, e.type, ref, detail)


def _fact_detail(body: ev.Payload) -> str:
    """What went into a turn, as the agent page's detail: sizes and references."""
    detail = ""
    match body:
        case ev.ContextBuildCompleted():
            sizes = ", ".join(f"{k} {v}" for k, v in body.tokens_by_source.items())
            detail = (f"{body.tokens} tokens ({sizes}), {body.items} items, {body.dropped} "
                      f"dropped, {body.context_hash[:19]}")
        case ev.ContextBuildFailed():
            detail = body.error
        case ev.ContextCompacted():
            detail = (f"{body.source}: {body.strategy} {body.items_before} -> "
                      f"{body.items_after} items")
        case ev.SkillLoaded() | ev.SkillCompleted():
            detail = f"{body.skill_id}@{body.version or '-'}"
        case ev.SkillFailed():
            detail = f"{body.skill_id}: {body.reason}"
        case ev.MemoryReadCompleted():
            detail = ", ".join(f"{r['id']}@{r['revision']}" for r in body.records or ())
        case ev.ThinkingCompleted():
            detail = f"{body.chars} chars"
    return detail


#: What an agent page lists of its incarnation's log: the turns, and what went into each
#: (context, skills, memory reads, thinking: sizes and references).
AGENT_PAGE_KINDS = ("agent.", "context.", "skill.", "memory.read.", "thinking.")


def dead_letters(console: Console) -> Endpoint:
    def page(request: Request) -> Response:
        hypha = console.scoped(request)
        show_all = request.query_params.get("all") == "1"
        letters = hypha.dead_letters(status=None if show_all else "open", limit=200)
        quarantined = hypha.list_runs(_quarantined(), limit=200)
        return console.render(request, "dead.html", {
            "letters": letters, "quarantined": quarantined, "show_all": show_all,
            "notice": _notice(request)})
    return page


def dead_letter(console: Console) -> Endpoint:
    """One dead letter (``hypha dlq show``), of the principal's runs: a run's page links
    here; its arguments and error message shown only with content on."""
    def page(request: Request) -> Response:
        hypha = console.scoped(request)
        letter_id = int(request.path_params["dead_letter_id"])
        record = hypha.store.dead_letter(letter_id)
        if record is None:
            raise DeadLetterNotFound(f"no dead letter {letter_id}")
        error = record["error"] if isinstance(record.get("error"), dict) else {}
        return console.render(request, "dead_letter.html", {
            "d": record, "args": shown(record["args"], console.config.show_content),
            "error_type": str(error.get("type", "")),
            "error_message": str(error.get("message", ""))})
    return page


def _quarantined() -> RunFilter:
    return RunFilter(status="quarantined")


def _operator(console: Console, request: Request) -> Any:
    hypha = console.scoped(request)
    if not hypha.principal.is_admin:
        raise NotPermitted("redrive, release and fail are an operator's actions: sign in "
                           "with an admin token")
    return hypha


def _action(console: Console, act: Callable[[Any, Request], Any], done: str) -> Endpoint:
    """A POST an operator makes: the form checked, the principal an admin, ``act``
    done in the thread pool, then back to the dead letters with notice ``done``."""
    async def endpoint(request: Request) -> Response:
        console.check_form(request, await request.form())
        hypha = await run_in_threadpool(_operator, console, request)
        await run_in_threadpool(act, hypha, request)
        return RedirectResponse(f"/dead-letters?done={done}", 303)
    return endpoint


def redrive(console: Console) -> Endpoint:
    return _action(console, lambda hypha, request: hypha.redrive(
        request.path_params["dead_letter_id"]), "redriven")


def release(console: Console) -> Endpoint:
    return _action(console, lambda hypha, request: hypha.release(run_id_of(request)),
                   "released")


def fail(console: Console) -> Endpoint:
    return _action(console, lambda hypha, request: hypha.fail_quarantined(
        run_id_of(request), "failed by an operator in the console"), "failed")
