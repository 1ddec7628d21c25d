"""Rule-based sentiment labels for short texts such as product reviews (the mock model's).

Each word or phrase of the lexicons below carries a weight (1 mild, 2 strong). A negator
(``not``, ``no``, ``never``, ``n't``...) up to three words before a word flips its polarity
within the clause. Phrases are matched before single words, and their words are then spent,
so "nothing special" counts once, as neutral, and "special" is not read again.

With ``P`` the positive weight and ``N`` the negative weight:

- both zero: ``neutral``;
- one part of the text leaning positive and another negative, the parts split by a contrast
  word (``but``, ``however``, ``although``, ``though``, ``yet``): ``mixed``;
- both present and the smaller more than half the larger: ``mixed``;
- otherwise the larger side: ``positive`` or ``negative``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["LABELS", "Label", "SentimentScore", "score_sentiment"]

Label = Literal["positive", "negative", "neutral", "mixed"]
LABELS: tuple[Label, ...] = ("positive", "negative", "neutral", "mixed")


def _words(text: str) -> list[str]:
    return text.split()


_POSITIVE: dict[str, int] = {
    **dict.fromkeys(
        _words(
            "good nice decent solid sturdy reliable comfortable happy pleased glad fast quick easy "
            "helpful friendly clean smooth handy useful worth recommend recommended works "
            "working satisfied enjoy enjoyed like liked pretty reasonable affordable fun bargain "
            "beautiful bright quiet responsive durable fresh tasty improved accurate"
        ),
        1,
    ),
    **dict.fromkeys(
        _words(
            "great excellent amazing awesome fantastic outstanding superb perfect love loved loves "
            "wonderful brilliant best exceptional flawless delighted impressive impressed "
            "incredible stellar gorgeous exceeded superior favourite favorite"
        ),
        2,
    ),
}

_NEGATIVE: dict[str, int] = {
    **dict.fromkeys(
        _words(
            "bad poor slow late cheaply flimsy noisy loud annoying disappointing disappointed "
            "problem problems issue issues wrong missing difficult hard confusing expensive "
            "overpriced small tiny leaking leaks leaked scratched dented stained stiff buggy "
            "laggy crashes crashed unhappy unreliable mediocre meh return returned returning "
            "refund complaint complaints weak smelly dull damaged delayed defect defective dies "
            "died dead fails failed cracked torn ripped faulty uncomfortable ugly flaky"
        ),
        1,
    ),
    **dict.fromkeys(
        _words(
            "terrible awful horrible worst useless broken broke garbage junk hate hated hates "
            "disgusting dreadful pathetic unacceptable scam fraud dangerous unusable "
            "rude nightmare furious"
        ),
        2,
    ),
}

# Phrases are matched first; a weight of 0 marks a neutral phrase that spends its words.
_PHRASES: dict[str, tuple[int, int]] = {
    "waste of money": (0, 2),
    "waste of time": (0, 2),
    "fell apart": (0, 2),
    "stopped working": (0, 2),
    "does not work": (0, 2),
    "doesn't work": (0, 2),
    "not worth": (0, 1),
    "never again": (0, 2),
    "as advertised": (1, 0),
    "as described": (1, 0),
    "works as expected": (1, 0),
    "does the job": (1, 0),
    "does what it says": (1, 0),
    "five stars": (2, 0),
    "one star": (0, 2),
    "nothing special": (0, 0),
    "as expected": (0, 0),
    "so so": (0, 0),
    "so-so": (0, 0),
}

_NEGATORS = frozenset(
    _words(
        "not no never none nothing without hardly barely isn't wasn't aren't weren't don't "
        "doesn't didn't can't cannot couldn't won't wouldn't shouldn't"
    )
)
_CONTRASTS = frozenset(_words("but however although though yet"))
_CLAUSE_BREAKS = frozenset(_words(", . ; : ! ?")) | _CONTRASTS
_NEGATION_REACH = 3
_TOKEN = re.compile(r"[a-z]+(?:['\-][a-z]+)*|[,.;:!?]")


@dataclass(frozen=True)
class SentimentScore:
    """The weights found in a text: ``positive`` and ``negative`` are sums of word weights."""

    positive: int
    negative: int
    contrasted: bool = False

    @property
    def label(self) -> Label:
        """The label these weights give, by the rule in the module docstring."""
        p, n = self.positive, self.negative
        if p == 0 and n == 0:
            return "neutral"
        if self.contrasted or (p > 0 and n > 0 and min(p, n) * 2 > max(p, n)):
            return "mixed"
        return "positive" if p > n else "negative" if n > p else "neutral"


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower().replace("\u2019", "'"))


def _negated(tokens: list[str], index: int) -> bool:
    for back in range(1, _NEGATION_REACH + 1):
        j = index - back
        if j < 0 or tokens[j] in _CLAUSE_BREAKS:
            return False
        if tokens[j] in _NEGATORS:
            return True
    return False


def score_sentiment(text: str) -> SentimentScore:
    """Sum the positive and negative weights of ``text``'s words and phrases."""
    tokens = _tokens(text)
    spent = [False] * len(tokens)
    # Weights per part of the text between contrast words: [positive, negative].
    parts: list[list[int]] = [[0, 0]]
    part_of = []
    for token in tokens:
        part_of.append(len(parts) - 1)
        if token in _CONTRASTS:
            parts.append([0, 0])

    def add(pos: int, neg: int, at: int) -> None:
        if _negated(tokens, at):
            pos, neg = neg, pos
        parts[part_of[at]][0] += pos
        parts[part_of[at]][1] += neg

    for phrase, (pos, neg) in _PHRASES.items():
        words = _tokens(phrase)
        width = len(words)
        for i in range(len(tokens) - width + 1):
            if tokens[i : i + width] == words and not any(spent[i : i + width]):
                spent[i : i + width] = [True] * width
                add(pos, neg, i)
    for i, token in enumerate(tokens):
        if spent[i] or token in _NEGATORS:
            continue
        if token in _POSITIVE:
            add(_POSITIVE[token], 0, i)
        elif token in _NEGATIVE:
            add(0, _NEGATIVE[token], i)
    leanings = {(p > n) - (n > p) for p, n in parts}
    return SentimentScore(
        positive=sum(p for p, _ in parts),
        negative=sum(n for _, n in parts),
        contrasted={1, -1} <= leanings,
    )
