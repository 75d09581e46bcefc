"""``DomainPack``: a versioned declaration of a product (hypha's), as pydantic models.

A pack holds task schemas (a workflow's input), output contracts, workflows (a
:class:`~hypha_celery.fsm.WorkflowSpec` plus the refs that govern it), nodes (code, a
governed tool, or constants), tools (a :class:`~hypha_celery.tools.ToolSpec` plus its
handler or a mock), tool profiles, tool policies, session profiles and light evaluation /
regression cases. The models check shape only; :func:`~hypha_celery.packs.problems`
checks that every reference resolves, and :func:`~hypha_celery.packs.parse_pack`
runs both and reports every problem at once.

Every model of a pack (the nested workflow, state, review, retry, tool and policy models
too) reads a key in our snake_case spelling or in hypha's camelCase one
(``session_profiles`` / ``sessionProfiles``, ``human_review`` / ``humanReview`` /
``humanReviewPolicy``): one model with validation aliases, so hypha's own pack files load
unchanged. One mapping uses one spelling: both spellings of a field, or camelCase and
snake_case keys side by side, are a problem. A pack is always written back
(:meth:`DomainPack.to_doc`, ``hypha pack show --json``) in snake_case.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import (
    AfterValidator,
    AliasChoices,
    AliasGenerator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel

from hypha_celery.errors import McpProfileError, ToolSpecError
from hypha_celery.fsm import (
    HumanReviewPolicy,
    StateRecovery,
    StateRetry,
    StateSpec,
    TransitionSpec,
    WorkflowSpec,
)
from hypha_celery.jsontypes import JsonObject, JsonValue
from hypha_celery.mcp import HttpTransport, McpServer, StdioTransport
from hypha_celery.packs import _hypha as hy
from hypha_celery.skills import SkillRegistry, SkillRequest
from hypha_celery.tools import PolicyRule, SideEffect, ToolPolicy, ToolSpec

__all__ = ["ID_PATTERN", "NODE_PATTERN", "REF_PATTERN", "DomainPack", "MockOutput", "NodeDecl",
           "PackCase", "PackHttpTransport", "PackHumanReview", "PackMcpServer", "PackPolicy",
           "PackPolicyRule", "PackRecovery", "PackRetry", "PackState", "PackStdioTransport",
           "PackTool", "PackToolSpec", "PackTransition", "PackWorkflow", "SessionProfile"]

#: Pack, schema, contract, profile and case ids.
ID_PATTERN = r"^[A-Za-z][A-Za-z0-9_.\-]{0,63}$"
#: Node names (they become Celery task names ``<workflow>.<node>``).
NODE_PATTERN = r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$"
#: ``module:attr`` (a dotted attribute path is allowed).
REF_PATTERN = r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$"



def _module_attr(value: str) -> str:
    if not re.match(REF_PATTERN, value):
        raise ValueError(f"{value!r} does not look like MODULE:ATTR "
                         "(e.g. examples.packs.support_triage.nodes:classify)")
    return value


_Id = Annotated[str, Field(pattern=ID_PATTERN)]
_Ref = Annotated[str, AfterValidator(_module_attr)]


#: Every pack model: a field is read by its name (snake_case) or its camelCase alias
#: (hypha's spelling); it is written by its name.
_ALIASES = ConfigDict(alias_generator=AliasGenerator(validation_alias=to_camel),
                      validate_by_name=True, validate_by_alias=True, loc_by_alias=False)


def _spellings(model: type[BaseModel], data: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The camelCase and the snake_case keys of ``data`` that name fields of ``model``
    (a one-word key is both and neither); both spellings of one field is an error."""
    camel: list[str] = []
    snake: list[str] = []
    for name, info in model.model_fields.items():
        alias = info.validation_alias
        names = ([a for a in alias.choices if isinstance(a, str)]
                 if isinstance(alias, AliasChoices) else [alias] if isinstance(alias, str)
                 else [])
        used = [k for k in dict.fromkeys([name, *names]) if k in data]
        if len(used) > 1:
            raise ValueError(f"{' and '.join(used)} are one field: give one of them")
        if used and used[0] == name and "_" in name.strip("_"):
            snake.append(name)
        elif used and used[0] != name and used[0] != used[0].lower():
            camel.append(used[0])
    return camel, snake


