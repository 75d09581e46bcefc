"""Problem paths inside a pack document: ``workflows[0].transitions[2].guard``,
``nodes.refund.tool``."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

#: ``(path, message)``; an empty path is the whole document.
Problem = tuple[str, str]

_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")


def path(*parts: str | int) -> str:
    """``path("workflows", 0, "guard")`` -> ``workflows[0].guard``; a key that is not a
    plain name is quoted: ``tool_profiles["a.b"]``."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN.match(part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part, ensure_ascii=False)}]"
    return out


def under(prefix: str, problems: Sequence[Problem]) -> list[Problem]:
    """``problems`` whose paths are relative to ``prefix``."""
    return [(f"{prefix}.{p}" if p and not p.startswith("[") else f"{prefix}{p}", m)
            for p, m in problems]
