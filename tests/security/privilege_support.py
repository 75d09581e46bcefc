"""The least-privilege recipes of docs/security.md, read from the page itself.

``## Least privilege`` holds one ``### <service>: ...`` subsection per service, each with
fenced blocks (```sql, ```bash). The tests run those blocks, with the page's example
names (roles, database, users, vhost, passwords, hosts) replaced by unique ones, so the
page cannot drift from what was tested.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "security.md"
SECTION = "## Least privilege"

_FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass(frozen=True)
class Block:
    subsection: str
    lang: str
    text: str


def section_text(page: Path | None = None) -> str:
    text = (page or PAGE).read_text("utf-8")
    start = text.index(f"\n{SECTION}\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def blocks(subsection: str, lang: str, page: Path | None = None) -> list[Block]:
    """The ``lang`` blocks of the ``### <subsection>...`` subsection, in page order."""
    found: list[Block] = []
    current = ""
    fence: str | None = None
    lines: list[str] = []
    for line in section_text(page).splitlines():
        if fence is None:
            if line.startswith("### "):
                current = line[4:]
                continue
            match = _FENCE.match(line)
            if match:
                fence, lines = match.group(1), []
            continue
        if line.startswith("```"):
            if fence == lang and current.startswith(subsection):
                found.append(Block(current, lang, "\n".join(lines) + "\n"))
            fence = None
            continue
        lines.append(line)
    assert found, f"no ```{lang} block under '### {subsection}' in {PAGE.name}"
    return found


def substitute(text: str, names: Mapping[str, str]) -> str:
    """``text`` with each whole-word example name replaced (longest first)."""
    for old in sorted(names, key=len, reverse=True):
        text = re.sub(rf"(?<![\w.-]){re.escape(old)}(?![\w])", names[old], text)
    return text


# -- SQL blocks ----------------------------------------------------------------------
_AS = re.compile(r"^-- as (a superuser|\w+), in the database (\w+)\s*$")


@dataclass(frozen=True)
class SqlScript:
    role: str | None  # None: a superuser
    database: str
    statements: list[str]


def sql_script(block: Block) -> SqlScript:
    """A ```sql block: its first line says who runs it where
    (``-- as <role|a superuser>, in the database <name>``), then statements ending in
    ``;`` (comment lines allowed)."""
    first, *rest = block.text.splitlines()
    match = _AS.match(first)
    assert match, f"an sql block starts with '-- as ..., in the database ...': {first!r}"
    body = "\n".join(line for line in rest if not line.lstrip().startswith("--"))
    statements = [s.strip() for s in body.split(";") if s.strip()]
    role = None if match.group(1) == "a superuser" else match.group(1)
    return SqlScript(role, match.group(2), statements)


# -- shell blocks --------------------------------------------------------------------
def commands(block: Block) -> list[list[str]]:
    """The commands of a ```bash block (``\\`` continuations joined, comments dropped),
    each split as the shell would (no expansions are used in the recipes)."""
    joined = block.text.replace("\\\n", " ")
    out: list[list[str]] = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            out.append(shlex.split(line, comments=True))
    return out


def run_bash(text: str, env: Mapping[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", text], env=dict(env), cwd=cwd,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{text}\n--- exit {done.returncode} ---\n{done.stderr}"
    return done
