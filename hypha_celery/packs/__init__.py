"""Domain packs: a product declared as data (hypha's ``DomainPack``), loaded from YAML or
JSON, checked as a whole, and compiled to graphs::

    from hypha_celery.packs import compile_pack, load_pack, validate_input

    pack = load_pack("examples/packs/support_triage/pack.yaml")   # PackError: every problem
    graph = compile_pack(pack)                                    # the default workflow
    validate_input(pack, None, {"text": "how do I reset my password?"})
    hypha.register(graph)

A pack names its task schemas, output contracts, workflows (:class:`WorkflowSpec` plus the
refs that govern them), nodes (code, governed tool, constants), tools (:class:`ToolSpec`
plus a handler or a mock), tool profiles, policies, session profiles and light
evaluation / regression cases. Every reference is checked at load; a file may
``extends:`` a base pack (an overlay: upsert or ``remove`` by id). Keys are read in our
snake_case spelling or in hypha's camelCase one (``sessionProfiles``,
``humanReviewPolicy``): hypha's pack files load unchanged. :func:`run_cases` runs a
pack's evaluation and regression cases as real runs (``hypha pack test``), and
:func:`write_junit` writes the report for CI.
"""

from hypha_celery.packs._cases import (
    DEFAULT_CASE_TIMEOUT,
    MAX_CASE_TIMEOUT,
    MAX_CASES,
    CaseHost,
    CaseKind,
    CaseResult,
    CaseRun,
    CaseStatus,
    PackTestReport,
    case_lines,
    run_cases,
    selected_cases,
)
from hypha_celery.packs._check import Layout, problems
from hypha_celery.packs._compile import (
    compile_all,
    compile_pack,
    output_issues,
    tool_registry,
    transition_policy,
    validate_input,
    workflow_policy,
)
from hypha_celery.packs._junit import junit_xml, write_junit
from hypha_celery.packs._load import load_pack, read_doc
from hypha_celery.packs._model import (
    DomainPack,
    MockOutput,
    NodeDecl,
    PackCase,
    PackHumanReview,
    PackPolicy,
    PackPolicyRule,
    PackRecovery,
    PackRetry,
    PackState,
    PackTool,
    PackToolSpec,
    PackTransition,
    PackWorkflow,
    SessionProfile,
)
from hypha_celery.packs._overlay import merge, overlay
from hypha_celery.packs._parse import MAX_DOC_DEPTH, MAX_DOC_VALUES, parse_pack
from hypha_celery.packs._registry import PackRegistry, version_key
from hypha_celery.packs._sessions import (
    SessionPlan,
    plan_session,
    profile_graph_id,
    workflow_of,
)

__all__ = [
    # the model
    "DomainPack",
    "MockOutput",
    "NodeDecl",
    "PackCase",
    "PackHumanReview",
    "PackPolicy",
    "PackPolicyRule",
    "PackRecovery",
    "PackRetry",
    "PackState",
    "PackTool",
    "PackToolSpec",
    "PackTransition",
    "PackWorkflow",
    "SessionProfile",
    # loading and checking
    "MAX_DOC_DEPTH",
    "MAX_DOC_VALUES",
    "Layout",
    "load_pack",
    "parse_pack",
    "problems",
    "read_doc",
    # overlays and versions
    "PackRegistry",
    "merge",
    "overlay",
    "version_key",
    # running
    "compile_all",
    "compile_pack",
    "output_issues",
    "tool_registry",
    "transition_policy",
    "validate_input",
    "workflow_policy",
    # sessions: a profile applied to the runs of a session
    "SessionPlan",
    "plan_session",
    "profile_graph_id",
    "workflow_of",
    # testing a pack: its evaluation and regression cases as real runs
    "DEFAULT_CASE_TIMEOUT",
    "MAX_CASES",
    "MAX_CASE_TIMEOUT",
    "CaseHost",
    "CaseKind",
    "CaseResult",
    "CaseRun",
    "CaseStatus",
    "PackTestReport",
    "case_lines",
    "junit_xml",
    "run_cases",
    "selected_cases",
    "write_junit",
]
