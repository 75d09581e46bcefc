"""For any items and budgets: the context fits (or BudgetTooSmall), keeps every required
item, and is the same for the same items in any order."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hypha_celery.context import (
    REPLY_PRIMING,
    BuiltContext,
    ContextBudget,
    ContextItem,
    ContextSource,
    EstimatorTokenizer,
    Tokenizer,
    TurnRole,
    build_context,
    tokenizer_for,
)
from hypha_celery.errors import BudgetTooSmall

TOKENIZERS: tuple[Tokenizer, ...] = (EstimatorTokenizer(), tokenizer_for("openai:gpt-4o"))
TEXT = st.text(st.sampled_from("ab cd\n{}\"é上9"), max_size=40)


@st.composite
def items(draw: st.DrawFn) -> ContextItem:
    source = draw(st.sampled_from(ContextSource))
    role: TurnRole | None = None
    if source is ContextSource.CONVERSATION:
        role = draw(st.sampled_from(["user", "assistant"]))
    return ContextItem(source, draw(st.sampled_from("abcdef")), draw(TEXT),
                       revision=draw(st.none() | st.integers(0, 2) | st.sampled_from("xy")),
                       role=role, priority=draw(st.integers(-2, 2)),
                       order=draw(st.integers(0, 5)),
                       required=draw(st.booleans().map(lambda b: b and draw(st.booleans()))),
                       group=draw(st.none() | st.sampled_from("gh")))


@st.composite
def budgets(draw: st.DrawFn) -> ContextBudget:
    total = draw(st.integers(1, 400))
    caps = draw(st.dictionaries(st.sampled_from(ContextSource), st.integers(0, total)))
    truncate = draw(st.frozensets(st.sampled_from(ContextSource)))
    return ContextBudget(total, caps, truncate)


def build(given: list[ContextItem], budget: ContextBudget, tokenizer: Tokenizer) -> BuiltContext:
    return build_context(given, budget=budget, tokenizer=tokenizer, build_id="p", purpose="t")


@settings(max_examples=300, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(items(), max_size=30), budgets(), st.sampled_from(TOKENIZERS), st.randoms())
def test_fits_keeps_required_and_is_deterministic(given: list[ContextItem],
                                                  budget: ContextBudget,
                                                  tokenizer: Tokenizer, rnd: object) -> None:
    try:
        built = build(given, budget, tokenizer)
    except BudgetTooSmall as exc:
        assert exc.needed > exc.budget
        return
    charged = sum(built.tokens_by_source.values()) + REPLY_PRIMING
    assert charged <= budget.total
    for source, tokens in built.tokens_by_source.items():
        assert tokens <= budget.cap(source)
    assert built.tokens <= charged  # the exact count never exceeds what was charged
    kept = {(i.item.source, i.item.id, i.item.revision) for i in built.included}
    memory = {i.item.text for i in built.included if i.item.source is ContextSource.MEMORY}
    for item in given:  # a memory record may stand for another with the same text
        if item.required:
            assert (item.source, item.id, item.revision) in kept or (
                item.source is ContextSource.MEMORY and item.text in memory)
    shuffled = list(given)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    again = build(shuffled, budget, tokenizer)
    assert again.context_hash == built.context_hash and again.messages == built.messages
