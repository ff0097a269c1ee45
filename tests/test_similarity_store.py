"""The persisted similarity artefact (boilerplate model, incident-level BM25 matrix, kept passages): a saved one
gives the same rankings as a freshly built one; a damaged, stale or mismatched one is rebuilt, never trusted."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import numpy as np
import pytest
from conftest import small_library
from fakes import HashEmbedder

from incidentlib import Library, checksum
from incidentlib.library import SearchConfig
from incidentlib.loader import load_library
from incidentlib.mapped_arrays import _mapping_of
from incidentlib.search import similarity as similarity_module
from incidentlib.search import similarity_store
from incidentlib.search.engine import SearchEngine
from incidentlib.search.lexical_top import LexicalTop, TermBounds
from incidentlib.search.similarity import BUILD_STEPS, SimilarityIndex
from incidentlib.search.similarity_store import (
    MAPPED,
    SIMILARITY_DIR,
    SimilarityArtefactDamaged,
    load_artefact,
    similarity_key,
)

SIZE = 24  # incidents: enough for boilerplate, several terms per incident and a candidate pool smaller than the library
TEXT = "The GPU fell off the bus and NCCL collectives timed out during training."


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> SearchEngine:
    folder = tmp_path_factory.mktemp("similarity-store")
    ids = sorted(p.stem for p in (data_dir / "incidents").glob("*.yaml"))[:SIZE]
    library = Library(load_library(small_library(folder / "lib", data_dir, ids)), SearchConfig(cache_dir=folder / "cache"),
                      embedder=HashEmbedder())
    library.build_index()
    return library._search_service.engine


@pytest.fixture
def cache(engine: SearchEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh cache folder for this test's artefacts."""
    monkeypatch.setattr(engine, "config", engine.config.model_copy(update={"cache_dir": tmp_path}))
    return tmp_path / SIMILARITY_DIR


def rankings(index: SimilarityIndex) -> list[list[tuple[object, ...]]]:
    """Every third incident as a query, then a pasted text: ids, scores, evidence, chunk and explanation of the top 5."""
    queries = [index.incident_query(index.data.incidents[i]) for i in index.ids[::3]]
    queries.append(index.text_query(TEXT, {}, set()))
    return [[(e.incident_id, e.score, e.lexical, e.dense, e.graph, e.chunk, tuple(e.terms), tuple(sorted(e.ranks.items())))
             for e in index.rank(query, 5)] for query in queries]


def mapped(array: np.ndarray) -> bool:
    """Whether ``array``'s memory is a mapped file (following its chain of views)."""
    return _mapping_of(array) is not None


def only_folder(cache: Path) -> Path:
    [folder] = [p for p in cache.iterdir() if not p.name.startswith(".")]
    return folder


@pytest.mark.parametrize("threshold", [1 << 40, 0], ids=["exact path", "candidate path"])
def test_a_saved_artefact_gives_the_rankings_of_a_fresh_build(engine: SearchEngine, cache: Path, threshold: int) -> None:
    built = SimilarityIndex(engine, candidate_threshold=threshold)
    first = rankings(built)
    assert built.artefact_source == "built"
    # what the build made is served from the saved files, mapped, not kept on the heap
    assert all(mapped(array) for array in (built._artefact.matrix.data, built._artefact.columns.indices, built._artefact.counts))
    folder = only_folder(cache)
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["incidents"] == SIZE and meta["chunks"] == len(engine.chunks) and meta["key"] == folder.name
    assert all(value.startswith("xxh3_128:") for value in meta["checksums"].values())
    loaded = SimilarityIndex(engine, candidate_threshold=threshold)
    assert rankings(loaded) == first
    assert loaded.artefact_source == "loaded"
    assert loaded.boilerplate.keys == built.boilerplate.keys
    assert np.array_equal(loaded._layout[0], built._layout[0]) and np.array_equal(loaded._layout[1], built._layout[1])
    assert (loaded._lexical[2] != built._lexical[2]).nnz == 0
    # the bounds are read from their own files, and are the columns' reduction exactly
    fresh = TermBounds.of(loaded._artefact.columns)
    assert np.array_equal(loaded._term_bounds.maxima, fresh.maxima) and np.array_equal(loaded._term_bounds.sums, fresh.sums)
    assert loaded._term_bounds.maxima.max() > 0


