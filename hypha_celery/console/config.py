"""The console's settings: who may sign in (tokens mapped to principals), where it
listens, whether content is shown, where replay fixtures are.

From the environment (:meth:`ConsoleConfig.from_env`):

* ``HYPHA_CONSOLE_TOKENS``: ``admin:ops=TOKEN,user:alice=TOKEN2`` -- each token signs in
  as that principal (an admin is an operator: every run, and the actions);
* ``HYPHA_CONSOLE_TOKENS_FILE``: the same pairs, one a line (``#`` comments), for a
  mounted secret; both may be given;
* ``HYPHA_CONSOLE_SECRET``: the key that signs session cookies and CSRF tokens (at
  least 32 characters; default: random per process, so sessions end with a restart and
  replicas behind one address need it set);
* ``HYPHA_CONSOLE_SHOW_CONTENT=1``: show run input, state, node output and model output
  to admins (off: keys, types and sizes only; users never see content of others, and
  see their own only when this is on);
* ``HYPHA_CONSOLE_FIXTURES``: a directory of replay fixtures a run page compares with.

Tokens never appear in ``repr``, logs or pages.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hypha_celery.errors import ConsoleConfigError, InvalidPrincipal
from hypha_celery.principals import Principal, Role

__all__ = ["MIN_SECRET", "MIN_TOKEN", "ConsoleConfig", "parse_principal", "parse_tokens"]

#: Shortest token accepted: shorter ones are guessable.
MIN_TOKEN = 16
#: Shortest cookie-signing secret accepted.
MIN_SECRET = 32


def parse_principal(text: str) -> Principal:
    """``admin:ops`` / ``user:alice`` -> a :class:`Principal`."""
    role, sep, pid = text.strip().partition(":")
    if not sep or role not in (Role.ADMIN.value, Role.USER.value):
        raise ConsoleConfigError(f"principal {text.strip()[:40]!r} is not admin:ID or user:ID")
    try:
        return Principal.admin(pid) if role == Role.ADMIN.value else Principal.user(pid)
    except InvalidPrincipal as exc:
        raise ConsoleConfigError(f"principal {text.strip()[:40]!r}: {exc}") from None


def parse_tokens(text: str, *, source: str = "HYPHA_CONSOLE_TOKENS") -> dict[str, Principal]:
    """``PRINCIPAL=TOKEN`` pairs separated by commas or lines -> token -> principal.
    A token shorter than :data:`MIN_TOKEN` or given twice is refused (the message
    names the principal, never the token)."""
    found: dict[str, Principal] = {}
    for n, item in enumerate(text.replace("\n", ",").split(","), 1):
        item = item.split("#", 1)[0].strip()
        if not item:
            continue
        who, sep, token = item.partition("=")
        if not sep:
            raise ConsoleConfigError(f"{source}: entry {n} is not PRINCIPAL=TOKEN")
        principal, token = parse_principal(who), token.strip()
        if len(token) < MIN_TOKEN:
            raise ConsoleConfigError(f"{source}: the token of {principal.role}:{principal.id} "
                                     f"is shorter than {MIN_TOKEN} characters")
        if token in found:
            raise ConsoleConfigError(f"{source}: a token is given twice")
        found[token] = principal
    return found


@dataclass(frozen=True)
class ConsoleConfig:
    """``tokens``: token -> principal. ``secret`` signs cookies and CSRF tokens."""

    tokens: Mapping[str, Principal] = field(default_factory=dict, repr=False)
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)
    show_content: bool = False
    fixtures: Path | None = None
    #: Seconds a sign-in lasts.
    session_seconds: int = 12 * 3600

    def __post_init__(self) -> None:
        if len(self.secret) < MIN_SECRET:
            raise ConsoleConfigError(f"HYPHA_CONSOLE_SECRET must be at least {MIN_SECRET} "
                                     "characters")
        if self.fixtures is not None and not self.fixtures.is_dir():
            raise ConsoleConfigError(f"HYPHA_CONSOLE_FIXTURES: {self.fixtures} is not a "
                                     "directory")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ConsoleConfig:
        env = os.environ if env is None else env
        tokens = parse_tokens(env.get("HYPHA_CONSOLE_TOKENS", ""))
        if path := env.get("HYPHA_CONSOLE_TOKENS_FILE", "").strip():
            tokens.update(parse_tokens(_read(path), source=path))
        secret = env.get("HYPHA_CONSOLE_SECRET", "").encode()
        fixtures = env.get("HYPHA_CONSOLE_FIXTURES", "").strip()
        return cls(tokens=tokens, secret=secret or secrets.token_bytes(32),
                   show_content=env.get("HYPHA_CONSOLE_SHOW_CONTENT", "") in ("1", "true"),
                   fixtures=Path(fixtures) if fixtures else None)

    def with_token(self, principal: Principal) -> tuple[ConsoleConfig, str]:
        """A copy that also accepts a new random token for ``principal`` (``hypha
        console`` with no tokens configured makes one for the operator)."""
        token = secrets.token_urlsafe(24)
        return ConsoleConfig({**self.tokens, token: principal}, self.secret,
                             self.show_content, self.fixtures, self.session_seconds), token

    def principal_for(self, token: str) -> Principal | None:
        """The principal a token signs in as; every configured token is compared in
        constant time, so the time taken does not tell which one nearly matched."""
        given = hashlib.sha256(token.encode()).digest()
        found = None
        for known, principal in self.tokens.items():
            if secrets.compare_digest(given, hashlib.sha256(known.encode()).digest()):
                found = principal
        return found


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise ConsoleConfigError(f"HYPHA_CONSOLE_TOKENS_FILE: cannot read {path}: "
                                 f"{exc.strerror}") from None
