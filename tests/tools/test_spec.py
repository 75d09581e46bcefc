"""ToolSpec: validated at definition, failing as ToolSpecError naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from hypha_celery.errors import SpecError, ToolSpecError
from hypha_celery.tools import ToolSpec

QUERY = {"type": "object", "required": ["query"], "additionalProperties": False,
         "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}}}


def spec(**fields: Any) -> ToolSpec:
    return ToolSpec(**{"id": "search.web", "input_schema": QUERY, "side_effect": "read",
                       **fields})


def test_defaults() -> None:
    s = spec()
    assert (s.description, s.output_schema, s.source, s.human_review,
            s.review_expires_in) == ("", None, "local", False, None)


@pytest.mark.parametrize(("level", "keyed"), [
    ("none", False), ("read", False), ("write", True), ("external_effect", True),
    ("irreversible", True)])
def test_idempotency_key_required_by_default_from_write_up(level: str, keyed: bool) -> None:
    assert spec(side_effect=level).idempotency_key_required is keyed


def test_idempotency_key_requirement_can_be_given() -> None:
    assert spec(side_effect="write", idempotency_key_required=False) \
        .idempotency_key_required is False
    assert spec(side_effect="none", idempotency_key_required=True).idempotency_key_required


@pytest.mark.parametrize(("fields", "field"), [
    ({"input_schema": {"type": "nope"}}, "input_schema"),
    ({"output_schema": {"properties": {"a": {"minimum": "zero"}}}}, "output_schema"),
    ({"input_schema": ["not", "an", "object"]}, "input_schema"),
    ({"side_effect": "dangerous"}, "side_effect"),
    ({"source": "ftp"}, "source"),
    ({"id": "not a dotted name"}, "id"),
    ({"id": "trailing."}, "id"),
    ({"review_expires_in": 0}, "review_expires_in"),
    ({"human_review": "maybe"}, "human_review"),
    ({"retries": 3}, "retries"),
])
def test_a_bad_spec_names_its_field(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(ToolSpecError, match=rf"^tool spec '[^']*': {field}: "):
        spec(**fields)


def test_a_bad_schema_says_where() -> None:
    with pytest.raises(ToolSpecError) as caught:
        spec(output_schema={"properties": {"a": {"minimum": "zero"}}})
    assert "not a valid JSON Schema (at properties/a/minimum)" in str(caught.value)


def test_an_unknown_level_lists_the_levels() -> None:
    with pytest.raises(ToolSpecError, match="'external_effect' or 'irreversible'"):
        spec(side_effect="dangerous")


def test_every_problem_is_reported_and_the_error_is_a_spec_error() -> None:
    with pytest.raises(ToolSpecError) as caught:
        ToolSpec(id="x", input_schema={}, side_effect="sideways",  # type: ignore[arg-type]
                 source="ftp")  # type: ignore[arg-type]
    assert "side_effect:" in str(caught.value) and "source:" in str(caught.value)
    assert isinstance(caught.value, SpecError) and isinstance(caught.value, TypeError)


def test_a_missing_field() -> None:
    with pytest.raises(ToolSpecError, match="'x': side_effect: Field required"):
        ToolSpec.model_validate({"id": "x", "input_schema": {}})


def test_model_validate_fails_the_same_way() -> None:
    with pytest.raises(ToolSpecError, match="side_effect"):
        ToolSpec.model_validate({"id": "x", "input_schema": {}, "side_effect": "boom"})
    loaded = ToolSpec.model_validate({"id": "mcp.files.read", "input_schema": {},
                                      "side_effect": "read", "source": "mcp"})
    assert loaded.source == "mcp"


def test_dotted_ids() -> None:
    for good in ("search", "search.web", "mcp-server.read_file", "a.b.c"):
        assert spec(id=good).id == good


def test_input_and_output_issues_carry_json_paths() -> None:
    s = spec(output_schema={"type": "object", "required": ["hits"],
                            "properties": {"hits": {"type": "array",
                                                    "items": {"type": "string"}}}})
    assert s.input_issues({"query": "x"}) == []
    assert [p for p, _ in s.input_issues({"query": 1, "extra": True})] == ["$.extra",
                                                                           "$.query"]
    assert [p for p, _ in s.input_issues({})] == ["$.query"]
    assert [p for p, _ in s.output_issues({"hits": ["a", 2]})] == ["$.hits[1]"]
    assert spec().output_issues(object()) == []  # no output schema: nothing to check


def test_a_spec_is_frozen() -> None:
    s = spec()
    with pytest.raises(ValueError, match="frozen"):
        s.side_effect = "write"
