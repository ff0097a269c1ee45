from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import small_library

from incidentlib import IncidentFilter, Library
from incidentlib.embeddings import EmbedderConfig
from incidentlib.errors import QueryError
from incidentlib.evaluation import score_ranking
from incidentlib.requests import MAX_QUERY_CHARS
from incidentlib.search.engine import SearchConfig, SearchMode
from incidentlib.search.fusion import RRF_K, FusionMethod, rrf, weighted
from incidentlib.search.store import FORMAT_VERSION

SMALL = ["IL-0025", "IL-0126", "IL-0021", "IL-0101", "IL-0076", "IL-0103", "IL-0135", "IL-0055"]


def use_library(root: Path, cache: Path, **config) -> Library:
    return Library.open(root, SearchConfig(embedder=EmbedderConfig(backend="use-m3"), cache_dir=cache, **config))


@pytest.fixture()
def small(tmp_path: Path, data_dir: Path) -> Path:
    return small_library(tmp_path / "small", data_dir, SMALL)


# ---- the persisted index -------------------------------------------------------

@pytest.mark.slow
def test_index_is_built_then_reused_and_self_describing(small: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = use_library(small, cache).build_index()
    assert first.action == "built" and first.embedded == first.chunks > 0
    meta = json.loads((Path(first.path) / "meta.json").read_text(encoding="utf-8"))
    assert meta["format_version"] == FORMAT_VERSION and meta["embedder"] == "use-m3" and meta["dim"] == 512
    assert meta["content_hash"] == use_library(small, cache).data.content_hash
    again = use_library(small, cache).build_index()
    assert again.action == "reused" and again.embedded == 0
    # every build lives in its own folder; only the current one is kept
    assert [p.name for p in Path(first.path).glob("build-*")] == [meta["build"]]


@pytest.mark.slow
def test_adding_an_incident_extends_the_index_incrementally(small: Path, tmp_path: Path, data_dir: Path) -> None:
    cache = tmp_path / "cache"
    before = use_library(small, cache).build_index()
    shutil.copy(data_dir / "incidents" / "IL-0133.yaml", small / "incidents" / "IL-0133.yaml")
    doc = yaml.safe_load((small / "incidents" / "IL-0133.yaml").read_text(encoding="utf-8"))
    doc.pop("related", None)
    (small / "incidents" / "IL-0133.yaml").write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    library = use_library(small, cache)
    after = library.build_index()
    assert after.action == "extended"
    assert after.reused == before.chunks
    assert after.embedded == after.chunks - before.chunks > 0
    hits = library.search("Nebius storm cooling", k=3, mode="dense")
    assert hits.results[0].id == "IL-0133"


@pytest.mark.slow
def test_editing_an_incident_reembeds_only_changed_chunks(small: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    before = use_library(small, cache).build_index()
    path = small / "incidents" / "IL-0101.yaml"
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    doc["title"]["en"] = doc["title"]["en"] + " (edited)"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    after = use_library(small, cache).build_index()
    assert after.action == "updated"
    assert after.embedded == 1 and after.reused == before.chunks - 1


@pytest.mark.slow
def test_embedders_never_share_an_index(small: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    use_report = use_library(small, cache).build_index()
    e5_report = Library.open(small, SearchConfig(embedder=EmbedderConfig(backend="e5-small"), cache_dir=cache)).build_index()
    assert use_report.path != e5_report.path
    assert e5_report.action == "built"


@pytest.mark.slow
def test_corrupt_cache_is_rebuilt(small: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    report = use_library(small, cache).build_index()
    (Path(report.path) / "meta.json").write_text("{not json", encoding="utf-8")
    rebuilt = use_library(small, cache).build_index()
    assert rebuilt.action == "built"
    assert json.loads((Path(rebuilt.path) / "meta.json").read_text(encoding="utf-8"))["chunks"] == rebuilt.chunks


@pytest.mark.slow
def test_hnsw_index_above_threshold(small: Path, tmp_path: Path) -> None:
    library = use_library(small, tmp_path / "cache", hnsw_threshold=10)
    report = library.build_index()
    assert report.index_kind == "hnsw"
    flat = use_library(small, tmp_path / "cache-flat")
    query = "BGP routes withdrawn, DNS servers unreachable, Facebook down"
    assert library.search(query, k=3, mode="dense").results[0].id == flat.search(query, k=3, mode="dense").results[0].id


# ---- ranking -----------------------------------------------------------------------

def test_fusion_functions() -> None:
    lexical = [("a", 9.0), ("b", 5.0), ("c", 1.0)]
    dense = [("b", 0.9), ("d", 0.8)]
    fused = rrf([lexical, dense])
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert max(fused, key=fused.get) == "b"
    mixed = weighted(lexical, dense, alpha=0.5)
    assert mixed["b"] == pytest.approx(0.5 * 1.0 + 0.5 * 0.5)
    assert mixed["c"] == pytest.approx(0.0)


def test_lexical_search_matches_korean_particles_and_error_tokens(small: Path, tmp_path: Path) -> None:
    library = use_library(small, tmp_path / "cache")
    korean = library.search("워치독 타임아웃으로 학습이 멈췄어요", k=3, mode="lexical")
    assert korean.results[0].id == "IL-0025"
    assert "타임아웃" in korean.results[0].why.matched_terms
    pasted = library.search("OpType=_ALLGATHER_BASE ran for 600351 milliseconds", k=3, mode="lexical")
    assert pasted.results[0].id == "IL-0025"
    assert pasted.results[0].why.chunk.kind == "signal"
    assert "_allgather_base" in pasted.results[0].why.matched_terms


def test_an_organisation_named_in_korean_finds_records_that_write_it_in_english(small: Path, tmp_path: Path) -> None:
    """IL-0025 writes "Imbue" in both languages; the organisation's Korean label (임뷰) is in its concepts passage."""
    library = use_library(small, tmp_path / "cache")
    assert "임뷰" not in library.get("IL-0025").body.ko
    found = library.search("임뷰의 사례", k=3, mode="lexical")
    assert found.results and found.results[0].id == "IL-0025" and found.results[0].why.chunk.kind == "concepts"


def test_a_snippet_follows_lang_when_the_match_is_in_the_other_language(small: Path, tmp_path: Path) -> None:
    """An English question asked with lang=ko matches English text; the bilingual record's snippet is Korean."""
    library = use_library(small, tmp_path / "cache")
    response = library.search("watchdog timeout while training", k=3, mode="lexical", lang="ko")
    english = [r for r in response.results if r.why.chunk.lang == "en"]
    assert english  # the match itself is English text
    for result in english:  # Korean text, or a log line quoted verbatim (the same in either language)
        signals = [signal.text for signal in library.get(result.id).signals]
        assert re.search("[\uac00-\ud7a3]", result.snippet) or any(result.snippet.strip("…") in text for text in signals), \
            result.snippet[:80]


@pytest.mark.slow
def test_filters_apply_before_ranking(small: Path, tmp_path: Path) -> None:
    library = use_library(small, tmp_path / "cache")
    everything = library.search("outage", k=8, mode="dense")
    assert len(everything.results) == 8
    only_cloud = IncidentFilter(year_from=2017, year_to=2021)
    expected = {i.id for i in library.incidents() if 2017 <= i.year <= 2021}
    for mode in SearchMode:
        found = library.search("GPU training cluster", k=len(expected), mode=mode, filters=only_cloud)
        assert {r.id for r in found.results} <= expected
        if mode is not SearchMode.lexical:  # lexical returns only incidents that share a term
            assert len(found.results) == len(expected)
    by_org = library.search("outage", k=5, filters=IncidentFilter(org="cloudflare"))
    assert [r.id for r in by_org.results] == ["IL-0101"]


def test_query_limits(small: Path, tmp_path: Path) -> None:
    library = use_library(small, tmp_path / "cache")
    with pytest.raises(QueryError, match="empty"):
        library.search("   ")
    with pytest.raises(QueryError, match="limit"):
        library.search("x" * (MAX_QUERY_CHARS + 1))
    with pytest.raises(ValueError, match="k must be"):
        library.search("dns", k=0)


# ---- the full library with the default embedder ------------------------------------

def test_cross_lingual_hybrid_search(search_library: Library) -> None:
    # a Korean question about an incident written up in English
    response = search_library.search("정규 표현식 백트래킹 때문에 엣지 서버 CPU 가 100% 가 된 장애", k=5, lang="ko")
    assert "IL-0101" in [r.id for r in response.results]
    top = response.results[0]
    assert top.title == search_library.get(top.id).title.ko
    english = search_library.search("a storm stopped datacenter cooling and a whole GPU cloud region went down", k=5)
    assert "IL-0133" in [r.id for r in english.results]


def test_search_results_explain_themselves(search_library: Library) -> None:
    response = search_library.search("NCCL watchdog timeout InfiniBand", k=5)
    for result in response.results:
        assert result.snippet and result.why.chunk.text
        assert result.why.lexical_rank is not None or result.why.dense_rank is not None
    first = response.results[0]
    assert {c.id for c in first.why.shared_concepts} & {"nccl", "infiniband-fabric"}


def test_similar_to_pasted_log_line(search_library: Library) -> None:
    log = ("[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=408951, OpType=_ALLGATHER_BASE, "
           "Timeout(ms)=600000) ran for 600351 milliseconds before timing out")
    response = search_library.similar(text=log, k=5)
    # since the library grew, other records carry the same watchdog line (IL-0250); the seed stays near the top
    assert "IL-0025" in [r.id for r in response.results[:3]]
    assert all("nccl" in {c.id for c in r.why.shared_concepts} for r in response.results[:2])
    assert response.results[0].why.graph_score is not None


def test_similar_to_incident_combines_text_and_graph(search_library: Library) -> None:
    response = search_library.similar(incident_id="IL-0025", k=10)
    ids = [r.id for r in response.results]
    assert "IL-0025" not in ids and len(ids) == 10
    related = {item.id for item in search_library.related("IL-0025", limit=None)}
    assert set(ids) & related
    with pytest.raises(ValueError, match="exactly one"):
        search_library.similar()


def test_rag_context_passages_cite_sources(search_library: Library) -> None:
    passages = search_library.rag_context("S3 outage caused by a mistyped command", k=3)
    assert passages and passages[0].incident_id == "IL-0076"
    assert all(p.source_urls and p.text for p in passages)
    korean = search_library.rag_context("S3 명령 오타로 인한 장애", k=2, lang="ko")
    assert all(p.lang in ("ko", "raw") for p in korean)


def test_score_ranking_metrics() -> None:
    metrics = score_ranking(["x", "a", "y", "b"], ["a", "b"])
    assert metrics["recall_at_1"] == 0.0 and metrics["recall_at_5"] == 1.0
    assert metrics["mrr"] == pytest.approx(0.5)
    ideal = 1 + 1 / np.log2(3)
    assert metrics["ndcg_at_10"] == pytest.approx((1 / np.log2(3) + 1 / np.log2(5)) / ideal)


def test_fusion_override(search_library: Library) -> None:
    engine = search_library._search_engine
    rrf_hits = engine.search("InfiniBand link flapping", k=5, fusion=FusionMethod.rrf)
    weighted_hits = engine.search("InfiniBand link flapping", k=5, fusion=FusionMethod.weighted)
    assert len(rrf_hits) == len(weighted_hits) == 5
    # RRF scores are sums of 1/(RRF_K + rank) over two lists; weighted scores are min-max blends in [0, 1]
    # whose best is far above that bound. An ignored override would give both lists the default's scores.
    rrf_bound = 2 / (RRF_K + 1)
    assert all(h.score <= rrf_bound + 1e-12 for h in rrf_hits)
    assert weighted_hits[0].score > rrf_bound
    assert engine.config.fusion is FusionMethod.weighted  # the default, so the rrf call above really overrode it
