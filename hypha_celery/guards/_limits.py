"""The guard language's bounds: hypha's three, plus a nesting depth."""

from __future__ import annotations

#: Longest guard expression accepted, in characters.
MAX_EXPRESSION_CHARS = 1024

#: Longest ``matches(path, 'pattern')`` pattern accepted, in characters.
MAX_PATTERN_CHARS = 128

#: ``matches`` on a longer string is false: the regex never runs on it.
MAX_MATCH_INPUT_CHARS = 4096

#: Deepest nesting of ``(`` and ``!`` accepted (keeps the parser off the recursion limit).
MAX_DEPTH = 64
