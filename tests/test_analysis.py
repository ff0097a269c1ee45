from __future__ import annotations

import io
import random
from collections import Counter

import matplotlib.image
import pytest
from fastapi.testclient import TestClient

from incidentlib import Library
from incidentlib.analysis import ClusterMethod
from incidentlib.analysis.clusters import RawCluster, quality
from incidentlib.api import ServiceSettings, create_app
from incidentlib.library import FilterError

LOCAL = "http://127.0.0.1:8000"  # the Host allow-list accepts loopback names, not TestClient's "testserver"

WATCHDOG = ("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=408951, OpType=_ALLGATHER_BASE, "
            "Timeout(ms)=600000) ran for 600351 milliseconds before timing out")


@pytest.mark.parametrize("method", list(ClusterMethod))
def test_clusters_are_deterministic_and_cover_the_library(search_library, data_dir, cache_dir, method) -> None:
    from incidentlib.search.engine import SearchConfig

    first = search_library.clusters(method)
    fresh = Library.open(data_dir, SearchConfig(cache_dir=cache_dir))
    second = fresh.clusters(method)
    assert first.model_dump() == second.model_dump()
    members = [m.id for c in first.clusters for m in c.members]
    assert sorted(members) == sorted(i.id for i in search_library.incidents())
    for cluster in first.clusters:
        assert cluster.size == len(cluster.members)
        assert cluster.representative in {m.id for m in cluster.members}
        assert cluster.labels["en"] and cluster.labels["ko"]
    assert 0.0 <= first.quality.purity <= 1.0 and 0.0 <= first.quality.nmi <= 1.0


def test_graph_clusters_beat_a_random_partition(search_library) -> None:
    found = search_library.clusters("graph")
    sizes = [c.size for c in found.clusters]
    ids = [i.id for i in search_library.incidents()]
    rng = random.Random(0)
    random_purities = []
    for _ in range(20):
        rng.shuffle(ids)
        chunks, start = [], 0
        for size in sizes:
            chunks.append(RawCluster(ids[start:start + size], ids[start]))
            start += size
        random_purities.append(quality({i.id: i.causes for i in search_library.incidents()}, chunks).purity)
    assert found.quality.purity > max(random_purities)


def test_cluster_labels_come_from_defining_concepts(search_library) -> None:
    clusters = search_library.clusters("graph", lang="ko")
    biggest = clusters.clusters[0]
    assert biggest.defining_concepts
    top = biggest.defining_concepts[0]
    inside = sum(1 for m in biggest.members if top.id in search_library.get(m.id).concept_ids()[top.kind])
    assert inside == top.count
    assert top.label in biggest.label  # Korean label built from the concepts' Korean labels
    assert search_library.cluster(biggest.id, "ko").id == biggest.id
    with pytest.raises(KeyError, match="no cluster"):
        search_library.cluster("g-99")


@pytest.mark.parametrize("text", ["MFU drops to 70% every 15 seconds", "MFU 가 처음엔 좋다가 15초마다 70% 로 떨어진다", WATCHDOG])
def test_diagnosis_of_the_seed_symptoms_points_to_its_causes(search_library, text) -> None:
    result = search_library.diagnose(text=text, lang="ko" if "초" in text else "en")
    imbue = set(search_library.get("IL-0025").causes)
    top = [c.id for c in result.causes[:3]]
    assert set(top) & imbue
    assert "IL-0025" in {e.id for c in result.causes[:3] for e in c.evidence}
    assert "IL-0025" in [s.id for s in result.similar[:3]]
    assert result.symptoms  # MFU or collective timeout recognised


def test_diagnosis_explains_the_watchdog_signal(search_library) -> None:
    result = search_library.diagnose(text=WATCHDOG)
    assert result.signals and result.signals[0].incident_id == "IL-0025"
    assert "IL-0025" in result.signals[0].explanation
    korean = search_library.diagnose(text=WATCHDOG, lang="ko")
    assert "나타난 메시지" in korean.signals[0].explanation


def test_diagnosis_says_when_evidence_is_thin(search_library) -> None:
    counts = Counter(s for i in search_library.incidents() for s in i.symptoms)
    rare = min(counts, key=lambda s: (counts[s], s))
    assert counts[rare] == 1  # the library has symptoms seen in a single incident
    result = search_library.diagnose(symptoms=[rare])
    assert result.causes, "the incident behind a symptom names at least one cause"
    assert result.causes[0].support == 1  # one incident is all the evidence there is
    assert result.confidence == "low" and "thin" in result.note
    with pytest.raises(FilterError, match="did you mean"):
        search_library.diagnose(symptoms=["colective timeout"])
    with pytest.raises(ValueError, match="give symptoms"):
        search_library.diagnose()


def test_symptom_by_label_in_korean(search_library) -> None:
    result = search_library.diagnose(symptoms=["링크 플래핑"], lang="ko")
    assert [s.id for s in result.symptoms] == ["link-flapping"]
    holders = {i.id for i in search_library.incidents() if "link-flapping" in i.symptoms}
    assert {e.id for c in result.causes for e in c.evidence} <= holders


def test_every_signal_is_explained_in_both_languages(search_library) -> None:
    english = search_library.signals("en")
    korean = search_library.signals("ko")
    assert len(english) == len(korean) == sum(len(i.signals) for i in search_library.incidents())
    assert all(e.incident_id in e.explanation for e in english)


def _png_size(payload: bytes) -> tuple[int, int]:
    assert payload[:8] == b"\x89PNG\r\n\x1a\n"
    image = matplotlib.image.imread(io.BytesIO(payload), format="png")
    return image.shape[1], image.shape[0]


def test_images_are_valid(search_library) -> None:
    width, height = _png_size(search_library.map_png("ko"))
    assert width > 800 and height > 600
    width, height = _png_size(search_library.neighbourhood_png("IL-0025", "en"))
    assert width > 800 and height > 600
    page = search_library.map_html("en")
    assert page.startswith("<!doctype html>") and "<svg" in page
    assert all(i.id in page for i in search_library.incidents())
    assert "<script src" not in page and "stylesheet" not in page  # self-contained


def test_analysis_endpoints(search_library) -> None:
    with TestClient(create_app(search_library, ServiceSettings(mount_mcp=False)), base_url=LOCAL) as client:
        body = client.get("/clusters", params={"method": "embedding"}).json()
        assert body["method"] == "embedding" and body["clusters"][0]["id"].startswith("e-")
        first = client.get("/clusters").json()["clusters"][0]
        assert client.get(f"/clusters/{first['id']}", params={"lang": "ko"}).json()["labels"]["ko"] == first["labels"]["ko"]
        assert client.get("/clusters/g-99").status_code == 404
        diagnosis = client.post("/diagnose", json={"text": "MFU drops to 70% every 15 seconds"}).json()
        assert diagnosis["causes"] and diagnosis["confidence"] in ("low", "medium", "high")
        assert client.post("/diagnose", json={}).status_code == 422
        assert client.post("/diagnose", json={"symptoms": ["nonsense-symptom"]}).status_code == 422
        assert client.get("/signals").json()[0]["explanation"]
        page = client.get("/map")
        assert page.headers["content-type"].startswith("text/html") and "<svg" in page.text
        png = client.get("/map", params={"format": "png"})
        assert png.headers["content-type"] == "image/png" and _png_size(png.content)[0] > 800
        graph = client.get("/incidents/IL-0025/graph.png")
        assert graph.headers["content-type"] == "image/png" and _png_size(graph.content)[0] > 800
        assert client.get("/incidents/IL-9999/graph.png").status_code == 404
