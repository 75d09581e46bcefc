"""Signing in, sessions and CSRF.

A token (from :class:`~.config.ConsoleConfig`) signs in once: the console then keeps a
session cookie, ``<role>:<id>|<expiry>|<mac>`` signed with the console's secret
(HMAC-SHA256), ``HttpOnly`` and ``SameSite=Strict``. Scripts may instead send
``Authorization: Bearer TOKEN`` on every request.

Every form carries a CSRF token, the HMAC of the session cookie under a key of its own;
a POST whose token does not match (or whose ``Origin`` is another site) changes
nothing. Bearer requests need none: a browser never adds that header by itself.
"""

from __future__ import annotations

import hashlib
import hmac
import time

from hypha_celery.errors import InvalidPrincipal
from hypha_celery.principals import Principal, Role

__all__ = ["COOKIE", "csrf_token", "open_session", "seal_session", "valid_csrf"]

#: The session cookie's name.
COOKIE = "hypha_console"


def _mac(secret: bytes, purpose: str, text: str) -> str:
    return hmac.new(secret, f"{purpose}|{text}".encode(), hashlib.sha256).hexdigest()


def seal_session(secret: bytes, principal: Principal, seconds: int,
                 now: float | None = None) -> str:
    """The cookie value for ``principal``, good for ``seconds``."""
    expiry = int((time.time() if now is None else now) + seconds)
    body = f"{principal.role.value}:{principal.id}|{expiry}"
    return f"{body}|{_mac(secret, 'session', body)}"


def open_session(secret: bytes, cookie: str | None, now: float | None = None
                 ) -> Principal | None:
    """The principal of a valid, unexpired cookie; None for anything else (missing,
    forged, expired, malformed)."""
    if not cookie or cookie.count("|") != 2:
        return None
    body, mac = cookie.rsplit("|", 1)
    if not hmac.compare_digest(mac, _mac(secret, "session", body)):
        return None
    who, expiry = body.split("|")
    role, _, pid = who.partition(":")
    if not expiry.isdigit() or int(expiry) < (time.time() if now is None else now):
        return None
    try:
        return Principal.admin(pid) if role == Role.ADMIN.value else Principal.user(pid)
    except InvalidPrincipal:
        return None


def csrf_token(secret: bytes, cookie: str) -> str:
    """The CSRF token of the session ``cookie``."""
    return _mac(secret, "csrf", cookie)


def valid_csrf(secret: bytes, cookie: str | None, given: str | None) -> bool:
    return bool(cookie and given) and hmac.compare_digest(
        csrf_token(secret, cookie or ""), given or "")
