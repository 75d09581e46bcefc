"""The public surface: names, importability, and the error tree."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys

import pytest

import hypha_celery
from hypha_celery import errors

PUBLIC = {
    "Hypha", "RunHandle", "RunSnapshot", "RunStatus", "Settings", "Principal", "ScopedHypha",
    "Context", "ErrorInfo", "Fail", "FanOut", "Finish", "Graph", "Next", "Node", "Outcome",
    "Review",
    "NodeContext", "RetryPolicy", "classify", "RecoveryPolicy",
    "Event",
    "BrokerUnavailable", "FailureReason", "GraphSpecError", "HyphaError", "InvalidNotify",
    "LaneBusy", "NotRedrivable", "Overloaded", "InputTooLarge", "TooLarge", "NotPermitted",
    "RunCancelled", "RunFailed", "RunNotFound", "RunTimeout", "SpecError", "UnknownGraph",
    "WaitTimeout",
}


def test_all_is_the_intended_public_api() -> None:
    assert set(hypha_celery.__all__) == PUBLIC
    assert len(hypha_celery.__all__) == len(PUBLIC)  # no duplicates


def test_every_public_name_is_importable() -> None:
    module = importlib.import_module("hypha_celery")
    for name in hypha_celery.__all__:
        assert getattr(module, name) is not None, name
    from hypha_celery import (  # noqa: F401  (the contract of the issue)
        FanOut,
        Finish,
        Graph,
        Hypha,
        Next,
        RunCancelled,
        RunFailed,
        RunTimeout,
    )


def test_every_error_is_a_hypha_error() -> None:
    classes = [obj for _, obj in inspect.getmembers(errors, inspect.isclass)
               if issubclass(obj, BaseException) and obj.__module__ == errors.__name__]
    assert len(classes) >= 14
    for cls in classes:
        assert issubclass(cls, errors.HyphaError), cls
    for name in hypha_celery.__all__:
        obj = getattr(hypha_celery, name)
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            assert issubclass(obj, hypha_celery.HyphaError), name


def test_error_tree() -> None:
    assert issubclass(errors.RunTimeout, errors.RunFailed)
    assert issubclass(errors.RunCancelled, errors.RunFailed)
    assert issubclass(errors.GraphSpecError, errors.SpecError)
    assert issubclass(errors.UnknownGraph, errors.SpecError)
    assert issubclass(errors.UnknownGraph, LookupError)
    assert issubclass(errors.InvalidNotify, errors.SpecError)
    assert issubclass(errors.SpecError, TypeError)
    assert issubclass(errors.WaitTimeout, TimeoutError)
    assert not issubclass(errors.WaitTimeout, errors.RunFailed)
    assert issubclass(errors.RunNotFound, LookupError)
    assert issubclass(errors.LaneBusy, errors.HyphaRuntimeError)
    assert issubclass(errors.Overloaded, errors.HyphaRuntimeError)
    assert issubclass(errors.AgentNotFound, errors.AgentError)
    assert issubclass(errors.AgentNotFound, LookupError)
    assert issubclass(errors.TurnFailed, errors.AgentError)
    assert issubclass(errors.AgentSpecError, errors.SpecError)


def test_agents_public_api() -> None:
    import hypha_celery.agents as agents

    assert {"Agent", "AgentDecision", "Response", "Overloaded", "NoReply", "Prompt", "Halt",
            "Channel",
            "Limits", "attach", "detach", "current_name"} <= set(agents.__all__)
    for name in agents.__all__:
        assert getattr(agents, name) is not None, name


def test_run_failed_carries_the_reason() -> None:
    exc = errors.RunFailed("r1", errors.FailureReason.POLICY_ERROR, "KeyError: 'x'")
    assert (exc.run_id, exc.reason, exc.message) == ("r1", "policy_error", "KeyError: 'x'")
    assert "policy_error" in str(exc)
    assert errors.RunCancelled("r2").reason == "cancelled"


def test_failure_reasons_are_the_documented_values() -> None:
    assert {r.value for r in errors.FailureReason} >= {
        "max_steps_exceeded", "deadline_exceeded", "unknown_node", "invalid_state",
        "policy_error", "node_failed", "reducer_failed"}


#: Public packages with a deliberate ``__all__`` (issue 24): each name resolves, none twice.
PACKAGES = ["hypha_celery.agents", "hypha_celery.backends", "hypha_celery.backends.llm",
            "hypha_celery.beat", "hypha_celery.fsm", "hypha_celery.guards",
            "hypha_celery.jsontypes", "hypha_celery.live", "hypha_celery.packs",
            "hypha_celery.react", "hypha_celery.replay", "hypha_celery.store",
            "hypha_celery.testing", "hypha_celery.tools"]


@pytest.mark.parametrize("name", PACKAGES)
def test_a_public_package_has_a_deliberate_all_whose_names_resolve(name: str) -> None:
    module = importlib.import_module(name)
    exported = module.__dict__.get("__all__")
    assert isinstance(exported, list | tuple) and exported, f"{name} has no __all__"
    assert len(set(exported)) == len(exported), f"{name}.__all__ names a name twice"
    missing = [n for n in exported if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what it lacks: {missing}"


def test_optional_extras_load_lazily() -> None:
    """Importing the package and its backends loads no optional extra: the model SDKs,
    the console's web stack and Prometheus load when first used. (OpenTelemetry is not
    checked: the redis client imports it when it is installed.)"""
    code = ("import sys, hypha_celery, hypha_celery.backends, hypha_celery.agents, "
            "hypha_celery.testing\n"
            "extras = ('openai', 'anthropic', 'starlette', 'jinja2', 'uvicorn', "
            "'prometheus_client')\n"
            "print(','.join(m for m in extras if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == ""


def test_renamed_types_say_what_they_are() -> None:
    """Colliding names (issue 24): the backend stream's event is ``BackendEvent``; the
    run's ``Event`` is the only ``Event``."""
    import hypha_celery.backends as backends

    assert "Event" not in backends.__all__ and "BackendEvent" in backends.__all__
    assert hypha_celery.Event is not backends.BackendEvent


def test_agents_decision_is_agent_decision_and_the_old_name_warns() -> None:
    import hypha_celery.agents as agents

    assert "AgentDecision" in agents.__all__ and "Decision" not in agents.__all__
    with pytest.warns(DeprecationWarning, match="renamed to AgentDecision"):
        assert agents.Decision is agents.AgentDecision
