"""The BM25 build: the (term, chunk) counts equal a count written here, the weighing block size (``WEIGH_BLOCK``)
bounds its temporaries but not its result, and the weights equal the formula."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

import incidentlib.search.lexical as lexical
from incidentlib.search.lexical import BM25_B, BM25_K1, build_postings, postings_from_tokens
from incidentlib.search.tokenize import tokenize

WORDS = ["GPU", "Xid", "79", "NCCL", "timeout", "장애", "학습이", "rank", "node-3", "link", "down", "retry", "the", ""]


def corpus(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 12))) for _ in range(count)]


def same(a: lexical.Postings, b: lexical.Postings) -> None:
    assert a.vocabulary == b.vocabulary and a.size == b.size
    for name in ("indptr", "indices", "data", "tf", "lengths"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name


@pytest.mark.parametrize("weigh_block", [1, 7, 5])
def test_blocks_do_not_change_postings(monkeypatch: pytest.MonkeyPatch, weigh_block: int) -> None:
    """Postings weighed in blocks equal those weighed at once, counted by the sort or the sparse matrix alike."""
    texts = corpus(200, seed=weigh_block)
    whole_texts, whole_tokens = build_postings(texts), postings_from_tokens((tokenize(t) for t in texts), len(texts))
    monkeypatch.setattr(lexical, "SPARSE_COUNT_TOKENS", 0)  # the small corpus counted by the sparse matrix
    monkeypatch.setattr(lexical, "WEIGH_BLOCK", weigh_block)
    same(build_postings(texts), whole_texts)
    same(postings_from_tokens((tokenize(t) for t in texts), len(texts)), whole_tokens)
    assert whole_texts.indices.dtype == np.int32 and whole_texts.data.dtype == np.float32


def test_weights_follow_the_formula(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lexical, "WEIGH_BLOCK", 9)
    texts = corpus(60, seed=11)
    p = build_postings(texts)
    tokens = [tokenize(t) or [lexical.EMPTY_TOKEN] for t in texts]
    average = sum(map(len, tokens)) / len(tokens)
    checked = 0
    for term, word in enumerate(p.vocabulary):
        holders = [c for c, toks in enumerate(tokens) if word in toks]
        start, end = int(p.indptr[term]), int(p.indptr[term + 1])
        assert p.indices[start:end].tolist() == holders
        idf = math.log(1.0 + (len(texts) - len(holders) + 0.5) / (len(holders) + 0.5))
        for at, chunk in zip(range(start, end), holders, strict=True):
            tf = tokens[chunk].count(word)
            expected = idf * tf / (tf + BM25_K1 * (1.0 - BM25_B + BM25_B * len(tokens[chunk]) / average))
            assert p.tf[at] == tf and p.data[at] == pytest.approx(expected, rel=1e-6)
            checked += 1
    assert checked == len(p.data) > 0


@pytest.mark.parametrize("batches, sparse", [(1, True), (3, True), (1, False), (3, False)])
def test_pairs_count_each_term_of_each_chunk(monkeypatch: pytest.MonkeyPatch, batches: int, sparse: bool) -> None:
    """``_pairs`` gives every distinct (term, chunk) once, term-major with chunks ascending, with its count, with
    scipy's sparse matrices (many tokens) and with numpy's sort (few); the token ids may come in several arrays."""
    monkeypatch.setattr(lexical, "SPARSE_COUNT_TOKENS", 0 if sparse else 10**9)
    calls: list[int] = []
    real = lexical._pairs_by_sort
    monkeypatch.setattr(lexical, "_pairs_by_sort", lambda *args: calls.append(1) or real(*args))
    rng = np.random.default_rng(batches)
    lengths = rng.integers(1, 30, size=400).astype(np.int32)
    ids = rng.integers(0, 12, size=int(lengths.sum())).astype(np.int32)  # few terms: many repeats in a chunk
    chunk_of_token = np.repeat(np.arange(len(lengths)), lengths)
    expected: dict[tuple[int, int], int] = {}
    for term, chunk in zip(ids.tolist(), chunk_of_token.tolist(), strict=True):
        expected[term, chunk] = expected.get((term, chunk), 0) + 1
    parts = np.array_split(ids, batches)
    runs, chunks, counts, kept_lengths = lexical._pairs(parts, lengths)
    assert parts == [] and kept_lengths is lengths and runs[0] == 0 and len(runs) == int(ids.max()) + 2
    terms = np.repeat(np.arange(len(runs) - 1), np.diff(runs))
    found = list(zip(terms.tolist(), chunks.tolist(), strict=True))
    assert found == sorted(expected) and counts.tolist() == [expected[pair] for pair in found]
    assert counts.dtype == np.int32 and chunks.dtype == np.int32 and int(counts.sum()) == len(ids)
    assert calls == ([] if sparse else [1])
    empty = lexical._pairs([], np.zeros(0, dtype=np.int32))
    assert empty[0].tolist() == [0] and len(empty[1]) == len(empty[2]) == 0
