"""BM25 over chunks (bm25s), with the bilingual tokenizer."""

from __future__ import annotations

from collections.abc import Sequence

import bm25s
import numpy as np

from .tokenize import tokenize

#: BM25 term-frequency saturation and length normalisation: the usual textbook defaults
#: (k1 = 1.2, b = 0.75), not tuned on this library.
BM25_K1 = 1.2
BM25_B = 0.75


class LexicalIndex:
    """Scores every chunk for a query; filtering is a mask applied before ranking."""

    def __init__(self, texts: Sequence[str], k1: float = BM25_K1, b: float = BM25_B,
                 memo: dict[str, list[str]] | None = None) -> None:
        """``memo`` (text -> tokens) carries tokenization over from an earlier index of a changed corpus:
        after a write only the new or edited chunks are tokenized; the memo keeps just this corpus's texts."""
        if memo is None:
            self._tokens = [tokenize(text) for text in texts]
        else:
            self._tokens = [memo[text] if text in memo else tokenize(text) for text in texts]
            memo.clear()
            memo.update(zip(texts, self._tokens, strict=True))
        self._retriever = bm25s.BM25(k1=k1, b=b)
        self._size = len(texts)
        if self._size:
            # bm25s needs at least one token per document to build its vocabulary
            self._retriever.index([tokens or ["∅"] for tokens in self._tokens], show_progress=False)

    def __len__(self) -> int:
        return self._size

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every chunk (zeros when no query token is known)."""
        if not self._size:
            return np.zeros(0, dtype=np.float32)
        tokens = tokenize(query)
        if not tokens:
            return np.zeros(self._size, dtype=np.float32)
        return np.asarray(self._retriever.get_scores(tokens), dtype=np.float32)

    def matched_terms(self, query: str, chunk_index: int) -> list[str]:
        """Query tokens that occur in one chunk, in query order (bigram fragments left out)."""
        present = set(self._tokens[chunk_index])
        seen: dict[str, None] = {}
        for token in tokenize(query):
            if token in present and not _is_fragment(token, query):
                seen.setdefault(token, None)
        return list(seen)


def _is_fragment(token: str, query: str) -> bool:
    # Hangul bigrams are matching aids, and runs of zeros (PCI addresses) carry no meaning:
    # neither is a word a user would recognise as "matched".
    if len(token) < 2 or set(token) == {"0"}:
        return True
    return len(token) == 2 and all("\uac00" <= ch <= "\ud7a3" for ch in token) and token not in query.split()
