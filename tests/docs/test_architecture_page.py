"""docs/architecture.md's event taxonomy table names every event type the code defines."""

from __future__ import annotations

import re
from pathlib import Path

from hypha_celery.events.envelope import KINDS

ROOT = Path(__file__).resolve().parents[2]


def tabled_types() -> set[str]:
    """The types the table names: ``a.b.c|d`` is ``a.b.c`` and ``a.b.d``; ``a.*`` a family
    (a cell without a dot, such as ``started|completed``, names none)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text[text.index("| family | types |"):]
    table = table[:table.index("\n\n")]
    names: set[str] = set()
    for cell in re.findall(r"`([a-z_]+\.[a-z_.|*]+)`", table):
        first, *others = cell.split("|")
        prefix = first.rsplit(".", 1)[0]
        names |= {first, *(f"{prefix}.{other}" for other in others)}
    return names


def test_the_table_names_every_event_type() -> None:
    names = tabled_types()
    families = tuple(name[:-1] for name in names if name.endswith("*"))
    assert sorted(k for k in KINDS if k not in names and not k.startswith(families)) == []


def test_the_table_names_no_other_type() -> None:
    assert sorted(n for n in tabled_types() if not n.endswith("*") and n not in KINDS) == []