def test_a_loaded_artefact_never_reduces_its_columns_for_the_bounds(engine: SearchEngine, cache: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """At a million incidents the reduction reads 3.6 GB; a loaded artefact serves the pruned lexical pool without it."""
    pools = similarity_module.Pools(exhaustive=0, lexical=3)  # small pools: the bounds decide which columns are read
    first = rankings(SimilarityIndex(engine, candidate_threshold=0, pools=pools))
    found: list[LexicalTop] = []
    real = similarity_module.lexical_top
    monkeypatch.setattr(similarity_module, "lexical_top", lambda *args, **kwargs: found.append(real(*args, **kwargs)) or found[-1])

    def refuse(columns: object) -> TermBounds:
        raise AssertionError("the term bounds were reduced from the columns again")
    monkeypatch.setattr(TermBounds, "of", classmethod(lambda cls, columns: refuse(columns)))
    loaded = SimilarityIndex(engine, candidate_threshold=0, pools=pools)
    assert rankings(loaded) == first and loaded.artefact_source == "loaded"
    assert found and any(top.pruned_terms > 0 for top in found)  # the bounds were read, and pruned columns


def test_a_by_row_file_whose_cache_is_hidden_is_said_when_mapped(engine: SearchEngine, cache: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    SimilarityIndex(engine)._artefact  # noqa: B018  # built and saved
    folder = only_folder(cache)
    monkeypatch.setattr(similarity_store, "residency_visible", lambda path: path.name != "data.npy")
    with caplog.at_level(logging.WARNING, logger="incidentlib.search.similarity_store"):
        load_artefact(folder, folder.name, SIZE, len(engine.chunks))
    assert "data.npy owned by another user" in caplog.text and "indices.npy" not in caplog.text


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads the kernel's mapping flags (Linux)")
def test_the_arrays_read_by_incident_are_mapped_for_random_access(engine: SearchEngine, cache: Path) -> None:
    """A request reads the rows of scattered incidents (no read-ahead), and whole columns of some terms (read-ahead)."""
    from conftest import mapping_flags

    index = SimilarityIndex(engine)
    index.rank(index.incident_query(index.data.incidents[index.ids[0]]), 5)
    folder = only_folder(cache).resolve()
    for name in MAPPED:
        flags = mapping_flags(folder / f"{name}.npy")
        assert flags, f"{name}.npy is not mapped"
        assert ("rr" in flags) == (name in ("indices", "data", "counts")), name


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "missing file", "meta edited", "other key",
                                    "term out of range, checksum matching", "NaN weight, checksum matching",
                                    "negative bound, checksum matching"])