class _Aliased(BaseModel):
    """Reads hypha's camelCase keys as well as ours; one spelling per mapping. hypha's
    keys in :attr:`hypha_ignored` are accepted and dropped (they carry nothing a graph of
    ours uses: docs/packs.md lists them); one in :attr:`hypha_unsupported` is a problem
    naming it (we cannot honour what it asks)."""

    model_config = _ALIASES
    hypha_ignored: ClassVar[frozenset[str]] = frozenset()
    hypha_unsupported: ClassVar[Mapping[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _one_spelling(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key, why in cls.hypha_unsupported.items():
                if key in data:
                    raise ValueError(f"{key}: not supported: {why}")
            data = {k: v for k, v in data.items() if k not in cls.hypha_ignored}
            camel, snake = _spellings(cls, data)
            if camel and snake:
                raise ValueError(f"one mapping mixes camelCase ({camel[0]}) and snake_case "
                                 f"({snake[0]}) keys: write it in one spelling")
        return data


class _Model(_Aliased):
    model_config = ConfigDict(extra="forbid", frozen=True, **_ALIASES)


class PackHumanReview(HumanReviewPolicy, _Aliased):
    """A state's :class:`~hypha_celery.fsm.HumanReviewPolicy` (``expiresIn``)."""

    model_config = _ALIASES


class PackRetry(StateRetry, _Aliased):
    """A state's :class:`~hypha_celery.fsm.StateRetry` (``maxAttempts``)."""

    model_config = _ALIASES


class PackRecovery(StateRecovery, _Aliased):
    """A state's recovery case (:class:`~hypha_celery.fsm.StateRecovery`:
    ``maxCycles``, ``maxNoProgressCycles``, ...)."""

    model_config = _ALIASES


class PackState(StateSpec, _Aliased):
    """A workflow state (:class:`~hypha_celery.fsm.StateSpec`); hypha's
    ``humanReviewPolicy`` and ``policyRefs`` name ``human_review`` and ``policies``."""

    model_config = _ALIASES
    hypha_ignored = frozenset({
        "allowedPromptRefs", "requiredPromptRefs",
        "allowedMCPProfiles", "allowedMCPProfileRefs", "reasoningProfileRef",
        "memoryPolicyRef", "evaluationRefs", "capabilityLoadPolicy", "description"}
        | hy.SPEC_META)
    hypha_unsupported = {
        "timeoutPolicy": "a state has no timeout of its own here (a node's timeout is "
                         "the graph's node_timeout or its Node(timeout=...))",
        "timeoutMs": "a state has no timeout of its own here (see timeoutPolicy)",
        "inputContract": "a state's input is not checked against a schema here",
        "outputContract": "a state's output is not checked against a schema here "
                          "(the workflow's output_contract checks the run's)",
        "permissionScopes": "tool calls are not scoped by permission here",
        "allowedToolRefs": "write allowedTools (tool ids)",
        "humanApprovalPolicyRef": "write humanReviewPolicy inline",
        "humanReviewRef": "write humanReviewPolicy inline",
        "retryPolicyRef": "write retryPolicy inline"}

    human_review: PackHumanReview | None = Field(
        default=None, validation_alias=AliasChoices("human_review", "humanReview",
                                                    "humanReviewPolicy"))
    retry: PackRetry | None = Field(default=None, validation_alias=AliasChoices(
        "retry", "retryPolicy"))
    recovery: PackRecovery | None = None
    policies: list[str] = Field(default=[], validation_alias=AliasChoices(
        "policies", "policyRefs"))
    tools: list[str] | None = Field(default=None, validation_alias=AliasChoices(
        "tools", "allowedTools"))
    denied_tools: Annotated[list[str], BeforeValidator(hy.ref_ids)] = Field(
        default=[], validation_alias=AliasChoices("denied_tools", "deniedTools",
                                                  "deniedToolRefs"))
    tool_profiles: Annotated[list[str], BeforeValidator(hy.ref_ids)] = Field(
        default=[], validation_alias=AliasChoices("tool_profiles", "toolProfiles",
                                                  "toolProfileRefs"))
    #: The skills a model call in this state may use (``None``: every attached one) and
    #: those it must have (ids; hypha's ``{id, version}`` refs read as ids).
    allowed_skills: Annotated[list[str] | None, BeforeValidator(hy.ref_ids)] = None
    required_skills: Annotated[list[str] | None, BeforeValidator(hy.ref_ids)] = None


class PackTransition(TransitionSpec, _Aliased):
    """A workflow transition (:class:`~hypha_celery.fsm.TransitionSpec`)."""

    model_config = _ALIASES


def _approval(value: Any) -> Any:
    """hypha's ``humanApprovalPolicy`` (``{required, reason}``) as our flag."""
    if not isinstance(value, dict):
        return value
    extra = sorted(set(value) - {"required", "reason"})
    if extra:
        raise ValueError(f"humanApprovalPolicy.{extra[0]}: not supported (a tool's review "
                         "here is required or not: required, reason)")
    return value.get("required", False)


class PackToolSpec(ToolSpec, _Aliased):
    """A pack tool's :class:`~hypha_celery.tools.ToolSpec` (``inputSchema``,
    ``sideEffect`` / hypha's ``sideEffectLevel``, ``humanApprovalPolicy``, ...)."""

    model_config = _ALIASES
    hypha_ignored = hy.SPEC_META
    hypha_unsupported = {
        key: "not enforced on a tool here" for key in (
            "permissionScope", "preconditions", "postconditions", "timeoutPolicy",
            "retryPolicy", "auditPolicy", "sourceRef", "idempotencyPolicy")}

    side_effect: SideEffect = Field(validation_alias=AliasChoices(
        "side_effect", "sideEffect", "sideEffectLevel"))
    human_review: Annotated[bool, BeforeValidator(_approval)] = Field(
        default=False, validation_alias=AliasChoices("human_review", "humanReview",
                                                     "humanApprovalPolicy"))


class PackPolicyRule(PolicyRule, _Aliased):
    """A rule of a pack policy (``sideEffects`` / hypha's ``sideEffectLevels``)."""

    model_config = _ALIASES
    hypha_ignored = hy.SPEC_META | {"description"}

    side_effects: list[SideEffect] | None = Field(default=None, validation_alias=AliasChoices(
        "side_effects", "sideEffects", "sideEffectLevels"))


class PackPolicy(ToolPolicy, _Aliased):
    """A pack's :class:`~hypha_celery.tools.ToolPolicy` (``defaultEffect``)."""

    model_config = _ALIASES
    hypha_ignored = hy.SPEC_META | {"description"}

    #: Narrowed to the aliased rule (pydantic validates into it; read-only, frozen).
    rules: list[PackPolicyRule] = []  # type: ignore[assignment]


def _as_value_error(model: type[PackToolSpec] | type[PackPolicy]) -> Any:
    """Validate with ``model``; its :class:`ToolSpecError` becomes a ``ValueError`` so
    pydantic reports it at its place in the pack (with the other problems)."""
    def validate(value: Any) -> Any:
        if isinstance(value, model):
            return value
        try:
            return model.model_validate(value)
        except ToolSpecError as exc:
            raise ValueError(str(exc)) from None
    return BeforeValidator(validate)


class PackStdioTransport(StdioTransport, _Aliased):
    model_config = ConfigDict(extra="forbid", frozen=True, **_ALIASES)


class PackHttpTransport(HttpTransport, _Aliased):
    model_config = ConfigDict(extra="forbid", frozen=True, **_ALIASES)


class PackMcpServer(McpServer, _Aliased):
    """An MCP server profile (:class:`~hypha_celery.mcp.McpServer`) of ``mcp_profiles``:
    ``command`` / ``args`` / ``env`` or ``url`` / ``headers``, ``trust``, ``drift``
    (``driftPolicy``), ``allowed_tools`` (``allowedTools``), ``call_timeout`` ..."""

    model_config = ConfigDict(extra="forbid", frozen=True, **_ALIASES)
    transport: Annotated[PackStdioTransport | PackHttpTransport, Field(discriminator="kind")]


def _mcp_servers(value: Any) -> Any:
    """Each ``mcp_profiles`` entry as a :class:`PackMcpServer` whose id is its name; a
    profile that does not validate is a problem at its place in the pack."""
    if isinstance(value, list):
        raise ValueError("hypha's MCPIntegrationSpec list (servers, allowedCapabilities, "
                         "importPolicy, ...) is not supported: write mcp_profiles as "
                         "NAME: {command: ...} or NAME: {url: ...}, one server each")
    if not isinstance(value, dict):
        return value
    servers: dict[str, Any] = {}
    for name, doc in value.items():
        if isinstance(doc, McpServer) or not isinstance(doc, dict):
            servers[name] = doc
            continue
        try:
            servers[name] = PackMcpServer.model_validate({"id": name, **doc})
        except McpProfileError as exc:
            raise ValueError(f"{name}: {exc}") from None
    return servers


class NodeDecl(_Model):
    """One node, exactly one of: ``code`` (``module:attr``: ``fn(state, input[, ctx])`` or
    a :class:`~hypha_celery.graph.Node`), ``tool`` (a governed call of that tool id, its
    input the run input or the value at ``input_from``, its result in the state under
    ``output_to``, default ``tool_result``) or ``set`` (constants merged into the state)."""

    code: _Ref | None = None
    tool: str | None = None
    input_from: str | None = None
    output_to: Annotated[str, Field(pattern=NODE_PATTERN)] | None = None
    set_: JsonObject | None = Field(default=None, alias="set")

    @model_validator(mode="after")
    def _one_kind(self) -> NodeDecl:
        kinds = [k for k, v in (("code", self.code), ("tool", self.tool),
                                ("set", self.set_)) if v is not None]
        if len(kinds) != 1:
            raise ValueError("a node is exactly one of code, tool or set, got "
                             + (" and ".join(kinds) or "none"))
        if self.tool is None and (self.input_from is not None or self.output_to is not None):
            raise ValueError("input_from and output_to belong to a tool node")
        return self

    @property
    def kind(self) -> str:
        return "code" if self.code else "tool" if self.tool else "set"


class MockOutput(_Model):
    """A deterministic handler: every call returns ``output``."""

    output: Any = None


class PackTool(_Model):
    """A :class:`ToolSpec` (its fields, flat) plus exactly one of ``handler``
    (``module:attr``, ``handler(input) -> output``) or ``mock``."""

    spec: Annotated[PackToolSpec, _as_value_error(PackToolSpec)]
    handler: _Ref | None = None
    mock: MockOutput | None = None

    @model_validator(mode="before")
    @classmethod
    def _split(cls, data: Any) -> Any:
        if isinstance(data, dict) and "spec" not in data:
            own = {k: data[k] for k in ("handler", "mock") if k in data}
            return {**own, "spec": {k: v for k, v in data.items() if k not in own}}
        return data

    @model_validator(mode="after")
    def _one_handler(self) -> PackTool:
        if (self.handler is None) == (self.mock is None):
            raise ValueError("a tool has exactly one of handler or mock")
        return self

    @model_serializer(mode="wrap")
    def _flat(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        data: dict[str, object] = handler(self)
        spec = data.pop("spec")
        assert isinstance(spec, dict)
        return {**spec, **data}

    @property
    def id(self) -> str:
        return self.spec.id


class PackWorkflow(WorkflowSpec, _Aliased):
    """A workflow plus the pack entries that govern it: the JSON Schema of its input
    (``task_schema``), of its output (``output_contract``), the tools its tool nodes may
    call (``tool_profile``: none, any) and the policy for tools and transitions
    (``policy``: none, the pack's ``default_policy``)."""

    model_config = _ALIASES
    hypha_ignored = frozenset({"name", "tags", "metadata"})

    #: Narrowed to the aliased models (pydantic validates into them; frozen).
    states: list[PackState] = Field(min_length=1)  # type: ignore[assignment]
    transitions: list[PackTransition] = []  # type: ignore[assignment]
    task_schema: str | None = None
    output_contract: str | None = None
    tool_profile: str | None = None
    policy: str | None = None


class SessionProfile(_Model):
    """Defaults for a session (hypha's ``SessionProfile``): metadata merged under the
    caller's, the workflow its runs start, the tool profile and policy that govern them
    and their limits (``max_steps``, ``execution_timeout`` in seconds) -- see
    :mod:`hypha_celery.packs._sessions`."""

    hypha_ignored = frozenset({
        "defaultMemoryProfileRef", "defaultContextProfileRef", "defaultReasoningProfileRef",
        "defaultMCPProfileRef", "defaultSkillPolicyRef"}) | hy.SPEC_META
    hypha_unsupported = {"metadataSchema": "a session's metadata is not checked against "
                                           "a schema here"}

    description: str = ""
    default_metadata: JsonObject = {}
    workflow: str | None = None
    tool_profile: str | None = Field(default=None, validation_alias=AliasChoices(
        "tool_profile", "toolProfile", "defaultToolProfileRef"))
    policy: Annotated[str | None, BeforeValidator(hy.one_ref)] = Field(
        default=None, validation_alias=AliasChoices("policy", "defaultPolicyRefs"))
    max_steps: int | None = Field(default=None, ge=1, le=100_000)
    execution_timeout: float | None = Field(default=None, gt=0, le=30 * 24 * 3600)


class PackCase(_Model):
    """An evaluation or regression case: run ``workflow`` on ``input``; its output must
    satisfy ``output_contract`` (default: the workflow's). A regression case names its
    ``checks`` (``event_types``, ``state_path``, ...; default ``event_types``,
    ``state_path``, ``output_contract``) and may name a replay ``fixture`` file (relative
    to the pack file) to compare with; ``hypha pack test`` runs them."""

    hypha_ignored = hy.SPEC_META
    hypha_unsupported = {"fixtureRefs": "hypha's replay fixture-store refs: name a "
                                        "fixture file (fixture) instead"}

    id: _Id
    workflow: str
    input: JsonValue = None
    output_contract: str | None = None
    checks: list[str] = Field(default=[], validation_alias=AliasChoices(
        "checks", "requiredChecks"))
    fixture: str | None = Field(default=None, min_length=1)
    description: str = ""


class DomainPack(_Model):
    """A versioned pack, referred to as ``id@version``."""

    id: _Id
    version: str = Field(min_length=1, max_length=64)
    name: str = Field(min_length=1)
    hypha_ignored = hy.DOC_IGNORED

    description: str = ""
    #: JSON Schemas by name (hypha's list of ``TaskSchemaSpec``: their ``inputSchema``).
    task_schemas: Annotated[dict[str, JsonObject], BeforeValidator(
        lambda v: hy.by_id("taskSchemas", v, hy.task_schema))] = {}
    #: JSON Schemas by name (hypha's list of ``OutputContractSpec``: their ``schema``).
    output_contracts: Annotated[dict[str, JsonObject], BeforeValidator(
        lambda v: hy.by_id("outputContracts", v, hy.output_contract))] = {}
    workflows: list[PackWorkflow] = Field(min_length=1)
    nodes: dict[str, NodeDecl] = {}
    tools: list[PackTool] = []
    #: Tool ids (or globs) by profile (hypha's list of ``ToolProfileSpec``).
    tool_profiles: Annotated[dict[str, list[str]], BeforeValidator(
        lambda v: hy.by_id("toolProfiles", v, hy.tool_profile))] = {}
    policies: list[Annotated[PackPolicy, _as_value_error(PackPolicy)]] = Field(
        default=[], validation_alias=AliasChoices("policies", "toolPolicies"))
    default_policy: str | None = None
    #: By name (hypha's list of ``SessionProfileSpec``).
    session_profiles: Annotated[dict[str, SessionProfile], BeforeValidator(
        lambda v: hy.by_id("sessionProfiles", v, hy.session_profile))] = {}
    default_workflow: str | None = None
    evaluation_cases: list[PackCase] = []
    regression_cases: list[PackCase] = []
    #: MCP servers (hypha's ``mcpProfiles``) by name: each an
    #: :class:`~hypha_celery.mcp.McpServer` (its id is the name) for an ``McpGateway``.
    mcp_profiles: Annotated[dict[str, PackMcpServer], BeforeValidator(_mcp_servers)] = {}
    #: Skill directories (each one skill, or a directory of them), relative to the pack
    #: file: loaded and checked with the pack (:attr:`skill_registry`).
    skills: list[Annotated[str, Field(min_length=1)]] | None = None
    #: hypha's ``allowedSkills`` / ``defaultSkills``: the skills the pack's bindings may
    #: name, and those bound to its agents by default (ids).
    allowed_skills: Annotated[list[str] | None, BeforeValidator(hy.ref_ids)] = None
    default_skills: Annotated[list[str] | None, BeforeValidator(hy.ref_ids)] = None
    _skill_registry: SkillRegistry | None = PrivateAttr(default=None)
    _base_dir: Path | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _task_bindings(cls, data: Any) -> Any:
        """hypha's task schemas name their workflow: read into the workflows."""
        return hy.link_task_schemas(data) if isinstance(data, dict) else data

    @field_validator("version", mode="before")
    @classmethod
    def _version_text(cls, value: Any) -> Any:
        if not isinstance(value, str):
            raise ValueError("write the version as a string, e.g. '1.0' (YAML reads 1.10 "
                             "as the number 1.1)")
        return value

    @property
    def ref(self) -> str:
        """``id@version``."""
        return f"{self.id}@{self.version}"

    @property
    def skill_registry(self) -> SkillRegistry:
        """The skills of :attr:`skills`, loaded with the pack (empty when it declares
        none, or when the pack was not parsed by :func:`~hypha_celery.packs.parse_pack`)."""
        return self._skill_registry or SkillRegistry()

    def skill_request(self, workflow_id: str | None, state_id: str,
                      text: str = "") -> SkillRequest:
        """What a model call in state ``state_id`` of workflow ``workflow_id`` may use:
        attached, the pack's ``default_skills`` (else every skill it declares); allowed
        and required, the state's. ``text`` is matched by keyword and regex skills.
        ``KeyError`` for an unknown workflow or state. Give it with :attr:`skill_registry`
        to ``ctx.llm(..., context=LLMContext(skills=..., skill_request=...))``."""
        wf = self.workflow(workflow_id)
        state = next((s for s in wf.states if s.id == state_id), None)
        if state is None:
            raise KeyError(f"workflow {wf.id!r} has no state {state_id!r}")
        attached = self.default_skills if self.default_skills is not None else \
            list(self.skill_registry.ids)
        return SkillRequest(attached=attached, text=text, allowed=state.allowed_skills,
                            required=state.required_skills or ())

    def workflow(self, workflow_id: str | None = None) -> PackWorkflow:
        """The workflow ``workflow_id`` (default: ``default_workflow``, else the first);
        ``KeyError`` naming the known ones if there is none."""
        wanted = workflow_id or self.default_workflow or self.workflows[0].id
        for wf in self.workflows:
            if wf.id == wanted:
                return wf
        known = ", ".join(wf.id for wf in self.workflows)
        raise KeyError(f"pack {self.ref} has no workflow {wanted!r} (known: {known})")

    def tool(self, tool_id: str) -> PackTool | None:
        return next((t for t in self.tools if t.id == tool_id), None)

    def policy(self, policy_id: str) -> ToolPolicy | None:
        """The policy ``policy_id``; hypha's default (``default-deny-external-effects``)
        is known without being declared."""
        found = next((p for p in self.policies if p.id == policy_id), None)
        if found is None and policy_id == ToolPolicy.default().id:
            return ToolPolicy.default()
        return found

    def to_doc(self) -> JsonObject:
        """The pack as a document (what a pack file holds), JSON only."""
        doc: JsonObject = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        return doc
