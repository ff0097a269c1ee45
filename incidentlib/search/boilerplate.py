"""Boilerplate of a collection: sentences that many of its records share word for word.

A postmortem archive repeats its template in every record ("Summary of impact", "We
sincerely apologize for the impact…", "Next steps").  Those sentences say nothing about
*this* incident, yet weigh as much as the part that differs.  A sentence is boilerplate
when its normalised form (lowercase, digits as 0, punctuation and spacing collapsed)
occurs in at least ``MIN_RECORDS`` records *and* in at least ``MIN_SHARE`` of them.
Boilerplate is removed from what similarity compares, on both the query and the candidate
side; stored text and what is displayed are unchanged.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

# Two records can share a sentence by quoting the same source; a third copy is a template.
MIN_RECORDS = 3
# In a large archive three records may quote one status message; a template is in ≥ 1 % of them.
MIN_SHARE = 0.01
_SENTENCE = re.compile(r"(?<=[.!?。])\s+|\n+")
_NOISE = re.compile(r"[\W_]+", re.UNICODE)


_DIGIT = re.compile(r"\d")


def sentence_key(sentence: str) -> str:
    return _NOISE.sub(" ", _DIGIT.sub("0", sentence.lower())).strip()


def split(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def sentence_keys(text: str) -> list[str]:
    """``sentence_key(s)`` for each ``s`` of ``split(text)``, in order, the text lowercased and its digits made 0 once
    for all its sentences: neither changes where it splits (no character lowercases to, or from, white space or
    sentence-ending punctuation)."""
    return [_NOISE.sub(" ", s).strip() for s in split(_DIGIT.sub("0", text.lower()))]


class Boilerplate:
    def __init__(self, texts: Sequence[str], min_records: int = MIN_RECORDS) -> None:
        counts: Counter[str] = Counter()
        for text in texts:
            counts.update({k for k in sentence_keys(text) if k})
        threshold = max(min_records, math.ceil(MIN_SHARE * len(texts)))
        self.keys = frozenset(k for k, n in counts.items() if n >= threshold)

    @classmethod
    def from_keys(cls, keys: frozenset[str]) -> Boilerplate:
        """The model whose boilerplate sentence keys are ``keys`` (one saved earlier), without counting any text."""
        model = cls([])
        model.keys = keys
        return model

    def is_boilerplate(self, sentence: str) -> bool:
        return sentence_key(sentence) in self.keys

    def is_all_boilerplate(self, text: str) -> bool:
        sentences = split(text)
        return bool(sentences) and all(self.is_boilerplate(s) for s in sentences)

    def strip(self, text: str) -> str:
        """``text`` without its boilerplate sentences (paragraph breaks kept)."""
        if not self.keys:
            return text
        paragraphs = []
        for paragraph in re.split(r"\n\s*\n", text):
            kept = [s for s, key in zip(split(paragraph), sentence_keys(paragraph), strict=True) if key not in self.keys]
            if kept:
                paragraphs.append(" ".join(kept))
        return "\n\n".join(paragraphs)
