"""A parsed guard, and the cached one-shot :func:`evaluate`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from hypha_celery.guards._nodes import Node
from hypha_celery.guards._syntax import compile_tree

#: How many distinct expressions :func:`evaluate` keeps parsed.
CACHE_SIZE = 1024


@dataclass(frozen=True, slots=True)
class Guard:
    """A guard expression compiled once; :meth:`evaluate` it against many scopes.

    ``expression`` is the source text, ``paths`` the dotted paths it reads (prefixed:
    ``score`` is ``variables.score``; in order, without repeats), ``root`` the tree.
    Two guards are equal when their text is.
    """

    expression: str
    paths: tuple[str, ...] = field(compare=False)
    root: Node = field(compare=False, repr=False)

    def evaluate(self, scope: Mapping[str, object]) -> bool:
        """The guard's value over ``scope`` (``{"input", "variables", "metadata"}``).

        Never raises for a JSON-shaped scope: a path that is not there is missing."""
        return self.root.evaluate(scope)


def parse(expression: str) -> Guard:
    """Compile ``expression``.

    Raises:
        GuardError: it does not parse or breaks a limit; ``.position`` says where.
        UnsafeGuardPattern: a ``matches`` pattern is invalid, too long or unsafe.
    """
    root, paths = compile_tree(expression)
    return Guard(expression, paths, root)


_parse_cached = lru_cache(maxsize=CACHE_SIZE)(parse)


def evaluate(expression: str, scope: Mapping[str, object]) -> bool:
    """``parse(expression).evaluate(scope)``, parsing each distinct expression once."""
    if not isinstance(expression, str):  # unhashable input must not reach the cache
        return parse(expression).evaluate(scope)
    return _parse_cached(expression).evaluate(scope)
