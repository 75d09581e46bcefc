"""Guard expressions for FSM transitions: hypha's grammar, parsed once, no ``eval``.

::

    from hypha_celery.guards import parse

    guard = parse("input.ready == true && score >= 3 && matches(metadata.intent, '^ship')")
    guard.evaluate({"input": {"ready": True}, "variables": {"score": 3},
                    "metadata": {"intent": "ship it"}})        # True
    guard.paths   # ('input.ready', 'variables.score', 'metadata.intent')

The language:

* ``''``, ``true``, ``always``, ``default`` are true; ``false``, ``never`` are false;
  ``else:<guard>`` (only at the start) is the negation of ``<guard>``.
* ``a || b`` (loosest), ``a && b``, ``!a``, parentheses.
* ``exists(path)``: the path is there (a JSON ``null`` is there).
* ``matches(path, 'regex')``: :func:`re.search` on a string value (anything else, or a
  string longer than :data:`MAX_MATCH_INPUT_CHARS`, is false). The pattern is compiled
  with the guard and refused when longer than :data:`MAX_PATTERN_CHARS`, invalid, or
  unsafe (backreferences, lookarounds, nested quantifiers).
* ``path OP literal``, OP one of ``=== == !== != >= <= > <``. Equality is strict (no
  coercion: ``1 == true`` is false; ``1 == 1.0`` is true); ordering is false unless both
  sides are numbers (a bool is not a number). The left side must be a path.
* a bare path: its truthiness (missing, ``None``, ``False``, ``0``, ``''``, ``[]``,
  ``{}`` are false).

Literals: ``true``, ``false``, ``null``, numbers (``-2``, ``1.5e3``), ``'single'`` or
``"double"`` quoted strings (escapes ``\\\\ \\' \\" \\n \\t \\r``; another backslash is
kept as is, so ``'\\d+'`` is the regex ``\\d+``), else the bare word as a string.

Paths are dotted keys over ``{"input", "variables", "metadata"}``; one that starts with
anything else is read under ``variables``. A numeric segment indexes a list
(``items.0``). Only dict keys and list indices are read. A path with a segment that
starts with ``__``, or is ``prototype`` or ``constructor``, is always missing.

Every problem is a :class:`~hypha_celery.errors.GuardError` (``.expression``,
``.position``: the 0-based character offset); pattern problems are its subclass
:class:`~hypha_celery.errors.UnsafeGuardPattern`. Expressions are bounded to
:data:`MAX_EXPRESSION_CHARS` characters and 64 levels of ``(`` / ``!``.
"""

from hypha_celery.guards._guard import Guard, evaluate, parse
from hypha_celery.guards._limits import (
    MAX_EXPRESSION_CHARS,
    MAX_MATCH_INPUT_CHARS,
    MAX_PATTERN_CHARS,
)

__all__ = [
    # compile once, evaluate many
    "Guard",
    "parse",
    # one shot (cached parse)
    "evaluate",
    # limits
    "MAX_EXPRESSION_CHARS",
    "MAX_MATCH_INPUT_CHARS",
    "MAX_PATTERN_CHARS",
]
