"""The public surface: names, importability, and the error tree."""

from __future__ import annotations

import importlib
import inspect

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

    assert {"Agent", "Response", "Overloaded", "NoReply", "Prompt", "Halt", "Channel",
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
