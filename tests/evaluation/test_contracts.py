"""Output contracts, validated by ``jsonschema`` (Draft 2020-12)."""

from __future__ import annotations

from typing import Any

import pytest

from hypha_celery.errors import InvalidContract
from hypha_celery.evaluation import Check, OutputContract, json_path, validate_output
from hypha_celery.evaluation._results import result
from tests.replay.support import ANSWER_CONTRACT

CONTRACT = OutputContract("output.default", ANSWER_CONTRACT, version="0.0.0")


def test_hypha_output_contract_scenario() -> None:
    """hypha §4 scenario 16."""
    ok = validate_output({"answer": "ok", "citations": ["fixture"]}, CONTRACT, run_id="r")
    assert ok.passed and ok.score == 1.0 and ok.status == "passed" and ok.run_id == "r"
    assert [c.id for c in ok.checks] == ["output.default:schema"]
    assert ok.id == "output.default:output-contract" and ok.kind == "output_contract"

    bad = validate_output({"answer": 42, "extra": True}, CONTRACT)
    assert not bad.passed and bad.score == 0.0
    assert [(c.id, c.path) for c in bad.checks] == [("output.default:schema:1", "$.answer"),
                                                    ("output.default:schema:2", "$.extra")]
    assert "42 is not of type 'string'" in bad.checks[0].message
    assert "'extra' is not allowed" in bad.checks[1].message


def test_missing_required_properties_are_reported_where_they_belong() -> None:
    schema = {"type": "object", "required": ["a", "b"],
              "properties": {"n": {"type": "object", "required": ["x"]}}}
    found = validate_output({"n": {}}, schema)
    assert [c.path for c in found.checks] == ["$.a", "$.b", "$.n.x"]
    assert found.checks[0].id == "output:schema:1"  # a bare schema is contract "output"


def test_paths_into_arrays_and_odd_keys() -> None:
    schema = {"type": "object", "properties": {
        "citations": {"type": "array", "items": {"type": "string", "minLength": 2}},
        "odd key": {"type": "integer", "maximum": 3}}}
    found = validate_output({"citations": ["ok", "x", 5], "odd key": 4}, schema)
    assert [c.path for c in found.checks] == ["$.citations[1]", "$.citations[2]",
                                              '$["odd key"]']  # sorted by path
    assert json_path(["a", 0, "b c", "d"]) == '$.a[0]["b c"].d'
    assert json_path([]) == "$"


def test_it_is_draft_2020_12() -> None:
    schema = {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
              "items": False,
              "$defs": {"pos": {"type": "integer", "minimum": 1}},
              "contains": {"$ref": "#/$defs/pos"}}
    assert validate_output(["a", 2], schema).passed
    failed = validate_output(["a", "b", 3], schema)
    assert not failed.passed and {c.path for c in failed.checks} == {"$", "$[1]"}


@pytest.mark.parametrize("schema", [{"type": "strung"}, {"minimum": "1"}, ["a"], "string"])
def test_an_invalid_schema_is_refused_up_front(schema: Any) -> None:
    with pytest.raises(InvalidContract, match="output contract 'c'"):
        OutputContract("c", schema)


def test_scores_count_checks() -> None:
    mixed = result("x", "custom", [Check(id="a", passed=True), Check(id="b", passed=False),
                                   Check(id="c", passed=True)])
    assert mixed.score == pytest.approx(2 / 3) and mixed.status == "failed"
    assert result("y", "custom", []).score == 1.0
    assert [c.id for c in mixed.failed_checks()] == ["b"]
