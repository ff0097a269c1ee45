"""The Milvus search backend (embedded milvus-lite) ranks exactly as the local one.

Same chunks, same BM25 weights (our tokenizer, stored as sparse vectors), same vectors: the ranked
incident ids must be equal and the scores equal up to float32 rounding, for lexical, dense and hybrid
search, with and without filters.  Reopening reuses the collection; a damaged or mismatched one is
rebuilt; a foreign one under our name is refused.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from incidentlib.cli import app
from incidentlib.errors import InvalidRequest, SearchBackendError
from incidentlib.library import Library
from incidentlib.loader import LibraryData, load_library
from incidentlib.search import backend_milvus
from incidentlib.search.backend_milvus import COLLECTION_PREFIX, META_PROPERTY, NAME_DIGITS, MilvusBackend, content_key
from incidentlib.search.engine import SearchConfig, SearchEngine, SearchMode
from tests.conftest import small_library
from tests.fakes import HashEmbedder

pytest.importorskip("milvus_lite")

#: Incidents in the small library: enough for filters and ties to matter, few enough to fill in well under a second.
SMALL_SIZE = 40
QUERIES = [
    "NCCL timeout during all-reduce",
    "GPU fell off the bus Xid 79",
    "DNS outage took down the CDN",
    "학습 클러스터가 삭제되었다",
    "GPU가 응답하지 않음",
    "configuration change caused a global outage",
    "memory error: GPU memory, memory ECC",  # repeated tokens: the query vector holds counts, not 1s
    "zzqx-nothing-matches-this",
]
#: float32 sums in another order differ in the last bits; nothing real is this close.
REL = 1e-4


@pytest.fixture(scope="module")
def small_data(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> LibraryData:
    ids = sorted(path.stem for path in (data_dir / "incidents").glob("IL-*.yaml"))[:SMALL_SIZE]
    return load_library(small_library(tmp_path_factory.mktemp("milvus-lib") / "lib", data_dir, ids))


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("milvus-cache")


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("milvus-db") / "search.db")


@pytest.fixture(scope="module")
def local(small_data: LibraryData, cache: Path) -> SearchEngine:
    engine = SearchEngine(small_data, SearchConfig(cache_dir=cache), embedder=HashEmbedder())
    engine.build()
    return engine


@pytest.fixture(scope="module")
def milvus(small_data: LibraryData, cache: Path, target: str) -> SearchEngine:
    engine = SearchEngine(small_data, SearchConfig(cache_dir=cache, backend=f"milvus:{target}"), embedder=HashEmbedder())
    engine.build()
    return engine


def _filters(data: LibraryData) -> list[set[str] | None]:
    ids = list(data.incidents)
    return [None, set(ids[::2]), set(ids[5:9]), set()]


def _same(local: list[tuple[str, float, int]], remote: list[tuple[str, float, int]]) -> None:
    assert [i for i, _, _ in remote] == [i for i, _, _ in local]
    assert [s for _, s, _ in remote] == pytest.approx([s for _, s, _ in local], rel=REL, abs=1e-6)


def test_backend_is_milvus(milvus: SearchEngine, target: str) -> None:
    assert isinstance(milvus.backend, MilvusBackend)
    assert milvus.backend.action == "filled"
    assert Path(target).exists()


@pytest.mark.parametrize("depth", [5, None])
def test_lexical_rankings_equal(local: SearchEngine, milvus: SearchEngine, depth: int | None) -> None:
    compared = 0
    for query in QUERIES:
        for allowed in _filters(local.data):
            expected = local.rank_lexical(query, allowed, depth)
            found = milvus.rank_lexical(query, allowed, depth)
            _same(expected, found)
            scores = local.lexical.scores(query)
            for incident_id, score, chunk in found:  # the reported chunk is a best chunk of that incident
                assert milvus.chunks[chunk].incident_id == incident_id
                assert float(scores[chunk]) == pytest.approx(score, rel=REL)
                assert allowed is None or incident_id in allowed
            compared += len(found)
    assert compared > 50  # the queries do match: the comparison is not of empty lists


def test_korean_particles_match_as_in_process(local: SearchEngine, milvus: SearchEngine) -> None:
    # "GPU가" must match chunks saying "GPU": our tokenizer splits the particle off, Milvus never sees it
    found = milvus.rank_lexical("GPU가", None, 10)
    assert found
    _same(local.rank_lexical("GPU가", None, 10), found)
    assert [i for i, _, _ in found] == [i for i, _, _ in milvus.rank_lexical("GPU", None, 10)]


def test_dense_rankings_equal(local: SearchEngine, milvus: SearchEngine) -> None:
    for query in QUERIES:
        for allowed in _filters(local.data):
            expected = local.rank_dense(query, allowed, 10)
            found = milvus.rank_dense(query, allowed, 10)
            _same(expected, found)
            assert len(found) == (10 if allowed is None else min(10, len(allowed)))
            vector = local.embedder.encode_queries([query])[0]
            for incident_id, score, chunk in found:
                assert milvus.chunks[chunk].incident_id == incident_id
                assert float(local.chunk_vectors()[chunk] @ vector) == pytest.approx(score, rel=REL, abs=1e-6)


@pytest.mark.parametrize("mode", list(SearchMode))
def test_search_modes_equal(local: SearchEngine, milvus: SearchEngine, mode: SearchMode) -> None:
    for query in QUERIES:
        for allowed in _filters(local.data):
            expected = local.search(query, k=10, mode=mode, allowed=allowed)
            found = milvus.search(query, k=10, mode=mode, allowed=allowed)
            assert [h.incident_id for h in found] == [h.incident_id for h in expected]
            assert [h.score for h in found] == pytest.approx([h.score for h in expected], rel=REL, abs=1e-6)
            assert [(h.lexical_rank, h.dense_rank) for h in found] == [(h.lexical_rank, h.dense_rank) for h in expected]


def test_library_search_through_milvus(small_data: LibraryData, cache: Path, target: str) -> None:
    local = Library(small_data, SearchConfig(cache_dir=cache), embedder=HashEmbedder())
    remote = Library(small_data, SearchConfig(cache_dir=cache, backend=f"milvus:{target}"), embedder=HashEmbedder())
    for query in QUERIES[:4]:
        expected = local.search(query, k=5)
        found = remote.search(query, k=5)
        assert [r.id for r in found.results] == [r.id for r in expected.results]
        assert [r.snippet for r in found.results] == [r.snippet for r in expected.results]


def test_reopening_reuses_the_collection(small_data: LibraryData, cache: Path, target: str, milvus: SearchEngine) -> None:
    again = SearchEngine(small_data, SearchConfig(cache_dir=cache, backend=f"milvus:{target}"), embedder=HashEmbedder())
    again.build()
    assert isinstance(again.backend, MilvusBackend)
    assert again.backend.action == "reused"
    assert again.backend.collection == milvus.backend.collection  # type: ignore[attr-defined]
    _same(milvus.rank_lexical(QUERIES[0], None, 10), again.rank_lexical(QUERIES[0], None, 10))


def _fresh(small_data: LibraryData, cache: Path, target: str) -> SearchEngine:
    engine = SearchEngine(small_data, SearchConfig(cache_dir=cache, backend=f"milvus:{target}"), embedder=HashEmbedder())
    engine.build()
    return engine


def test_damaged_or_mismatched_collection_is_rebuilt(small_data: LibraryData, cache: Path, local: SearchEngine,
                                                      tmp_path: Path) -> None:
    target = str(tmp_path / "damaged.db")
    first = _fresh(small_data, cache, target)
    backend = first.backend
    assert isinstance(backend, MilvusBackend)
    name = backend.collection
    backend.client.delete(name, filter="chunk < 7")  # rows lost, e.g. a half-done restore
    second = _fresh(small_data, cache, target)
    assert isinstance(second.backend, MilvusBackend)
    assert second.backend.action == f"rebuilt (holds {len(first.chunks) - 7} rows, not {len(first.chunks)})"
    _same(local.rank_lexical(QUERIES[0], None, None), second.rank_lexical(QUERIES[0], None, None))

    meta = json.loads(backend.client.describe_collection(name)["properties"][META_PROPERTY])
    backend.client.alter_collection_properties(name, properties={META_PROPERTY: json.dumps({**meta, "embedder": "other"})})
    third = _fresh(small_data, cache, target)
    assert isinstance(third.backend, MilvusBackend)
    assert third.backend.action == "rebuilt (was filled for another embedder ('other'))"
    _same(local.rank_dense(QUERIES[1], None, 10), third.rank_dense(QUERIES[1], None, 10))


def test_foreign_collection_is_refused(small_data: LibraryData, cache: Path, local: SearchEngine, tmp_path: Path) -> None:
    from pymilvus import DataType, MilvusClient

    target = str(tmp_path / "foreign.db")
    client = MilvusClient(target)
    name = COLLECTION_PREFIX + content_key(local)[:NAME_DIGITS]
    schema = MilvusClient.create_schema(auto_id=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("v", DataType.FLOAT_VECTOR, dim=2)
    index = client.prepare_index_params()
    index.add_index(field_name="v", index_type="FLAT", metric_type="IP")
    client.create_collection(name, schema=schema, index_params=index)
    client.insert(name, [{"id": 1, "v": [1.0, 0.0]}])
    engine = SearchEngine(small_data, SearchConfig(cache_dir=cache, backend=f"milvus:{target}"), embedder=HashEmbedder())
    with pytest.raises(SearchBackendError, match=f"--search-backend milvus:{target}: collection {name} exists but was not made by incidentlib"):
        engine.build()
    assert client.query(name, filter="", output_fields=["count(*)"])[0]["count(*)"] == 1  # left as it was


def test_sparse_rows_hold_our_bm25_weights(milvus: SearchEngine) -> None:
    backend = milvus.backend
    assert isinstance(backend, MilvusBackend)
    postings = milvus.lexical.postings
    chunk_terms = backend_milvus._ChunkTerms(postings)
    rows = [row for start in range(0, postings.size, 7) for row in chunk_terms.rows(start, min(start + 7, postings.size))]
    assert len(rows) == postings.size
    triples = sorted((term, chunk, weight) for chunk, row in enumerate(rows) for term, weight in row.items())
    terms = np.repeat(np.arange(len(postings.vocabulary)), np.diff(postings.indptr))
    assert [t for t, _, _ in triples] == terms.tolist()  # grouped by term as in the postings, chunks ascending
    assert [c for _, c, _ in triples] == postings.indices.tolist()
    assert np.allclose([w for _, _, w in triples], postings.data)


@pytest.mark.parametrize(("spec", "reason"), [
    ("milvus:", "needs a file path"),
    ("milvus:index.txt", "ends in .db"),
    ("milvus:grpc://host:19530", "http\\(s\\):// URL"),
    ("elastic:http://x", "expected local, milvus:PATH"),
])
def test_bad_backend_values_name_the_option(spec: str, reason: str) -> None:
    with pytest.raises(InvalidRequest, match=f"--search-backend: .*{reason}"):
        Library.search_settings(backend=spec)
    with pytest.raises(ValidationError):
        SearchConfig(backend=spec)


def test_default_and_normalised_values() -> None:
    assert SearchConfig().backend == "local"
    assert Library.search_settings().backend == "local"
    assert Library.search_settings(backend="milvus:http://db:19530/").backend == "milvus:http://db:19530"


def test_unreachable_server_is_a_clear_error(small_data: LibraryData, cache: Path) -> None:
    engine = SearchEngine(small_data, SearchConfig(cache_dir=cache, backend="milvus:http://127.0.0.1:9"), embedder=HashEmbedder())
    with pytest.raises(SearchBackendError, match=re.escape("--search-backend milvus:http://127.0.0.1:9: cannot open or reach Milvus")):
        engine.rank_lexical("gpu")


def test_cli_rejects_a_bad_backend() -> None:
    result = CliRunner().invoke(app, ["search", "gpu", "--search-backend", "milvus:nowhere"])
    assert result.exit_code == 2
    assert "--search-backend" in result.output and ".db" in result.output


#: Every third eval query: both backends answer the same sample, so the comparison is as strict, and the test was the
#: slowest of the slow subset (207 s with every query); a third keeps every kind and language of query present.
EVAL_STRIDE = 3


@pytest.mark.slow
def test_eval_numbers_match_the_local_backend(search_library: Library, cache_dir: Path, tmp_path: Path) -> None:
    """`incidentlib eval` on a third of the bundled eval queries with the default embedder, both backends on the
    same queries: every number within 0.02."""
    from incidentlib.library import DEFAULT_EMBEDDER

    items = search_library.eval_queries()[::EVAL_STRIDE]
    assert len({item.lang for item in items}) == len({item.lang for item in search_library.eval_queries()})  # every group
    local = search_library.evaluate(items, [DEFAULT_EMBEDDER], cache_dir=cache_dir)
    config = search_library.search_config.model_copy(update={"backend": f"milvus:{tmp_path / 'eval.db'}"})
    on_milvus = Library(search_library.data, config)
    on_milvus.build_index()
    assert isinstance(on_milvus._search_engine.backend, MilvusBackend)
    remote = on_milvus.evaluate(items, [DEFAULT_EMBEDDER], cache_dir=cache_dir)
    assert [m.mode for m in remote.modes] == [m.mode for m in local.modes]
    compared = 0
    for mine, theirs in zip(remote.modes, local.modes, strict=True):
        pairs = [(mine.overall, theirs.overall), *((mine.by_lang[g], theirs.by_lang[g]) for g in theirs.by_lang)]
        assert set(mine.by_lang) == set(theirs.by_lang)
        for got, want in pairs:
            for field, value in want.model_dump().items():
                assert getattr(got, field) == pytest.approx(value, abs=0.02), (mine.mode, field)
                compared += 1
    assert compared > 100
    assert any(m.overall.mrr > 0.3 for m in remote.modes)  # a real ranking, not two empty ones
