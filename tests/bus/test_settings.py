"""``HYPHA_BUS_*``: the bus of a ``Hypha`` enforces the bounds and the retry policy of its
settings (a real publish refused by a bound set in the environment)."""

from __future__ import annotations

import dataclasses

import pytest

from hypha_celery import Hypha, Settings
from hypha_celery.bus import (
    ACK_DEADLINE_S,
    MAX_DELIVERY_ATTEMPTS,
    BusLimits,
    MessageTooLarge,
    QueueFull,
    RetryPolicy,
    human,
)
from hypha_celery.errors import SetupError
from hypha_celery.runtime.config import BusSettings
from tests.bus.support import message, scope


def _hypha(store_url: str, **env: str) -> Hypha:
    return Hypha(Settings.from_env({"HYPHA_STORE_URL": store_url, **env}))


def test_the_defaults_are_the_bus_defaults() -> None:
    assert BusLimits.from_settings(BusSettings()) == BusLimits()
    assert RetryPolicy.from_settings(BusSettings()) == RetryPolicy()
    bus = Settings.from_env({}).bus
    assert (bus.ack_deadline_s, bus.max_delivery_attempts) == (ACK_DEADLINE_S,
                                                                MAX_DELIVERY_ATTEMPTS)


def test_an_env_queue_bound_refuses_a_real_publish(store_url: str) -> None:
    hypha = _hypha(store_url, HYPHA_BUS_MAX_QUEUE_MESSAGES="2")
    try:
        assert hypha.bus.limits.max_queue_messages == 2
        sc = scope()
        for _ in range(2):
            hypha.bus.publish(message(sc, human("bob")))
        with pytest.raises(QueueFull) as full:
            hypha.bus.publish(message(sc, human("bob")))
        assert full.value.info["limit"] == "count" and full.value.info["max_count"] == 2
    finally:
        hypha.close()
    default = _hypha(store_url)  # the same queue under the default bound takes a third
    try:
        default.bus.publish(message(sc, human("bob")))
    finally:
        default.close()


def test_env_message_bytes_and_retry_reach_the_bus(store_url: str) -> None:
    hypha = _hypha(store_url, HYPHA_BUS_MAX_MESSAGE_BYTES="600",
                   HYPHA_BUS_MAX_DELIVERY_ATTEMPTS="1", HYPHA_BUS_RETRY_INITIAL_DELAY_MS="5",
                   HYPHA_BUS_RETENTION="60", HYPHA_BUS_PRUNE_BATCH="7",
                   HYPHA_BUS_AGENT_HOLD="120")
    try:
        sc = scope()
        with pytest.raises(MessageTooLarge):
            hypha.bus.publish(message(sc, human("bob"), payload="x" * 600))
        sent = hypha.bus.publish(message(sc, human("bob")))
        assert hypha.bus.pull(human("bob"), sc) is not None
        # one delivery allowed: a retry dead-letters instead of requeueing
        assert hypha.bus.fail(sent.id, "boom", retry=True).status.value == "dead_lettered"
        assert hypha.bus.retry.initial_delay_ms == 5
        assert (hypha.bus.limits.retention_s, hypha.bus.limits.prune_batch) == (60.0, 7)
        assert hypha.bus.limits.agent_hold_s == 120.0
    finally:
        hypha.close()


@pytest.mark.parametrize(("name", "value"), [
    ("HYPHA_BUS_MAX_QUEUE_MESSAGES", "0"), ("HYPHA_BUS_MAX_QUEUE_BYTES", "many"),
    ("HYPHA_BUS_MAX_MESSAGE_BYTES", "1.5"), ("HYPHA_BUS_ACK_DEADLINE", "0"),
    ("HYPHA_BUS_RETENTION", "-1"), ("HYPHA_BUS_RETRY_MULTIPLIER", "0.5"),
    ("HYPHA_BUS_RETRY_MAX_DELAY_MS", "nan"), ("HYPHA_BUS_MAX_DELIVERY_ATTEMPTS", "0"),
    ("HYPHA_BUS_AGENT_HOLD", "0"),
])
def test_a_bad_value_is_a_setup_error_naming_it(name: str, value: str) -> None:
    with pytest.raises(SetupError, match=name):
        Settings.from_env({name: value})


def test_every_bus_setting_has_its_variable() -> None:
    """Each field is read from the environment (a new field cannot be forgotten)."""
    names = {f.name: f for f in dataclasses.fields(BusSettings)}
    env = {"HYPHA_BUS_MAX_MESSAGE_BYTES": "11", "HYPHA_BUS_MAX_QUEUE_MESSAGES": "12",
           "HYPHA_BUS_MAX_QUEUE_BYTES": "13", "HYPHA_BUS_ACK_DEADLINE": "14",
           "HYPHA_BUS_RETENTION": "15", "HYPHA_BUS_PRUNE_BATCH": "16",
           "HYPHA_BUS_MAX_DELIVERY_ATTEMPTS": "17", "HYPHA_BUS_RETRY_INITIAL_DELAY_MS": "18",
           "HYPHA_BUS_RETRY_MAX_DELAY_MS": "19", "HYPHA_BUS_RETRY_MULTIPLIER": "20",
           "HYPHA_BUS_AGENT_HOLD": "21"}
    got = dataclasses.asdict(BusSettings.from_env(env))
    assert len(names) == len(env) and sorted(got.values()) == list(range(11, 22))
