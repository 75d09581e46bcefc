"""A pack's session profiles applied (hypha's ``initializeDomainSession``).

A session opens with one of the pack's ``session_profiles``; every run of the session
then runs under it:

- **workflow**: the profile's, unless the caller names one;
- **tool profile and policy**: the profile's replace the workflow's, so its tool nodes
  and transitions are governed by them;
- **limits**: the profile's ``max_steps`` / ``execution_timeout`` replace the graph's;
- **metadata**: the profile's ``default_metadata`` with the caller's on top (the caller
  wins), recorded once in ``session.created``.

A profile that changes the tool profile, the policy or a limit runs its workflows as
graphs of their own, ``<workflow>--<profile>`` (:func:`session_graphs`, compiled with the
pack's other graphs by :func:`~hypha_celery.packs.compile_all`): the workflow's states,
events and transition capabilities keep the workflow's id. The session's profile is the
one it opened with: a later run of the session that names another is refused
(:class:`~hypha_celery.errors.PackError`), so one session never mixes two policies.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from hypha_celery.errors import PackError
from hypha_celery.graph import Graph
from hypha_celery.jsontypes import JsonObject
from hypha_celery.packs._model import DomainPack, PackWorkflow, SessionProfile
from hypha_celery.packs._paths import Problem, path

__all__ = ["SessionPlan", "plan_session", "profile_graph_id", "session_graph_problems",
           "session_graphs", "workflow_of"]

_GRAPH_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$")


@dataclass(frozen=True, slots=True)
class SessionPlan:
    """How a run starts in a session: the graph to start, the workflow it runs (for
    its task schema and output contract) and what the session records when it opens."""

    graph_id: str
    workflow_id: str
    profile: str | None
    pack: str
    metadata: JsonObject


def profile_graph_id(workflow_id: str, profile: str) -> str:
    """The graph of ``workflow_id`` run under session profile ``profile``."""
    return f"{workflow_id}--{profile}"


def workflow_of(pack: DomainPack, graph_id: str) -> str | None:
    """The workflow a graph of ``pack`` runs (its own, or a session profile's variant);
    None for a graph that is not the pack's."""
    for wf in pack.workflows:
        if graph_id == wf.id:
            return wf.id
        key = graph_id.removeprefix(f"{wf.id}--")
        if key != graph_id and key in pack.session_profiles:
            return wf.id
    return None


def changes_graph(profile: SessionProfile, wf: PackWorkflow) -> bool:
    """Whether runs of ``wf`` under ``profile`` need a graph of their own (a tool
    profile or policy other than the workflow's, or a limit)."""
    return (profile.tool_profile not in (None, wf.tool_profile)
            or profile.policy not in (None, wf.policy)
            or profile.max_steps is not None or profile.execution_timeout is not None)


def _workflows(pack: DomainPack, profile: SessionProfile) -> list[PackWorkflow]:
    if profile.workflow is not None:
        return [wf for wf in pack.workflows if wf.id == profile.workflow]
    return list(pack.workflows)


def session_graph_problems(pack: DomainPack) -> list[Problem]:
    """A profile whose graph ids would not be graph ids (too long, odd characters)."""
    found: list[Problem] = []
    for key, profile in pack.session_profiles.items():
        for wf in _workflows(pack, profile):
            if not changes_graph(profile, wf):
                continue
            graph_id = profile_graph_id(wf.id, key)
            if not _GRAPH_ID.match(graph_id):
                found.append((path("session_profiles", key),
                              f"runs of this profile need graph id {graph_id!r}: at most "
                              "64 letters, digits, '_' or '-' (shorten the profile's name)"))
    return found


def session_graphs(pack: DomainPack, compile_one: Any, **graph_options: Any
                   ) -> dict[str, Graph]:
    """The graphs of the profiles that change one: ``compile_one(pack, workflow,
    graph_id=..., **options)`` for each profile and workflow it covers."""
    graphs: dict[str, Graph] = {}
    for key, profile in pack.session_profiles.items():
        limits = {k: v for k, v in (("max_steps", profile.max_steps),
                                    ("execution_timeout", profile.execution_timeout))
                  if v is not None}
        for wf in _workflows(pack, profile):
            if not changes_graph(profile, wf):
                continue
            variant = wf.model_copy(update={
                "tool_profile": profile.tool_profile or wf.tool_profile,
                "policy": profile.policy or wf.policy})
            graph_id = profile_graph_id(wf.id, key)
            graphs[graph_id] = compile_one(pack, variant, graph_id=graph_id,
                                           **{**graph_options, **limits})
    return graphs


def plan_session(pack: DomainPack, profile: str | None, *, workflow: str | None = None,
                 opened_with: str | None = None, opened: bool = False,
                 metadata: JsonObject | None = None) -> SessionPlan:
    """The plan of a run in a session: ``profile`` (a key of ``session_profiles``, or
    None), the caller's ``workflow`` and ``metadata``; ``opened`` when the session exists,
    ``opened_with`` the profile it opened with (a different ``profile`` is refused; None
    takes the session's)."""
    if opened:
        if profile is not None and profile != opened_with:
            raise PackError([("session_profiles", f"the session opened with profile "
                              f"{opened_with!r}; its runs cannot use {profile!r}")])
        profile = opened_with
    chosen = _profile(pack, profile)
    try:
        wf = pack.workflow(workflow or (chosen.workflow if chosen else None))
    except KeyError as exc:
        raise PackError([("workflow", str(exc.args[0]))]) from None
    graph_id = wf.id
    if chosen is not None and profile is not None and changes_graph(chosen, wf):
        if chosen.workflow not in (None, wf.id):
            raise PackError([(path("session_profiles", profile, "workflow"),
                              f"profile {profile!r} runs workflow {chosen.workflow!r}, "
                              f"not {wf.id!r}")])
        graph_id = profile_graph_id(wf.id, profile)
    defaults = dict(chosen.default_metadata) if chosen is not None else {}
    return SessionPlan(graph_id, wf.id, profile, pack.ref, {**defaults, **(metadata or {})})


def _profile(pack: DomainPack, key: str | None) -> SessionProfile | None:
    if key is None:
        return None
    found = pack.session_profiles.get(key)
    if found is None:
        known = ", ".join(sorted(pack.session_profiles)) or "none"
        raise PackError([("session_profiles", f"pack {pack.ref} has no session profile "
                          f"{key!r} (known: {known})")])
    return found
