"""The BM25 build's block sizes (``KEY_BLOCK``, ``WEIGH_BLOCK``) bound its temporaries but not its result: postings
built with blocks of a few chunks or pairs equal those built in one block, and the weights equal the formula."""

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


@pytest.mark.parametrize("key_block, weigh_block", [(1, 1), (3, 7), (64, 5)])
def test_blocks_do_not_change_postings(monkeypatch: pytest.MonkeyPatch, key_block: int, weigh_block: int) -> None:
    texts = corpus(200, seed=key_block)
    whole_texts, whole_tokens = build_postings(texts), postings_from_tokens((tokenize(t) for t in texts), len(texts))
    monkeypatch.setattr(lexical, "KEY_BLOCK", key_block)
    monkeypatch.setattr(lexical, "WEIGH_BLOCK", weigh_block)
    same(build_postings(texts), whole_texts)
    same(postings_from_tokens((tokenize(t) for t in texts), len(texts)), whole_tokens)
    assert whole_texts.indices.dtype == np.int32 and whole_texts.data.dtype == np.float32


def test_weights_follow_the_formula(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lexical, "KEY_BLOCK", 4)
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
            assert p.data[at] == pytest.approx(expected, rel=1e-6)
            checked += 1
    assert checked == len(p.data) > 0


@pytest.mark.parametrize("split_at", [1, 2, 100])
def test_sorting_the_keys_in_two_halves_does_not_change_postings(monkeypatch: pytest.MonkeyPatch, split_at: int) -> None:
    texts = corpus(700, seed=7)  # a small vocabulary: many runs of equal keys straddle the middle of the keys
    whole = build_postings(texts)
    monkeypatch.setattr(lexical, "SPLIT_SORT_KEYS", split_at)
    monkeypatch.setattr(lexical, "usable_cores", lambda: 2)  # the split runs on a one-core machine too
    halves = []
    real_halves = lexical._sorted_runs_in_halves
    monkeypatch.setattr(lexical, "_sorted_runs_in_halves", lambda keys: halves.append(len(keys)) or real_halves(keys))
    same(build_postings(texts), whole)
    same(postings_from_tokens([tokenize(t) for t in texts], len(texts)), whole)
    assert len(halves) == 2  # both builds took the two-thread path


def test_one_core_sorts_the_keys_in_one_piece(monkeypatch: pytest.MonkeyPatch) -> None:
    texts = corpus(300, seed=9)
    whole = build_postings(texts)
    monkeypatch.setattr(lexical, "SPLIT_SORT_KEYS", 1)
    monkeypatch.setattr(lexical, "usable_cores", lambda: 1)
    monkeypatch.setattr(lexical, "_sorted_runs_in_halves", lambda keys: pytest.fail("split on one core"))
    same(build_postings(texts), whole)


def test_a_run_across_the_middle_of_the_keys_is_counted_once() -> None:
    keys = np.array([9, 4, 4, 4, 4, 4, 4, 1], dtype=np.int64)  # the run of 4s holds the middle position
    distinct, counts = lexical._sorted_runs_in_halves(keys.copy())
    assert distinct.tolist() == [1, 4, 9] and counts.tolist() == [1, 6, 1] and counts.dtype == np.int32
    rng = np.random.default_rng(8)
    for size in (2, 3, 1001):
        keys = rng.integers(0, 5, size).astype(np.int64)
        values, numbers = np.unique(keys, return_counts=True)
        distinct, counts = lexical._sorted_runs_in_halves(keys)
        assert distinct.tolist() == values.tolist() and counts.tolist() == numbers.tolist()
