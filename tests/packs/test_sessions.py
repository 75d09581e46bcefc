"""A pack's session profiles applied to the runs of a session (SQLite and PostgreSQL):
the profile's workflow, policy and limits govern every run of the session, its metadata
(under the caller's) is recorded once in ``session.created``; a session keeps the profile
it opened with; bad profiles are refused at load or at start."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from hypha_celery import Hypha, RunFailed, SessionOpening
from hypha_celery.errors import PackError
from hypha_celery.events.payloads import SessionCreated
from hypha_celery.packs import (
    DomainPack,
    SessionPlan,
    compile_all,
    parse_pack,
    plan_session,
    validate_input,
)
from tests.packs import EXAMPLE
from tests.runtime.support import WAIT, of_kind, running

QUESTION = {"text": "how do I reset my password?"}


def _doc() -> dict[str, Any]:
    with open(EXAMPLE) as f:
        doc: dict[str, Any] = yaml.safe_load(f)
    doc["policies"] = [{"id": "no-search", "default_effect": "allow", "deny": ["kb.search"]}]
    doc["session_profiles"].update({
        "locked": {"workflow": "support-triage", "policy": "no-search",
                   "default_metadata": {"channel": "kiosk", "tier": "basic"}},
        "short": {"max_steps": 2},
        "plain": {"default_metadata": {"channel": "email"}},
    })
    return doc


@pytest.fixture(scope="module")
def pack() -> DomainPack:
    return parse_pack(_doc())


@pytest.fixture
def hypha(store_url: str, pack: DomainPack) -> Iterator[Hypha]:
    with running(store_url) as h:
        for graph in compile_all(pack).values():
            h.register(graph)
        yield h


def start(hypha: Hypha, plan: SessionPlan, ticket: Any, user: str, session: str) -> Any:
    """What ``hypha run --pack --session-profile`` does with a plan."""
    validate_input(parse_pack(_doc()), plan.workflow_id, ticket)
    return hypha.start(plan.graph_id, ticket, user_id=user, session_id=session,
                       session=SessionOpening(plan.profile, plan.pack, plan.metadata))


def test_profiles_that_change_a_graph_compile_a_graph_of_their_own(pack: DomainPack) -> None:
    graphs = compile_all(pack)
    # "plain" changes metadata only, "web-chat" names the workflow's own tool profile
    assert {"support-triage", "support-triage--locked", "support-triage--short"} == set(graphs)
    assert graphs["support-triage--short"].max_steps == 2
    assert graphs["support-triage"].max_steps != 2


def test_the_profiles_policy_governs_every_run_of_the_session(hypha: Hypha,
                                                              pack: DomainPack) -> None:
    user = uuid.uuid4().hex[:8]
    plan = plan_session(pack, "locked", metadata={"tier": "gold"})
    assert (plan.graph_id, plan.workflow_id) == ("support-triage--locked", "support-triage")
    first = start(hypha, plan, QUESTION, user, "kiosk-1")
    assert first.wait(WAIT)["reason"] == "no_article"  # the search was denied
    assert [e.data["tool"] for e in of_kind(first, "tool.call.rejected")] == ["kb.search"]
    (checked,) = [e.data for e in of_kind(first, "tool.policy.checked")]
    assert (checked["tool"], checked["decision"]["allowed"]) == ("kb.search", False)
    [opened] = [e.body_as(SessionCreated) for e in first.events()
                if e.kind == "session.created"]
    assert (opened.profile, opened.pack, opened.metadata) == (
        "locked", pack.ref, {"channel": "kiosk", "tier": "gold"})  # the caller's wins
    # the next run of the session names no profile: the session's applies
    row = hypha.session("kiosk-1", user_id=user)
    assert row is not None
    again = plan_session(pack, None, opened=True, opened_with=row.profile)
    assert again.graph_id == "support-triage--locked"
    second = start(hypha, again, QUESTION, user, "kiosk-1")
    assert second.wait(WAIT)["reason"] == "no_article"
    assert "session.created" not in [e.kind for e in second.events()]
    # without the profile the same question is answered
    free = start(hypha, plan_session(pack, None), QUESTION, user, "other")
    assert free.wait(WAIT)["kind"] == "answer"


def test_the_profiles_limits_apply(hypha: Hypha, pack: DomainPack) -> None:
    run = start(hypha, plan_session(pack, "short"), QUESTION, uuid.uuid4().hex[:8], "s")
    with pytest.raises(RunFailed) as info:
        run.wait(WAIT)
    assert info.value.reason == "max_steps_exceeded"


def test_a_profile_of_metadata_only_runs_the_workflow_itself(pack: DomainPack) -> None:
    plan = plan_session(pack, "plain", workflow="support-triage", metadata={"x": 1})
    assert plan.graph_id == "support-triage"
    assert plan.metadata == {"channel": "email", "x": 1}


def test_a_session_keeps_the_profile_it_opened_with(pack: DomainPack) -> None:
    with pytest.raises(PackError, match="opened with profile 'locked'; its runs cannot "
                                        "use 'short'"):
        plan_session(pack, "short", opened=True, opened_with="locked")


def test_an_unknown_profile_is_refused(pack: DomainPack) -> None:
    with pytest.raises(PackError, match="no session profile 'nope' .known: locked, plain, "
                                        "short, web-chat."):
        plan_session(pack, "nope")


def test_a_profile_whose_graph_id_is_too_long_is_a_problem_at_compile() -> None:
    doc = _doc()
    doc["session_profiles"] = {"p" * 60: {"max_steps": 3}}
    with pytest.raises(PackError) as info:
        compile_all(parse_pack(doc))
    assert any("need graph id" in message for _, message in info.value.problems)


@pytest.mark.parametrize("limits", [{"max_steps": 0}, {"execution_timeout": -1},
                                    {"max_steps": "many"}])
def test_a_bad_limit_is_a_problem_at_load(limits: dict[str, Any]) -> None:
    doc = _doc()
    doc["session_profiles"] = {"bad": limits}
    with pytest.raises(PackError) as info:
        parse_pack(doc)
    assert any("session_profiles" in where for where, _ in info.value.problems)
