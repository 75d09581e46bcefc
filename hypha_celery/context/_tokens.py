"""Token counting offline: OpenAI's BPE encodings (the ``tokens`` extra, ``bpe-openai``:
the encodings ship inside its wheel, nothing is fetched at run time) and a documented
estimator as the fallback, chosen per model by :func:`tokenizer_for`.

Every tokenizer frames chat messages the way OpenAI's cookbook counts them
(``num_tokens_from_messages``): each message costs 3 tokens, plus its role, its content
and every other string value it holds (``name``: one more), and the reply is primed with
3 more. The estimator uses the same framing with its own count of the strings.
"""

from __future__ import annotations

import importlib
import re
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol, runtime_checkable

from hypha_celery.errors import ContextSpecError, ExtraNotInstalled
from hypha_celery.events.envelope import canonical

__all__ = ["PER_MESSAGE", "REPLY_PRIMING", "BpeTokenizer", "EstimatorTokenizer", "Tokenizer",
           "TokenizerFactory",
           "register_tokenizer", "tokenizer_for"]

INSTALL_HINT = "pip install 'hypha-celery[tokens]'"
#: Tokens every chat message costs beyond its strings (OpenAI's cookbook).
PER_MESSAGE = 3
#: Tokens the reply is primed with (``<|start|>assistant<|message|>``).
REPLY_PRIMING = 3


class _Encoding(Protocol):
    def encode_ordinary(self, text: str) -> list[int]: ...

    def decode_bytes(self, tokens: list[int]) -> bytes: ...


@runtime_checkable
class Tokenizer(Protocol):
    """Counts tokens of text and of chat messages (``{"role", "content", ...}``)."""

    @property
    def name(self) -> str: ...

    def count(self, text: str) -> int:
        """Tokens of ``text`` alone."""
        ...

    def count_messages(self, messages: Iterable[Mapping[str, object]]) -> int:
        """Tokens of a whole prompt: each message framed, plus the reply priming."""
        ...

    def frame(self, role: str) -> int:
        """Tokens a message of ``role`` costs beyond its content."""
        ...

    def truncate(self, text: str, tokens: int) -> str:
        """The longest head of ``text`` of at most ``tokens`` tokens, cut at a token
        boundary (never inside a character)."""
        ...


class _Framed:
    """The cookbook's framing over a subclass's :meth:`count`."""

    name: str

    def count(self, text: str) -> int:
        raise NotImplementedError

    def frame(self, role: str) -> int:
        return PER_MESSAGE + self.count(role)

    def count_messages(self, messages: Iterable[Mapping[str, object]]) -> int:
        total = REPLY_PRIMING
        for message in messages:
            total += PER_MESSAGE
            for key, value in message.items():
                if value is None:
                    continue
                text = value if isinstance(value, str) else canonical(value)
                total += self.count(text) + (key == "name")
        return total


class BpeTokenizer(_Framed):
    """Exact counts for OpenAI models: ``encoding`` is ``o200k_base`` (GPT-4o, 4.1, 5, o
    series) or ``cl100k_base`` (GPT-4, GPT-3.5). Needs the ``tokens`` extra
    (``ExtraNotInstalled`` names it); the encoding is loaded once per process."""

    def __init__(self, encoding: str = "o200k_base") -> None:
        self.encoding = encoding
        self.name = f"bpe:{encoding}"
        self._enc = _encoding(encoding)

    def count(self, text: str) -> int:
        return len(self._enc.encode_ordinary(text)) if text else 0

    def truncate(self, text: str, tokens: int) -> str:
        ids = self._enc.encode_ordinary(text)
        if len(ids) <= tokens:
            return text
        keep = max(0, tokens)
        while True:  # a split character is left out; its head may count differently
            head = self._enc.decode_bytes(ids[:keep]).decode("utf-8", errors="ignore")
            if keep == 0 or self.count(head) <= tokens:
                return head
            keep -= 1

    def __repr__(self) -> str:
        return f"BpeTokenizer({self.encoding!r})"


_ENCODINGS: dict[str, _Encoding] = {}
_ENCODINGS_LOCK = threading.Lock()


def _encoding(name: str) -> _Encoding:
    with _ENCODINGS_LOCK:
        found = _ENCODINGS.get(name)
        if found is None:
            found = _ENCODINGS[name] = _load(name)
        return found


