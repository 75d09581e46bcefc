"""Pack files: YAML (``yaml.safe_load``) or JSON (``.json``), never pickle or eval.

A file may say ``extends: <path of the base pack file, relative to this one>``: it is
then an overlay (:func:`~hypha_celery.packs.overlay`) on its base (which may extend
another), and the merged document is validated as a whole. A pack's ``skills``
directories are relative to the file loaded (the last of an ``extends`` chain).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

from hypha_celery.errors import PackError
from hypha_celery.packs._model import DomainPack
from hypha_celery.packs._overlay import merge
from hypha_celery.packs._parse import parse_pack
from hypha_celery.packs._paths import Problem

__all__ = ["MAX_EXTENDS_DEPTH", "load_pack", "read_doc"]

#: How many ``extends`` a chain of pack files may have.
MAX_EXTENDS_DEPTH = 16


def load_pack(file: str | os.PathLike[str]) -> DomainPack:
    """The pack in ``file`` (with its bases applied); :class:`PackError` lists every
    problem found."""
    doc, found = read_doc(file)
    return parse_pack(doc, found, base_dir=Path(file).parent)


def read_doc(file: str | os.PathLike[str]) -> tuple[dict[str, object], list[Problem]]:
    """The document of ``file`` with its ``extends`` chain merged in, and the overlays'
    problems. :class:`PackError` when a file cannot be read or parsed."""
    return _read(Path(file), ())


def _read(file: Path, chain: tuple[Path, ...]) -> tuple[dict[str, object], list[Problem]]:
    doc = _parse(file)
    base_ref = doc.pop("extends", None)
    if base_ref is None:
        return doc, []
    if not isinstance(base_ref, str) or not base_ref.strip():
        raise PackError([("extends", "extends is the path of the base pack file")])
    base = (file.parent / base_ref).resolve()
    seen = (*chain, file.resolve())
    if base in seen:
        raise PackError([("extends", f"{base_ref} is already in the extends chain "
                                     f"({' -> '.join(p.name for p in (*seen, base))})")])
    if len(seen) > MAX_EXTENDS_DEPTH:
        raise PackError([("extends", f"more than {MAX_EXTENDS_DEPTH} extends in a chain")])
    try:
        base_doc, found = _read(base, seen)
    except PackError as exc:
        raise PackError([("extends", f"{base_ref}: " + (f"{p}: {m}" if p else m))
                         for p, m in exc.problems]) from None
    merged, more = merge(base_doc, doc)
    return merged, [*found, *more]


def _parse(file: Path) -> dict[str, object]:
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise PackError([("", f"cannot read it: {exc.strerror or exc}")]) from None
    except UnicodeDecodeError:
        raise PackError([("", "cannot read it: not UTF-8 text")]) from None
    try:
        doc = json.loads(text) if file.suffix == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise PackError([("", f"not valid JSON: {exc.msg} (line {exc.lineno}, column "
                              f"{exc.colno})")]) from None
    except yaml.YAMLError as exc:
        raise PackError([("", _yaml_error(exc))]) from None
    except RecursionError:  # the parsers recurse per level of nesting
        raise PackError([("", "not valid YAML or JSON: nested too deeply")]) from None
    if not isinstance(doc, dict):
        raise PackError([("", "a pack is a mapping (id, version, name, workflows, ...), not "
                              + ("an empty file" if doc is None else type(doc).__name__))])
    return doc


def _yaml_error(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or "cannot parse"
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return f"not valid YAML: {problem}{where}"
