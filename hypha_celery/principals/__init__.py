"""Principals: who a client acts for.

A :class:`Principal` is a plain value an HTTP layer can carry (``to_json`` /
``from_json``): a *user* sees and acts on only what carries its user id (runs, sessions,
agents, reviews, dead letters); an *admin* is an operator who sees everything and whose
name goes into the events of what it does. ``Hypha.as_user`` / ``Hypha.as_principal``
bind one to a client (:class:`~hypha_celery.client.scoped.ScopedHypha`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

from pydantic import ConfigDict, TypeAdapter, ValidationError

from hypha_celery.errors import InvalidPrincipal

__all__ = ["ID_MAX", "Principal", "Role"]

#: Characters of a principal id. No ``/`` (it separates an owner from an agent's name)
#: and nothing a terminal or a log line would render differently.
_ID = re.compile(r"[A-Za-z0-9._@+:-]+")
#: Longest principal id (the runs table's ``user_id`` column holds 200).
ID_MAX = 128


class Role(StrEnum):
    USER = "user"
    ADMIN = "admin"


@dataclass(frozen=True)
class Principal:
    """``Principal.user("alice")`` or ``Principal.admin("ops")``."""

    role: Role
    id: str

    #: Read by :data:`_PRINCIPAL`: exactly ``role`` and ``id``.
    __pydantic_config__: ClassVar[ConfigDict] = ConfigDict(extra="forbid")

    def __post_init__(self) -> None:
        if not isinstance(self.role, Role):
            raise InvalidPrincipal(f"a principal's role is 'user' or 'admin', got {self.role!r}")
        check_id(self.id)

    @classmethod
    def user(cls, user_id: str) -> Principal:
        return cls(Role.USER, user_id)

    @classmethod
    def admin(cls, name: str) -> Principal:
        return cls(Role.ADMIN, name)

    @property
    def is_admin(self) -> bool:
        return self.role is Role.ADMIN

    @property
    def owner(self) -> str | None:
        """The user id whose data this principal sees; None for an admin (all of it)."""
        return None if self.is_admin else self.id

    def to_json(self) -> dict[str, str]:
        """``{"role": "user" | "admin", "id": ...}``."""
        json: dict[str, str] = _PRINCIPAL.dump_python(self, mode="json")
        return json

    @classmethod
    def from_json(cls, value: object) -> Principal:
        """The inverse of :meth:`to_json`; :class:`InvalidPrincipal` for anything else."""
        try:
            return _PRINCIPAL.validate_python(value)
        except ValidationError as exc:
            raise InvalidPrincipal(_problem(exc)) from None

    def __str__(self) -> str:
        return f"{self.role.value}:{self.id}"


_PRINCIPAL = TypeAdapter(Principal)


def _problem(exc: ValidationError) -> str:
    """What :meth:`Principal.from_json` says: the id's problem, an unknown role, or the
    shape it wants."""
    first = exc.errors()[0]
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, InvalidPrincipal):  # raised by check_id
        return str(cause)
    if first["loc"] == ("role",) and first["type"] == "enum":
        return f"unknown principal role {first['input']!r}"
    return "a principal is {'role': 'user' | 'admin', 'id': str}"


def check_id(value: Any) -> str:
    """``value`` if it is a valid principal id, else :class:`InvalidPrincipal`."""
    if not isinstance(value, str) or not value:
        raise InvalidPrincipal("a principal id is a non-empty string")
    if len(value) > ID_MAX or _ID.fullmatch(value) is None:
        raise InvalidPrincipal(
            f"a principal id has at most {ID_MAX} of the characters A-Z a-z 0-9 . _ @ + : -")
    return value
