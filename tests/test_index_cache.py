"""Content-keyed index caches and the vectorised ranking, with an instant fake embedder (real numpy/FAISS/BM25)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import bm25s
import numpy as np
import pytest
import yaml
from conftest import small_library
from fakes import HashEmbedder

from incidentlib.checksum import checksum_file
from incidentlib.library import SearchConfig
from incidentlib.loader import load_library
from incidentlib.search import dense, lexical_store
from incidentlib.search.engine import SearchEngine
from incidentlib.search.exact import ExactIndex
from incidentlib.search.hnsw import HnswIndex
from incidentlib.search.lexical import LexicalIndex, Postings, build_postings, update_postings
from incidentlib.search.lexical_store import LEXICAL_DIR, cached_lexical_index
from incidentlib.search.tokenize import tokenize

IDS = ["IL-0025", "IL-0126", "IL-0133", "IL-0134", "IL-0021", "IL-0001", "IL-0002"]
QUERIES = ["NCCL watchdog timeout", "InfiniBand 링크 장애", "Xid 79 fell off the bus", "DNS outage", "zzz-unknown-token",
           "GPU 메모리 ECC 오류로 학습이 멈췄다", "timeout timeout nccl"]


@pytest.fixture()
def small(tmp_path: Path, data_dir: Path) -> Path:
    return small_library(tmp_path / "small", data_dir, IDS)


def engine_for(root: Path, cache: Path, embedder: HashEmbedder) -> SearchEngine:
    return SearchEngine(load_library(root), SearchConfig(cache_dir=cache), embedder)


def test_a_copy_in_another_directory_reuses_both_indexes(small: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    embedder = HashEmbedder()
    first = engine_for(small, cache, embedder)
    built = first.build()
    assert built.action == "built" and built.embedded == len(first.chunks) == embedder.documents_encoded
    first_hits = first.search("NCCL watchdog timeout", k=5)
    assert first.lexical_source == "built"

    copy = tmp_path / "elsewhere" / "renamed-library"
    shutil.copytree(small, copy)
    second = engine_for(copy, cache, embedder)
    reused = second.build()
    assert reused.action == "reused" and reused.embedded == 0 and reused.reused == len(second.chunks)
    assert embedder.documents_encoded == len(first.chunks)  # nothing embedded for the copy
    assert reused.path == built.path
    assert [h.incident_id for h in second.search("NCCL watchdog timeout", k=5)] == [h.incident_id for h in first_hits]
    assert second.lexical_source == "loaded"


def test_an_edit_reuses_unchanged_vectors_and_retires_the_old_folder(small: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    embedder = HashEmbedder()
    engine = engine_for(small, cache, embedder)
    before = engine.build()
    edited = small / "incidents" / "IL-0021.yaml"
    doc = yaml.safe_load(edited.read_text(encoding="utf-8"))
    doc["lessons"] = [*doc.get("lessons", []), {"en": "Drain the node before replacing the cable.", "ko": "케이블을 바꾸기 전에 노드를 비운다."}]
    edited.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    encoded = embedder.documents_encoded
    after_engine = engine_for(small, cache, embedder)
    after = after_engine.build()
    assert after.path != before.path and after.action == "updated"
    assert 0 < after.embedded == embedder.documents_encoded - encoded < len(after_engine.chunks)
    assert not Path(before.path).exists()  # the same directory's earlier content is superseded
    assert after_engine.build().action == "reused"


def test_lexical_scores_match_bm25s(small: Path) -> None:
    data = load_library(small)
    texts = [c.text for c in SearchEngine(data, SearchConfig()).chunks]
    index = LexicalIndex(texts)
    reference = bm25s.BM25(k1=1.2, b=0.75)
    reference.index([tokenize(t) or ["∅"] for t in texts], show_progress=False)
    for query in QUERIES:
        known = [t for t in tokenize(query) if t in reference.vocab_dict]
        expected = np.asarray(reference.get_scores(known), dtype=np.float32) if known else np.zeros(len(texts), dtype=np.float32)
        np.testing.assert_allclose(index.scores(query), expected, rtol=1e-5, atol=1e-6)
    # matched terms come from the postings: every one is a token of that chunk
    scores = index.scores("NCCL watchdog timeout")
    best = int(np.argmax(scores))
    terms = index.matched_terms("NCCL watchdog timeout", best)
    assert terms and set(terms) <= set(tokenize(texts[best]))
    unmatched = np.flatnonzero(scores == 0)
    assert len(unmatched) and index.matched_terms("NCCL watchdog timeout", int(unmatched[0])) == []


def _brute_ranking(engine: SearchEngine, scores: np.ndarray, positive: bool, allowed: set[str] | None) -> list[tuple[str, float, int]]:
    best: dict[str, tuple[float, int]] = {}
    for position, chunk in enumerate(engine.chunks):
        if allowed is not None and chunk.incident_id not in allowed:
            continue
        score = float(scores[position])
        if positive and score <= 0:
            continue
        if chunk.incident_id not in best or score > best[chunk.incident_id][0]:
            best[chunk.incident_id] = (score, position)
    order = list(engine.data.incidents)
    ranked = sorted(best.items(), key=lambda kv: (-kv[1][0], order.index(kv[0])))
    return [(incident, score, chunk) for incident, (score, chunk) in ranked]


@pytest.mark.parametrize("allowed", [None, {"IL-0001", "IL-0021", "IL-0133"}])
def test_vectorised_ranking_equals_a_per_chunk_loop(small: Path, tmp_path: Path, allowed: set[str] | None) -> None:
    engine = engine_for(small, tmp_path / "cache", HashEmbedder())
    engine.build()
    for query in QUERIES:
        lexical = engine.rank_lexical(query, allowed, depth=None)
        expected = _brute_ranking(engine, engine.lexical.scores(query), True, allowed)
        assert [(i, c) for i, _, c in lexical] == [(i, c) for i, _, c in expected]
        assert [s for _, s, _ in lexical] == pytest.approx([s for _, s, _ in expected])
        assert engine.rank_lexical(query, allowed, depth=2) == lexical[:2]
        vector = engine.embedder.encode_queries([query])[0]
        _, chunk_to_row = engine._row_maps
        exact = engine.dense.vectors[chunk_to_row] @ vector
        dense_ranked = engine.rank_dense_vector(vector, allowed, depth=4)
        assert [(i, c) for i, _, c in dense_ranked] == [(i, c) for i, _, c in _brute_ranking(engine, exact, False, allowed)[:4]]


def test_index_kind_follows_size_and_vectors_are_held_once(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(300, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    small, large = dense.create(vectors, hnsw_threshold=301), dense.create(vectors, hnsw_threshold=300)
    assert isinstance(small, ExactIndex) and isinstance(large, HnswIndex)
    assert np.shares_memory(small.vectors, vectors)  # the exact index is the matrix itself, not a copy
    np.testing.assert_array_equal(large.vectors, vectors)  # read from FAISS's own storage
    view = large.vectors
    assert not view.flags.owndata  # a view of FAISS memory, not a copy
    exact_scores, exact_ids = small.search(vectors[7], 10)
    _, approx_ids = large.search(vectors[7], 10)
    assert exact_ids[0] == approx_ids[0] == 7 and exact_scores[0] == pytest.approx(1.0)
    assert len(set(exact_ids) & set(approx_ids)) >= 8  # HNSW recall on an easy set
    for index in (small, large):
        folder = tmp_path / index.kind
        folder.mkdir()
        index.save(folder)
        np.testing.assert_array_equal(dense.load(folder, index.kind).vectors, vectors)
    allowed = np.array([3, 5, 250])
    assert set(small.search(vectors[5], 5, allowed=allowed)[1]) == {3, 5, 250}


def test_the_lexical_key_tells_apart_texts_split_differently() -> None:
    key = lexical_store.lexical_key
    assert key(["NCCL timeout", "Xid 79"]) == key(["NCCL timeout", "Xid 79"])
    assert key(["NCCL timeout", "Xid 79"]) != key(["Xid 79", "NCCL timeout"])  # rows are positions: order counts
    # the same characters cut at another place, the separator itself inside a text: other keys
    assert len({key(["a\0b", "c"]), key(["a", "b\0c"]), key(["a\0b\0c"]), key(["a", "b", "c"])}) == 4
    assert key(["타임아웃이 발생", "x"]) != key(["타임아웃이 발생", "y"])
    assert key(["a", "b"], k1=1.2) != key(["a", "b"], k1=1.5)
    # a digest the caller holds replaces hashing the texts; another digest, another key
    assert key(["a", "b"], texts_digest="d1") not in {key(["a", "b"]), key(["a", "b"], texts_digest="d2")}


def test_the_engine_keys_its_lexical_index_by_its_chunk_rows(small: Path, tmp_path: Path) -> None:
    from incidentlib.search.store import rows_digest

    engine = SearchEngine(load_library(small), SearchConfig(cache_dir=tmp_path / "cache"), HashEmbedder())
    _ = engine.lexical
    chunks = engine.chunks
    assert engine.chunks_digest == rows_digest([c.id for c in chunks], [c.digest for c in chunks])
    expected = lexical_store.lexical_key([c.text for c in chunks], texts_digest=engine.chunks_digest)
    assert [p.name for p in (tmp_path / "cache" / LEXICAL_DIR).iterdir()] == [expected]
    again = SearchEngine(load_library(small), SearchConfig(cache_dir=tmp_path / "cache"), HashEmbedder())
    _ = again.lexical
    assert again.lexical_source == "loaded"


def test_a_damaged_lexical_cache_is_rebuilt(tmp_path: Path) -> None:
    texts = ["NCCL watchdog timeout on rank 3", "InfiniBand 링크가 끊겼다", ""]
    first, source = cached_lexical_index(texts, tmp_path)
    assert source == "built"
    again, source = cached_lexical_index(texts, tmp_path)
    assert source == "loaded" and np.array_equal(again.scores("nccl timeout"), first.scores("nccl timeout"))
    folder = next((tmp_path / LEXICAL_DIR).iterdir())
    np.save(folder / "data.npy", np.full(len(first.postings.data), np.nan, dtype=np.float32))
    meta = json.loads((folder / "meta.json").read_text())
    meta["checksums"]["data.npy"] = checksum_file(folder / "data.npy")
    (folder / "meta.json").write_text(json.dumps(meta))  # the checksum matches: the content check must catch it
    rebuilt, source = cached_lexical_index(texts, tmp_path)
    assert source == "built" and np.array_equal(rebuilt.scores("nccl timeout"), first.scores("nccl timeout"))
    assert cached_lexical_index(texts, tmp_path)[1] == "loaded"


def _counts(postings: Postings) -> dict[tuple[str, int], int]:
    terms = np.repeat(np.arange(len(postings.vocabulary)), np.diff(postings.indptr))
    return {(postings.vocabulary[t], int(c)): int(n) for t, c, n in zip(terms, postings.indices, postings.tf, strict=True)}


def test_loaded_term_counts_are_mapped_checked_and_update_as_a_full_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    texts = ["NCCL watchdog timeout on rank 3", "InfiniBand 링크가 끊겼다", "", "timeout timeout nccl nccl nccl"]
    monkeypatch.setattr(lexical_store, "CHECK_BLOCK", 3)  # several blocks, the last one short
    cached_lexical_index(texts, tmp_path)
    loaded, source = cached_lexical_index(texts, tmp_path)
    assert source == "loaded"
    for array in (loaded.postings.indices, loaded.postings.data, loaded.postings.tf):  # mapped from the files, read-only
        assert not array.flags.owndata and not array.flags.writeable
    assert np.array_equal(loaded.postings.tf, build_postings(texts).tf) and len(loaded.postings.tf) > 2 * 3
    after = [*texts[1:], "a fresh NCCL text"]
    updated = update_postings(loaded.postings, texts, after)
    full = build_postings(after)
    assert _counts(updated) == _counts(full)  # the vocabulary's order differs after an update, not the counts
    for query in ["nccl timeout", "링크", "fresh"]:
        assert np.allclose(_scores(updated, query), _scores(full, query), rtol=1e-6, atol=1e-7), query
    folder = next((tmp_path / LEXICAL_DIR).iterdir())
    tf = np.load(folder / "tf.npy")
    tf[-1] = 0  # in the last, short block
    np.save(folder / "tf.npy", tf)
    meta = json.loads((folder / "meta.json").read_text())
    meta["checksums"]["tf.npy"] = checksum_file(folder / "tf.npy")
    (folder / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(lexical_store.LexicalDamaged, match=r"tf\.npy: tf holds counts below 1"):
        lexical_store.load_postings(folder, len(texts))


@pytest.mark.parametrize(("name", "position", "value", "reason"), [
    ("indices", -1, 99, "indices point outside the chunks"),
    ("indices", 0, -1, "indices point outside the chunks"),
    ("data", 4, float("nan"), "data holds NaN or infinite weights"),
    ("lengths", 1, 0, "lengths hold counts below 1"),
])
def test_loaded_arrays_out_of_range_are_refused_even_with_a_matching_checksum(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, position: int, value: float, reason: str) -> None:
    """A file whose checksum was recomputed (a writer's bug, a hand edit) is still checked value by value."""
    texts = ["NCCL watchdog timeout on rank 3", "InfiniBand 링크가 끊겼다", "timeout timeout nccl nccl nccl"]
    monkeypatch.setattr(lexical_store, "CHECK_BLOCK", 2)
    cached_lexical_index(texts, tmp_path)
    folder = next((tmp_path / LEXICAL_DIR).iterdir())
    array = np.load(folder / f"{name}.npy")
    array[position] = value
    np.save(folder / f"{name}.npy", array)
    meta = json.loads((folder / "meta.json").read_text())
    meta["checksums"][f"{name}.npy"] = checksum_file(folder / f"{name}.npy")
    (folder / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(lexical_store.LexicalDamaged, match=rf"{name}\.npy: {reason}"):
        lexical_store.load_postings(folder, len(texts))
    (folder / f"{name}.npy").write_bytes((folder / f"{name}.npy").read_bytes()[:-3])  # truncated
    with pytest.raises(lexical_store.LexicalDamaged, match=rf"{name}\.npy: truncated array"):
        lexical_store.load_postings(folder, len(texts))
    _, source = cached_lexical_index(texts, tmp_path)  # and the cache rebuilds it
    assert source == "built"


def test_duplicate_index_finds_what_every_pair_finds(library) -> None:
    """LSH candidates + exact Jaccard agree with comparing every pair, on the library's own texts and reworded copies."""
    import random

    from incidentlib.importing.duplicates import SIMILARITY_THRESHOLD, DuplicateIndex, fingerprint, jaccard

    rng = random.Random(7)
    texts = [f"{i.title.en} {i.summary.en}" for i in library.incidents()]
    index = DuplicateIndex()
    prints = []
    for number, text in enumerate(texts[:150]):
        index.add(f"K{number}", [f"https://example.org/{number}"], [text])
        prints.append(fingerprint(text))
    queries = texts[150:200]  # distinct incidents: no duplicate expected
    for text in texts[:50]:  # copies with a tenth of their words dropped: duplicates
        words = text.split()
        queries.append(" ".join(w for w in words if rng.random() > 0.1))
    found = 0
    for query in queries:
        mine = fingerprint(query)
        scores = [jaccard(mine, theirs) for theirs in prints]
        best = max(range(len(scores)), key=lambda i: (scores[i], -i))
        expected = f"K{best}" if scores[best] >= SIMILARITY_THRESHOLD else None
        duplicate = index.find([], [query])
        assert (duplicate.of if duplicate else None) == expected, query
        found += duplicate is not None
    assert found >= 45  # the reworded copies are caught
    assert index.find(["https://EXAMPLE.org/3/"], ["anything"]).of == "K3"  # same URL, normalised


def test_index_stats_name_the_dense_kind(small: Path, tmp_path: Path) -> None:
    from incidentlib import Library

    library = Library(load_library(small), SearchConfig(cache_dir=tmp_path / "cache", hnsw_threshold=10), embedder=HashEmbedder())
    library.build_index()
    stats = library.index_stats()
    assert stats.dense_kind == "hnsw" and stats.dense_index.startswith("HNSW") and stats.hnsw_threshold == 10
    assert stats.chunks == len(library._search_engine.chunks) and stats.incidents == len(IDS)
    assert stats.vectors_mb == round(stats.chunks * 64 * 4 / 2**20, 1)
    assert stats.lexical_terms > 0 and stats.lexical_postings >= stats.chunks and stats.lexical_source in ("built", "loaded")
    exact = Library(load_library(small), SearchConfig(cache_dir=tmp_path / "cache"), embedder=HashEmbedder())
    exact.build_index()
    assert exact.index_stats().dense_kind == "flat" and exact.last_build is not None and exact.last_build.embedded == 0


@pytest.mark.slow
def test_cli_index_stats(search_library, cache_dir: Path, data_dir: Path) -> None:
    from typer.testing import CliRunner

    from incidentlib.cli import app

    result = CliRunner().invoke(app, ["index", "--stats", "--json", "--data", str(data_dir), "--cache", str(cache_dir)])
    assert result.exit_code == 0, result.output
    stats = json.loads(result.output)
    assert stats["embedder"] == "use-m3" and stats["dense_kind"] == "flat" and stats["chunks"] == len(search_library._search_engine.chunks)
    text = CliRunner().invoke(app, ["index", "--stats", "--data", str(data_dir), "--cache", str(cache_dir)])
    assert "exact (numpy" in text.output and "BM25 over" in text.output
    assert stats["dense_rows"] == stats["chunks"] and stats["dense_dead_rows"] == 0
    rebuilt = CliRunner().invoke(app, ["index", "--rebuild", "--json", "--data", str(data_dir), "--cache", str(cache_dir)])
    assert rebuilt.exit_code == 0, rebuilt.output
    report = json.loads(rebuilt.output)
    assert report["action"] == "refreshed" and report["embedded"] == 0 and report["chunks"] == stats["chunks"]
    similar = CliRunner().invoke(app, ["index", "--similar", "--json", "--data", str(data_dir), "--cache", str(cache_dir)])
    assert similar.exit_code == 0, similar.output
    from incidentlib import Library

    saved = Library.open(data_dir, SearchConfig(cache_dir=cache_dir))
    assert saved.prepare_similar(lambda *_: pytest.fail("the artefact of this library was saved: loaded, not built")) == "loaded"


def _scores(postings: Postings, query: str) -> np.ndarray:
    return LexicalIndex(postings=postings).scores(query)


@pytest.mark.parametrize("edit", ["append", "remove", "replace", "duplicates", "reorder", "to-empty", "from-empty"])
def test_an_updated_index_scores_as_a_full_build(edit: str) -> None:
    """update_postings over an edited corpus gives the scores, term counts and lengths a full build gives."""
    before = ["NCCL watchdog timeout on rank 3", "InfiniBand 링크가 끊겼다", "", "Xid 79 GPU has fallen off the bus",
              "NCCL watchdog timeout on rank 3", "타임아웃으로 학습이 멈췄다"]
    after = {
        "append": [*before, "A new draft about wombatfjord timeouts", "타임아웃이 또 났다"],
        "remove": [before[0], before[2], before[5]],
        "replace": [before[0], "InfiniBand link flapped during all-reduce", *before[2:]],
        "duplicates": [before[4], before[0], before[0], "fresh text", before[1]],
        "reorder": list(reversed(before)),
        "to-empty": [],
        "from-empty": before,
    }[edit]
    start = [] if edit == "from-empty" else before
    previous = build_postings(start)
    updated = update_postings(previous, start, after)
    full = build_postings(after)
    assert updated.size == full.size == len(after)
    assert np.array_equal(updated.lengths, full.lengths)
    for query in [*QUERIES, "wombatfjord", "링크 타임아웃", "fallen bus"]:
        assert np.allclose(_scores(updated, query), _scores(full, query), rtol=1e-6, atol=1e-7), query
    live = {t for t, n in zip(updated.vocabulary, np.diff(updated.indptr), strict=True) if n}
    assert live == {t for t, n in zip(full.vocabulary, np.diff(full.indptr), strict=True) if n}  # only dead terms differ
    if edit == "append":  # unchanged chunks were not tokenized again: a planted count survives the update
        planted = replace(previous, tf=np.where(previous.indices == 0, 2, previous.tf).astype(np.int32))
        moved = update_postings(planted, before, after)
        assert not np.allclose(_scores(moved, "watchdog"), _scores(full, "watchdog"))


class _ReadLog(list[str]):
    """Texts that remember which positions were read."""

    def __init__(self, texts: list[str]) -> None:
        super().__init__(texts)
        self.read: set[int] = set()

    def __getitem__(self, index: int) -> str:  # type: ignore[override]
        self.read.add(index)
        return super().__getitem__(index)


def _by_term(postings: Postings) -> dict[str, tuple[list[int], list[float], list[int]]]:
    """Each term's postings (chunks, weights, counts), for the terms that have some."""
    return {term: (postings.indices[a:z].tolist(), postings.data[a:z].tolist(), postings.tf[a:z].tolist())
            for term, a, z in zip(postings.vocabulary, postings.indptr[:-1].tolist(), postings.indptr[1:].tolist(), strict=True)
            if z > a}


@pytest.mark.parametrize("edit", ["append", "insert", "remove-middle", "replace-middle", "same-text-new-key", "key-twice",
                                  "nothing"])
def test_an_update_in_order_merges_into_the_full_builds_postings_reading_only_new_texts(edit: str) -> None:
    """Keys (chunk digests in a library) stand for the texts, so only the new texts are read; when the kept chunks keep
    their order the new postings are merged in, and every term's chunks, weights and counts equal a full build's."""
    rng = np.random.default_rng(7)
    words = ["nccl", "watchdog", "timeout", "rank", "infiniband", "링크가", "끊겼다", "xid", "79", "dns", "타임아웃이"]
    before = [" ".join(rng.choice(words, size=int(rng.integers(1, 9)))) for _ in range(40)]
    before_keys = [f"key-{n}" for n in range(len(before))]
    pairs = list(zip(before_keys, before, strict=True))
    if edit == "append":
        pairs += [("new-1", "a fresh wombatfjord draft"), ("new-2", "타임아웃으로 멈췄다 nccl")]
    elif edit == "insert":
        pairs[10:10] = [("new-1", "wombatfjord nccl nccl timeout"), ("new-2", "")]
    elif edit == "remove-middle":
        del pairs[5:12]
    elif edit == "replace-middle":
        pairs[20] = ("new-1", "infiniband wombatfjord 링크가")
    elif edit == "same-text-new-key":  # a text moved to another chunk id: a new key, tokenized again
        pairs[3] = ("new-1", pairs[3][1])
    elif edit == "key-twice":  # the second chunk under one previous key is new (matched occurrence by occurrence)
        pairs.append(pairs[7])
    keys, after = [k for k, _ in pairs], _ReadLog([t for _, t in pairs])
    updated = update_postings(build_postings(before), before_keys, after, keys=keys)
    fresh = {n for n, key in enumerate(keys) if key not in before_keys or key in keys[:n]}
    assert after.read == fresh  # the unchanged texts were not read
    full = build_postings(list(after))
    assert updated.size == full.size and np.array_equal(updated.lengths, full.lengths)
    assert _by_term(updated) == _by_term(full)  # bit for bit: the same float64 operations give the same weights
    assert updated.vocabulary[: len(build_postings(before).vocabulary)] == build_postings(before).vocabulary


def test_update_rejects_texts_that_do_not_match_the_postings() -> None:
    with pytest.raises(ValueError, match="previous postings cover 2 chunks, given 1 texts"):
        update_postings(build_postings(["a b", "c d"]), ["a b"], ["a b", "e"])


def test_a_live_engine_updates_its_lexical_index_after_a_change(small: Path, tmp_path: Path) -> None:
    embedder = HashEmbedder()
    first = engine_for(small, tmp_path / "cache", embedder)
    assert first.lexical_snapshot() is None  # nothing built yet: nothing to carry
    _ = first.lexical
    snapshot = first.lexical_snapshot()
    assert snapshot is not None and snapshot[1] is first.lexical.postings
    target = small / "incidents" / "IL-0001.yaml"
    doc = yaml.safe_load(target.read_text(encoding="utf-8"))
    doc["summary"]["en"] += " A wombatfjord appeared."
    target.write_text(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False), encoding="utf-8")
    second = SearchEngine(load_library(small), SearchConfig(cache_dir=tmp_path / "cache"), embedder, previous_lexical=snapshot)
    assert second.lexical_source is None and len(second.lexical) == len(second.chunks)
    assert second.lexical_source == "updated"
    fresh = engine_for(small, tmp_path / "other-cache", embedder)
    assert fresh.lexical.scores("wombatfjord").max() > 0 and fresh.lexical_source == "built"
    assert np.allclose(second.lexical.scores("wombatfjord"), fresh.lexical.scores("wombatfjord"))
    # a live write does not wait for the arrays to be written: the engine saves them when it is compacted
    from incidentlib.search.chunks import chunk_texts
    from incidentlib.search.lexical_store import LEXICAL_DIR, lexical_key

    saved = tmp_path / "cache" / LEXICAL_DIR / lexical_key(chunk_texts(second.chunks), texts_digest=second.chunks_digest)
    assert second.needs_compaction and not (saved / "meta.json").exists()
    assert second.compact() is None and not second.needs_compaction  # the BM25 index saved; no dense index carried
    assert (saved / "meta.json").exists()
    third = SearchEngine(load_library(small), SearchConfig(cache_dir=tmp_path / "cache"), embedder, previous_lexical=snapshot)
    assert third.lexical_source is None and third.lexical is not None and third.lexical_source == "loaded"  # saved
    assert np.array_equal(third.lexical.scores("wombatfjord"), second.lexical.scores("wombatfjord"))
