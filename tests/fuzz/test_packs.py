"""Fuzzing pack loading (:mod:`hypha_celery.packs`): the example pack's document with
values changed, dropped or added; arbitrary YAML-ish documents; arbitrary file text
(``load_pack``, YAML and JSON); overlays. For any input: a pack that compiles (or a
:class:`PackError`) and checks inputs, or a :class:`PackError`; nothing else."""

from __future__ import annotations

import contextlib
import copy
import itertools
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from hypha_celery.errors import PackError
from hypha_celery.packs import (
    DomainPack,
    compile_all,
    load_pack,
    output_issues,
    overlay,
    parse_pack,
    validate_input,
)
from tests.fuzz._mutate import JSON, mutated, tally
from tests.fuzz.conftest import budget

EXAMPLE = Path(__file__).parents[2] / "examples" / "packs" / "support_triage" / "pack.yaml"
DOC: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
_files = itertools.count()

#: Values YAML reads besides JSON ones (dates, binary, sets, NaN, tuples, big numbers).
YAMLISH = st.recursive(
    JSON | st.dates() | st.binary(max_size=4) | st.just(float("nan"))
    | st.frozensets(st.integers(), max_size=2) | st.integers(min_value=10**20)
    | st.sampled_from(["Intake", "Done", "classify", "kb.search", "support", "ticket",
                       "reply", "default-deny-external-effects", "support-triage"]),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=10) | st.integers(0, 3), inner, max_size=4),
    max_leaves=20)


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    if isinstance(value, list):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


#: Values the example pack itself holds (a near-valid document swaps them around).
OWN = st.sampled_from(sorted({repr(v): v for v in _leaves(DOC)}.values(), key=repr))


def loaded(doc: Any) -> DomainPack | None:
    try:
        pack = parse_pack(doc)
    except PackError as exc:
        assert exc.problems and all(isinstance(m, str) for _, m in exc.problems)
        return None
    return pack


def used(pack: DomainPack, value: Any) -> None:
    """What a caller does with a pack that loaded: compile it, check an input and an
    output, apply an overlay of itself."""
    try:
        compile_all(pack)
        tally("compiled")
    except PackError:
        tally("compile refused")
    for call in (lambda: validate_input(pack, None, value),
                 lambda: output_issues(pack, None, value),
                 lambda: overlay(pack, pack.to_doc())):
        with contextlib.suppress(PackError):
            call()


def test_the_example_pack_loads_and_compiles() -> None:
    pack = loaded(copy.deepcopy(DOC))
    assert pack is not None
    compile_all(pack)


@budget(150)
@given(st.data(), JSON)
def test_mutated_example_pack(data: st.DataObject, value: Any) -> None:
    doc = data.draw(mutated(DOC, OWN | OWN | YAMLISH))
    pack = loaded(doc)
    tally("loaded" if pack is not None else "refused")
    if pack is not None:
        used(pack, value)


@budget(200)
@given(YAMLISH | st.dictionaries(st.sampled_from(sorted(DOC)), YAMLISH, max_size=8))
def test_arbitrary_documents(doc: Any) -> None:
    pack = loaded(doc)
    if pack is not None:
        used(pack, None)


@budget(40)
@given(st.data())
def test_overlays(data: st.DataObject) -> None:
    base = loaded(copy.deepcopy(DOC))
    assert base is not None
    doc = data.draw(mutated({k: DOC[k] for k in data.draw(st.sets(st.sampled_from(sorted(DOC)),
                                                                   max_size=4))}, YAMLISH)
                    | YAMLISH)
    with contextlib.suppress(PackError):
        overlay(base, doc)


def _aliases(levels: int, width: int) -> str:
    """YAML whose aliases expand to ``width ** levels`` values (a billion laughs)."""
    lines = [f"a0: &a0 [{', '.join(['x'] * width)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


#: Inputs that stress the parsers: deep nesting (either syntax), nested aliases.
HOSTILE = st.one_of(
    st.integers(1, 3_000).flatmap(lambda n: st.sampled_from(
        ["[" * n + "]" * n, "{a: " * n + "1" + "}" * n, '{"a":' * n + "1" + "}" * n,
         "- " * n + "x", "[" * n])),
    st.builds(_aliases, st.integers(1, 12), st.integers(1, 12)))


@budget(150)
@given(st.one_of(st.text(max_size=600), st.binary(max_size=300).map(
    lambda b: b.decode("latin-1")), JSON.map(yaml.safe_dump), HOSTILE),
       st.sampled_from([".yaml", ".json"]), st.booleans())
def test_arbitrary_files(fuzz_dir: Path, text: str, suffix: str, raw: bool) -> None:
    file = fuzz_dir / f"pack-{next(_files)}{suffix}"
    if raw:
        file.write_bytes(text.encode("utf-8", "surrogatepass"))
    else:
        file.write_text(text, encoding="utf-8", errors="replace")
    with contextlib.suppress(PackError):
        load_pack(file)