def test_a_damaged_or_mismatched_artefact_is_rebuilt(engine: SearchEngine, cache: Path, damage: str,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    expected = rankings(SimilarityIndex(engine))
    folder = only_folder(cache)
    target = folder / "data.npy"
    if damage == "flipped byte":
        raw = bytearray(target.read_bytes())
        raw[-3] ^= 0xFF
        target.write_bytes(bytes(raw))
    elif damage == "truncated":
        target.write_bytes(target.read_bytes()[:-8])
    elif damage == "missing file":
        (folder / "kept.npy").unlink()
    elif damage == "meta edited":
        meta = json.loads((folder / "meta.json").read_text())
        meta["entries"] += 1
        (folder / "meta.json").write_text(json.dumps(meta))
    elif damage == "other key":  # an artefact of other records left under this key's folder name
        meta = json.loads((folder / "meta.json").read_text())
        meta["key"] = "0" * 32
        (folder / "meta.json").write_text(json.dumps(meta))
    else:  # values this code never writes, under a checksum that matches them: the mapped arrays' checks refuse them
        name = {"term": "indices", "NaN ": "col_data", "nega": "term_max"}[damage[:4]]
        values = np.load(folder / f"{name}.npy")
        values[len(values) // 2] = (np.iinfo(values.dtype).max if values.dtype.kind == "i" else
                                    -1.0 if name == "term_max" else np.nan)
        np.save(folder / f"{name}.npy", values)
        meta = json.loads((folder / "meta.json").read_text())
        meta["checksums"][f"{name}.npy"] = checksum.checksum_file(folder / f"{name}.npy")
        (folder / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(SimilarityArtefactDamaged, match=str(folder)):
        load_artefact(folder, folder.name, SIZE, len(engine.chunks))
    with caplog.at_level(logging.WARNING, logger="incidentlib.search.similarity_store"):
        rebuilt = SimilarityIndex(engine)
        assert rankings(rebuilt) == expected
    assert rebuilt.artefact_source == "built"
    assert "damaged" in caplog.text and str(folder) in caplog.text
    sound = load_artefact(folder, folder.name, SIZE, len(engine.chunks))  # the rebuilt artefact is sound again
    # its entries are mapped from the files, read-only, not copied into the heap
    assert not sound.matrix.data.flags.writeable and not sound.columns.indices.flags.writeable
    assert SimilarityIndex(engine)._artefact is not None


def test_changed_records_get_a_new_artefact(engine: SearchEngine, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = SimilarityIndex(engine)
    _ = before._lexical
    first = only_folder(cache)
    incidents = dict(engine.data.incidents)
    changed = before.ids[0]
    original = incidents[changed]
    incidents[changed] = original.model_copy(update={"summary": original.summary.model_copy(update={"en": "zyxwvut quorum lost"})})
    monkeypatch.setattr(engine, "data", dataclasses.replace(engine.data, incidents=incidents))
    after = SimilarityIndex(engine)
    vocabulary, _, _ = after._lexical
    assert after.artefact_source == "built"
    assert "zyxwvut" in vocabulary and "zyxwvut" not in before._lexical[0]
    assert {p.name for p in cache.iterdir() if not p.name.startswith(".")} == {first.name, only_folder_other(cache, first)}


def only_folder_other(cache: Path, first: Path) -> str:
    [other] = [p.name for p in cache.iterdir() if p.name != first.name and not p.name.startswith(".")]  # not the build locks
    return other


def test_the_key_reads_streams_once_and_checks_their_lengths() -> None:
    incidents = [("IL-1", "GPU fell off the bus"), ("IL-2", "NCCL watchdog timeout")]
    chunks = [("IL-1", "title", "aa11"), ("IL-1", "body", "bb22"), ("IL-2", "title", "cc33")]
    listed = similarity_key(incidents, chunks, "k1=1.2")
    assert similarity_key(iter(incidents), iter(chunks), "k1=1.2", (2, 3)) == listed
    assert similarity_key(incidents, [*chunks[:2], ("IL-2", "title", "cc34")], "k1=1.2") != listed  # a text's digest
    with pytest.raises(ValueError, match="read 2 incidents and 3 chunks, told 2 and 4"):
        similarity_key(iter(incidents), iter(chunks), "k1=1.2", (2, 4))


def test_prepare_builds_with_progress_then_loads(engine: SearchEngine, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``prepare`` (``incidentlib index --similar``) builds and saves what the first request would, telling each pass's
    progress; a later index loads it, and its first request builds nothing more."""
    monkeypatch.setattr(similarity_module, "PROGRESS_EVERY", 10)
    heard: dict[str, list[tuple[int, int]]] = {}
    index = SimilarityIndex(engine)
    assert index.prepare(lambda step, done, total: heard.setdefault(step, []).append((done, total))) == "built"
    records = len(index.ids)
    assert heard == {step: [(10, records), (20, records), (records, records)] for step in BUILD_STEPS}
    assert index.prepare() == "built" and only_folder(cache).is_dir()  # prepared once; a second call is a no-op
    again = SimilarityIndex(engine)
    assert again.prepare(lambda *_: pytest.fail("a saved artefact is loaded, not built")) == "loaded"
    assert rankings(again) == rankings(index)


def test_a_request_during_prepare_waits_for_its_build(engine: SearchEngine, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A request that needs the artefact while ``prepare`` builds it (a server preparing in the background) waits for
    that build instead of starting a second one."""
    import threading

    builds: list[str] = []
    building = threading.Event()
    original = SimilarityIndex._load_or_build

    def slow_build(self: SimilarityIndex, progress: object, build: bool) -> object:
        builds.append(threading.current_thread().name)
        building.set()
        threading.Event().wait(0.3)  # the request below arrives meanwhile
        return original(self, progress, build)  # type: ignore[arg-type]

    monkeypatch.setattr(SimilarityIndex, "_load_or_build", slow_build)
    index = SimilarityIndex(engine)
    preparing = threading.Thread(target=index.prepare, name="prepare")
    preparing.start()
    assert building.wait(5)
    first = rankings(index)  # needs the artefact: waits for the build under way
    preparing.join()
    assert builds == ["prepare"] and index.artefact_source == "built"
    assert first == rankings(SimilarityIndex(engine))


def test_an_artefact_that_cannot_be_saved_is_served_and_said_unsaved(engine: SearchEngine, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(engine, "config", engine.config.model_copy(update={"cache_dir": tmp_path}))
    (tmp_path / SIMILARITY_DIR).write_text("a file where the folder should be", encoding="utf-8")
    index = SimilarityIndex(engine)
    with caplog.at_level(logging.WARNING):
        assert index.prepare() == "unsaved"
    assert "could not save the similarity artefact" in caplog.text
    assert rankings(index)[0]  # the built copy serves


def test_warm_loads_a_saved_artefact_and_the_parts_a_request_uses_but_never_builds(
        engine: SearchEngine, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``serve`` runs in the background after a start: nothing when no artefact is saved (a build is left to
    ``incidentlib index --similar`` or the first request), else the artefact and what the first request builds."""
    cold = SimilarityIndex(engine)
    assert cold.warm() == "absent" and cold._artefact_held is None and not cache.exists()
    assert "_concepts" not in cold.__dict__
    assert SimilarityIndex(engine).prepare() == "built"
    warm = SimilarityIndex(engine)
    monkeypatch.setattr(SimilarityIndex, "_build_artefact", lambda *_: pytest.fail("warm never builds"))
    assert warm.warm() == "loaded"
    assert {"_concepts", "_concept_spaces"} <= warm.__dict__.keys()
    assert rankings(warm) == rankings(SimilarityIndex(engine))


def test_library_warm_similar_loads_only_what_is_saved(data_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = small_library(tmp_path / "lib", data_dir, sorted(p.stem for p in (data_dir / "incidents").glob("*.yaml"))[:SIZE])

    def opened() -> Library:
        library = Library(load_library(root), SearchConfig(cache_dir=tmp_path / "cache"), embedder=HashEmbedder())
        library.build_index()
        return library

    fresh = opened()
    fresh.warm_similar()
    assert not (tmp_path / "cache" / SIMILARITY_DIR).exists()  # nothing saved: nothing built in the background
    assert fresh.prepare_similar() == "built"
    restarted = opened()
    with caplog.at_level(logging.WARNING):
        restarted.warm_similar()
    similarity = restarted._search_service.similarity
    assert similarity.artefact_source == "loaded" and {"_concepts", "_concept_spaces", "_id_array"} <= similarity.__dict__.keys()
    assert "warm_similar" not in caplog.text  # its errors are logged, not raised: none here


def test_a_file_system_without_locks_still_builds(engine: SearchEngine, cache: Path, monkeypatch: pytest.MonkeyPatch,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    import errno

    from incidentlib.search import similarity_store

    def refuse(*_: object) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(similarity_store.fcntl, "flock", refuse)
    with caplog.at_level(logging.WARNING):
        assert SimilarityIndex(engine).prepare() == "built"
    assert "cannot lock" in caplog.text and only_folder(cache).is_dir()


def test_two_builders_of_one_artefact_build_it_once(engine: SearchEngine, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two indexes (as a server and ``incidentlib index --similar`` in two processes) needing the same unsaved artefact:
    one builds it under the cache folder's lock, the other waits for the lock and loads what was saved."""
    import threading

    builds: list[str] = []
    original = SimilarityIndex._build_artefact

    def slow_build(self: SimilarityIndex, *args: object) -> object:
        builds.append(threading.current_thread().name)
        threading.Event().wait(0.3)  # the other builder reaches the lock meanwhile
        return original(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(SimilarityIndex, "_build_artefact", slow_build)
    first, second = SimilarityIndex(engine), SimilarityIndex(engine)
    sources: dict[str, str] = {}
    threads = [threading.Thread(target=lambda i=i, n=n: sources.__setitem__(n, i.prepare()), name=n)
               for i, n in ((first, "one"), (second, "two"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(builds) == 1 and sorted(sources.values()) == ["built", "loaded"]
    assert rankings(first) == rankings(second)
