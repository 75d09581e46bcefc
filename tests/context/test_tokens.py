"""The tokenizers: exact BPE counts, the estimator's rule, per-provider choice."""

from __future__ import annotations

import sys

import pytest

from hypha_celery.context import (
    BpeTokenizer,
    EstimatorTokenizer,
    Tokenizer,
    _tokens,
    register_tokenizer,
    tokenizer_for,
)
from hypha_celery.errors import ContextSpecError, ExtraNotInstalled
from tests.context.samples import SAMPLES


def test_bpe_counts_known_strings() -> None:
    bpe = BpeTokenizer("o200k_base")
    assert bpe.name == "bpe:o200k_base" and isinstance(bpe, Tokenizer)
    assert bpe.count("hello world") == 2 and bpe.count("") == 0
    assert bpe.frame("user") == 4
    assert bpe.count_messages([{"role": "user", "content": "hello world"}]) == 3 + 4 + 2


def test_truncate_at_a_token_boundary() -> None:
    for tokenizer in (BpeTokenizer(), EstimatorTokenizer()):
        for text in SAMPLES.values():
            head = tokenizer.truncate(text, 7)
            assert text.startswith(head) and 0 < tokenizer.count(head) <= 7
            assert tokenizer.truncate(text, 10_000) == text


def test_estimator_rule() -> None:
    est = EstimatorTokenizer()
    assert est.count("abcdef") == 1 and est.count("abcdefg") == 2
    assert est.count("上下文") == 3 and est.count("привет") == 2
    assert est.count("12345") == 2 and est.count("{}") == 1 and est.count("\n\n\n") == 2
    assert est.count("a b") == 2  # spaces are free
    for a in SAMPLES.values():  # never more for a concatenation than for its parts
        for b in SAMPLES.values():
            assert est.count(a + b) <= est.count(a) + est.count(b)


def test_tokenizer_per_provider() -> None:
    assert tokenizer_for("openai:gpt-4.1-mini").name == "bpe:o200k_base"
    assert tokenizer_for("openai:gpt-4o").name == "bpe:o200k_base"
    assert tokenizer_for("openai:gpt-4-turbo").name == "bpe:cl100k_base"
    assert tokenizer_for("openai:gpt-3.5-turbo").name == "bpe:cl100k_base"
    assert tokenizer_for("openai-chat:gpt-4o-mini").name == "bpe:o200k_base"
    assert tokenizer_for("anthropic:claude-sonnet-4-5").name == "estimator"
    assert tokenizer_for("mystery:model").name == "estimator"
    assert tokenizer_for("no-provider").name == "estimator"
    assert tokenizer_for("openai:gpt-4o") is tokenizer_for("openai:gpt-4o")


def test_register_a_provider() -> None:
    register_tokenizer("acme", lambda model: BpeTokenizer("cl100k_base"))
    try:
        assert tokenizer_for("acme:m1").name == "bpe:cl100k_base"
    finally:
        register_tokenizer("acme", lambda model: EstimatorTokenizer())
    assert tokenizer_for("acme:m1").name == "estimator"
    with pytest.raises(ContextSpecError):
        register_tokenizer("a:b", lambda model: EstimatorTokenizer())


def test_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_tokens, "_ENCODINGS", {})
    monkeypatch.setitem(sys.modules, "bpe_openai", None)
    with pytest.raises(ExtraNotInstalled, match=r"hypha-celery\[tokens\]"):
        BpeTokenizer("o200k_base")


def test_unknown_encoding() -> None:
    with pytest.raises(ContextSpecError):
        BpeTokenizer("nope_base")
