"""The BM25 postings built a segment of chunks at a time (``lexical_segments``) equal the one-pass build, array for
array, and a library above the segment size gets them through the lexical cache, verified and mapped."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_tokenize_bulk import EDGE_CASES, random_texts

from incidentlib.search import lexical, lexical_segments, lexical_store, token_workers
from incidentlib.search import tokenize as tokenize_module
from incidentlib.search.lexical_store import LEXICAL_DIR, cached_lexical_index

FIELDS = ("vocabulary", "indptr", "indices", "data", "tf", "lengths")


def _assert_same(one: lexical.Postings, other: lexical.Postings) -> None:
    assert one.size == other.size
    for name in FIELDS:
        assert np.array_equal(np.asarray(getattr(one, name)), np.asarray(getattr(other, name))), name


@pytest.mark.parametrize("segment", [1, 7, 64, 5000])
def test_segments_merged_equal_the_one_pass_build(tmp_path: Path, segment: int) -> None:
    """Terms first met in a later segment, terms held by every segment, empty texts (the empty token) and a last
    segment shorter than the others: the same vocabulary order, postings, counts and weights to the last bit."""
    texts = [*EDGE_CASES, *random_texts(700, seed=21), "", *EDGE_CASES[:3], "InfiniBand 링크가 끊겼다 NCCL timeout"]
    one_pass = lexical.build_postings(texts)
    counted: list[tuple[int, int]] = []
    segmented = lexical_segments.build_postings_in_segments(texts, tmp_path / "postings", segment_chunks=segment,
                                                            progress=lambda done, total: counted.append((done, total)))
    _assert_same(one_pass, segmented)
    assert counted[-1] == (len(texts), len(texts)) and len(counted) == -(-len(texts) // segment)
    assert not (tmp_path / "postings" / "segments").exists()  # the scratch files are gone
    for name in lexical.ARRAYS:  # the files hold what was returned
        assert np.array_equal(np.load(tmp_path / "postings" / f"{name}.npy"), np.asarray(getattr(segmented, name)))


def test_a_corpus_without_tokens_and_a_bad_segment_size(tmp_path: Path) -> None:
    assert lexical_segments.build_postings_in_segments([], tmp_path / "none", segment_chunks=4).size == 0
    with pytest.raises(ValueError, match="segment_chunks"):
        lexical_segments.build_postings_in_segments(["a"], tmp_path / "bad", segment_chunks=0)


def test_a_large_corpus_is_built_in_segments_through_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Above SEGMENT_CHUNKS the cache builds in segments into its own folder (no staging left behind), verifies
    and maps the files, and scores as the one-pass index does; the next open loads them."""
    texts = random_texts(300, seed=22)
    monkeypatch.setattr(lexical_segments, "SEGMENT_CHUNKS", 50)
    calls: list[int] = []
    real = lexical_segments.build_postings_in_segments

    def counting(texts_: list[str], folder: Path, *args: object, **kwargs: object) -> lexical.Postings:
        calls.append(len(texts_))
        return real(texts_, folder, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(lexical_segments, "build_postings_in_segments", counting)
    index, how = cached_lexical_index(texts, tmp_path)
    assert how == "built" and calls == [300]
    assert not index.postings.indices.flags.writeable  # served from the files it was written to, mapped read-only
    _assert_same(lexical.build_postings(texts), index.postings)
    assert [p.name for p in (tmp_path / LEXICAL_DIR).iterdir()] == [lexical_store.lexical_key(texts)]
    again, how = cached_lexical_index(texts, tmp_path)
    assert how == "loaded" and calls == [300]
    query = " ".join(texts[5].split()[:4])
    assert np.array_equal(again.scores(query), lexical.LexicalIndex(texts).scores(query))


def test_segments_tokenized_by_workers_started_a_segment_early_equal_the_one_pass_build(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With tokenizing workers, each segment's workers are started while the segment before counts its pairs; the
    postings are those of the one-pass build, and every segment after the first was tokenized by an early start."""
    texts = [*EDGE_CASES, *random_texts(900, seed=24)]
    one_pass = lexical.build_postings(texts)
    monkeypatch.setenv(token_workers.WORKERS_ENV, "1")
    monkeypatch.setattr(token_workers, "PARALLEL_MIN_TEXTS", 10)
    monkeypatch.setattr(tokenize_module, "TOKEN_BATCH", 16)
    made: list[int] = []
    real = token_workers.Tokenizing.__init__

    def recording(self: token_workers.Tokenizing, texts_: list[str], *args: object, **kwargs: object) -> None:
        made.append(len(texts_))
        real(self, texts_, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(token_workers.Tokenizing, "__init__", recording)
    segmented = lexical_segments.build_postings_in_segments(texts, tmp_path / "postings", segment_chunks=300)
    _assert_same(one_pass, segmented)
    assert made == [300, 300, 300, len(texts) - 900]  # one tokenizing a segment, none past the last


def test_an_interrupted_build_stops_the_next_segments_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(token_workers.WORKERS_ENV, "1")
    monkeypatch.setattr(token_workers, "PARALLEL_MIN_TEXTS", 10)
    made: list[token_workers.Tokenizing] = []
    real = token_workers.Tokenizing.__init__

    def recording(self: token_workers.Tokenizing, *args: object, **kwargs: object) -> None:
        made.append(self)
        real(self, *args, **kwargs)  # type: ignore[arg-type]

    def failing(*args: object, **kwargs: object) -> None:
        raise RuntimeError("interrupted while counting pairs")

    monkeypatch.setattr(token_workers.Tokenizing, "__init__", recording)
    monkeypatch.setattr(lexical, "_pairs", failing)
    with pytest.raises(RuntimeError, match="interrupted"):
        lexical_segments.build_postings_in_segments(random_texts(400, seed=25), tmp_path / "p", segment_chunks=200)
    assert len(made) == 2  # the second segment's workers had been started
    assert all(w is not None and w.process.poll() is not None and not w.feeder.is_alive()
               for tokenizing in made for w in tokenizing.started)
