"""The private library APIs hypha relies on (``hypha_celery._private_api``) are there, in
the shape it expects, in the installed versions: these fail loudly when a library
changes them. And nothing else in the package reaches into a library's internals."""

from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path

import prometheus_client.values as values
import pytest
from celery.worker.consumer import Consumer
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import hypha_celery
from hypha_celery import _private_api as private
from hypha_celery.errors import PrivateApiChanged

PACKAGE = Path(hypha_celery.__file__).parent


def test_celerys_consumer_has_the_hooks_and_attributes_hypha_overrides() -> None:
    private.check_celery_consumer()
    for hook, params in private.CONSUMER_HOOKS.items():
        assert tuple(inspect.signature(getattr(Consumer, hook)).parameters) == params
    init = inspect.getsource(Consumer.__init__)
    for attribute in private.CONSUMER_ATTRIBUTES:
        assert f"self.{attribute} = " in init, attribute
    assert len(private.consumer_steps_without(Consumer, ":DelayedDelivery")) == \
        len(Consumer.Blueprint.default_steps) - 1


def test_a_missing_consumer_step_is_a_loud_error() -> None:
    with pytest.raises(PrivateApiChanged, match="no single ':Renamed' step"):
        private.consumer_steps_without(Consumer, ":Renamed")


def test_the_sdks_multi_processor_keeps_a_tuple_a_processor_can_be_put_first() -> None:
    provider = TracerProvider()
    first, ours = (SimpleSpanProcessor(InMemorySpanExporter()) for _ in range(2))
    provider.add_span_processor(first)
    provider.add_span_processor(ours)
    multi = provider._active_span_processor
    assert isinstance(multi._span_processors, tuple)
    assert private.put_span_processor_first(provider, ours)
    assert multi._span_processors == (ours, first)
    assert not private.put_span_processor_first(object(), ours)  # another provider: left


def test_prometheus_picks_its_value_class_again_in_multiprocess_mode(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(values, "ValueClass", values.MutexValue)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    assert private.use_multiprocess_values()
    assert values.ValueClass is not values.MutexValue  # the multiprocess files' class
    assert not private.use_multiprocess_values()  # picked already


#: What only ``_private_api`` may name: private modules and attributes of libraries.
PRIVATE_NAMES = ("_active_span_processor", "_span_processors", "ValueClass",
                 "get_current_task", "_get_current_object")


def test_no_other_module_reaches_into_a_librarys_internals() -> None:
    """(The standard library's are left to their modules and their own tests:
    ``events/jsontext.py``'s ``_json``, ``guards/_patterns.py``'s ``re._parser``.)"""
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "_private_api.py":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                    and not node.module.startswith("hypha_celery") \
                    and node.module.split(".")[0] not in sys.stdlib_module_names \
                    and any(part.startswith("_") and part != "__future__"
                            for part in node.module.split(".")):
                found.append(f"{path.name}: from {node.module}")
            if isinstance(node, ast.Attribute | ast.Name) and \
                    (node.attr if isinstance(node, ast.Attribute) else node.id) in PRIVATE_NAMES:
                found.append(f"{path.name}: {ast.unparse(node)}")
    assert found == []


def test_httpx2s_transport_opens_its_connections_through_the_backend_given() -> None:
    from hypha_celery.backends.llm import cancel

    made = cancel.transport()
    assert type(made._pool._network_backend).__name__ == "_Backend"
    made.close()
    with pytest.raises(PrivateApiChanged, match="_network_backend"):
        private.use_network_backend(object(), object())