def _load(name: str) -> _Encoding:
    # bpe-openai reads its data with importlib.resources' legacy API (a DeprecationWarning
    # on Python 3.11+, an error under ``-W error``): not ours to fix, so not shown
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            module = importlib.import_module("bpe_openai")
        except ImportError as exc:
            raise ExtraNotInstalled(f"exact token counts need bpe-openai: {INSTALL_HINT} "
                                    "(or use EstimatorTokenizer)") from exc
        try:
            found: _Encoding = module.get_encoding(name)
        except (KeyError, ValueError, module.TokenizerError) as exc:
            raise ContextSpecError(f"unknown BPE encoding {name!r}") from exc
    return found


_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_RUNS = re.compile(rf"([{_CJK}])|([A-Za-z]+)|([^\W\d_A-Za-z{_CJK}]+)|(\d+)|(\s+)|([^\w\s]+)")


class EstimatorTokenizer(_Framed):
    """An estimate without a vocabulary: the text is split into runs and each run costs

    * a CJK character (Han, kana, Hangul): 1;
    * a run of ASCII letters: ceil(length / 6);  other letters (Cyrillic, Greek, Arabic,
      accented ...): ceil(length / 4);
    * a run of digits: ceil(length / 3);  of punctuation and symbols: ceil(length / 2);
    * whitespace: ceil(newlines / 2) (spaces are free: BPE joins them to the next word).

    Tuned on o200k_base to overestimate English prose by about 20 % (measured errors:
    docs/context.md). Each run's cost is a ceiling of its length, so the estimate of a
    concatenation is never more than the sum of its parts' estimates.
    """

    name = "estimator"

    def count(self, text: str) -> int:
        n = 0
        for cjk, ascii_, other, digits, space, punct in _RUNS.findall(text):
            if cjk:
                n += 1
            elif ascii_:
                n += -(-len(ascii_) // 6)
            elif other:
                n += -(-len(other) // 4)
            elif digits:
                n += -(-len(digits) // 3)
            elif space:
                n += -(-space.count("\n") // 2)
            else:
                n += -(-len(punct) // 2)
        return n

    def truncate(self, text: str, tokens: int) -> str:
        """A binary search for the longest head within ``tokens`` (at character
        boundaries: an estimate has no token boundaries of its own)."""
        if self.count(text) <= tokens:
            return text
        lo, hi = 0, len(text)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.count(text[:mid]) <= tokens:
                lo = mid
            else:
                hi = mid - 1
        return text[:lo]

    def __repr__(self) -> str:
        return "EstimatorTokenizer()"


# -- per provider ---------------------------------------------------------------------------
TokenizerFactory = Callable[[str], Tokenizer]  # the model name (after "provider:") in
_REGISTRY: dict[str, TokenizerFactory] = {}
_CACHE: dict[str, Tokenizer] = {}
_LOCK = threading.Lock()
_CL100K = re.compile(r"^(gpt-4(?!o|\.\d)|gpt-3\.5|text-embedding-)")


def _openai(model: str) -> Tokenizer:
    """``cl100k_base`` for GPT-4 (not 4o / 4.1), GPT-3.5 and the embedding models,
    ``o200k_base`` for everything newer."""
    return BpeTokenizer("cl100k_base" if _CL100K.match(model) else "o200k_base")


def _estimate(model: str) -> Tokenizer:
    return EstimatorTokenizer()


def register_tokenizer(provider: str, factory: TokenizerFactory) -> None:
    """Count tokens of ``provider:*`` models with ``factory(model)`` (replaces the
    provider's current one; cached tokenizers of it are forgotten)."""
    if not provider or ":" in provider:
        raise ContextSpecError(f"a provider name without ':' is needed, not {provider!r}")
    with _LOCK:
        _REGISTRY[provider] = factory
        for ref in [ref for ref in _CACHE if ref.partition(":")[0] == provider]:
            del _CACHE[ref]


def tokenizer_for(model_ref: str) -> Tokenizer:
    """The tokenizer of ``model_ref`` (``"openai:gpt-4.1-mini"``): ``openai`` and
    ``openai-chat`` models count exactly with their BPE encoding; ``anthropic`` models
    and unknown providers use the estimator (Anthropic publishes no tokenizer for its
    current models). One tokenizer per model reference and process."""
    with _LOCK:
        found = _CACHE.get(model_ref)
        if found is not None:
            return found
        provider, _, model = model_ref.partition(":")
        if not model:
            provider, model = "", model_ref
        factory = _REGISTRY.get(provider, _estimate)
    made = factory(model)
    with _LOCK:
        return _CACHE.setdefault(model_ref, made)


#: ``openai-chat`` is OpenAI's Chat Completions API (the same models, the same encodings).
_REGISTRY.update({"openai": _openai, "openai-chat": _openai, "anthropic": _estimate})
