"""The tokenizers against what the provider reports: prompts sent with the official openai
SDK over HTTP to the fake provider, which reports the prompt's tokens as OpenAI counts
them (tests/fakes/llm_server.py, ``MeteredServer``). BpeTokenizer must match exactly; the
estimator's relative error is measured and bounded (docs/context.md quotes it)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from hypha_celery.context import BpeTokenizer, EstimatorTokenizer
from tests.context.samples import SAMPLES
from tests.fakes.llm_server import MeteredServer, Reply

#: The estimator's largest relative error on SAMPLES (measured: docs/context.md).
ESTIMATOR_BOUND = 0.35


@pytest.fixture
def server() -> Iterator[MeteredServer]:
    with MeteredServer() as fake:
        yield fake


def reported(server: MeteredServer, messages: list[dict[str, Any]]) -> int:
    client = openai.OpenAI(base_url=server.base_url, api_key=server.api_key, max_retries=0)
    done = client.chat.completions.create(model="gpt-4.1-mini",
                                          messages=messages)  # type: ignore[arg-type]
    assert done.usage is not None
    return done.usage.prompt_tokens


def prompt(text: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": "You answer briefly."},
            {"role": "user", "content": text}]


def test_scripted_usage_is_kept(server: MeteredServer) -> None:
    server.script(Reply.text("ok", usage=(77, 5, 0, 0)))
    assert reported(server, prompt("hi")) == 77
    assert reported(server, prompt("hi")) != 77


def test_bpe_matches_the_reported_usage_exactly(server: MeteredServer) -> None:
    bpe = BpeTokenizer("o200k_base")
    for text in SAMPLES.values():
        assert bpe.count_messages(prompt(text)) == reported(server, prompt(text))
    conversation = [m for text in SAMPLES.values() for m in prompt(text)]
    assert bpe.count_messages(conversation) == reported(server, conversation)


def test_estimator_error_is_bounded(server: MeteredServer) -> None:
    est = EstimatorTokenizer()
    errors: dict[str, float] = {}
    for name, text in SAMPLES.items():
        truth = reported(server, [{"role": "user", "content": text}]) - 3 - 4  # the text
        errors[name] = (est.count(text) - truth) / truth
    worst = max(abs(e) for e in errors.values())
    print({k: round(v, 3) for k, v in errors.items()}, "worst", round(worst, 3))
    assert worst <= ESTIMATOR_BOUND, errors
    assert errors["english"] > 0  # English is overestimated (the safe side)
