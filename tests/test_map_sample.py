"""Maps of a large library show a seeded sample that keeps each graph cluster's share; the clusters page stays small."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from incidentlib import Library, analysis
from incidentlib.api import ServiceSettings, create_app
from incidentlib.web import _routes

SHOWN = 40


def _fresh(search_library) -> Library:
    return Library.open(search_library.root, search_library.search_config)


def test_map_samples_each_cluster_by_its_share(monkeypatch, search_library) -> None:
    monkeypatch.setattr(analysis, "MAP_POINTS", SHOWN)
    library = _fresh(search_library)
    points = library.map_points()
    published = [i.id for i in library.incidents() if not i.is_draft]
    assert library.map_coverage() == (len(points), len(published))
    clusters = library.clusters("graph").clusters
    on_map = {p.id for p in points}
    assert len(on_map) == len(points) and on_map <= set(published)
    assert [p.id for p in points] == [i for i in published if i in on_map]  # in the library's order
    for cluster in clusters:
        members = [m.id for m in cluster.members if m.id in set(published)]
        expected = min(len(members), max(1, round(len(members) * SHOWN / len(published))))
        assert sum(1 for m in members if m in on_map) == expected, cluster.id
        assert cluster.representative in on_map or cluster.representative not in set(published)
        assert all(p.cluster == cluster.id for p in points if p.id in set(members))
    assert SHOWN <= len(points) <= SHOWN + len(clusters)  # each cluster's share is rounded, and at least one
    again = _fresh(search_library).map_points()
    assert [(p.id, p.x, p.y) for p in again] == [(p.id, p.x, p.y) for p in points]  # seeded: the same map
    note = f"{len(points):,} of {len(published):,} incidents shown"
    assert note in library.map_html()


def test_small_library_maps_every_incident(search_library) -> None:
    shown, total = search_library.map_coverage()
    assert shown == total == sum(1 for i in search_library.incidents() if not i.is_draft)
    assert "incidents shown" not in search_library.map_html()


def test_clusters_page_lists_a_bounded_number_of_members(monkeypatch, search_library) -> None:
    monkeypatch.setattr(analysis, "MAP_POINTS", SHOWN)
    monkeypatch.setattr(_routes, "CLUSTER_MEMBERS_SHOWN", 3)
    library = _fresh(search_library)
    with TestClient(create_app(library, ServiceSettings(mount_mcp=False)), base_url="http://127.0.0.1:8000") as client:
        page = client.get("/ui/clusters", params={"lang": "en"})
    assert page.status_code == 200
    body = page.text
    shown, total = library.map_coverage()
    assert f"{shown:,} of {total:,} incidents on the map" in body
    assert len(re.findall(r"<circle ", body)) == shown
    clusters = library.clusters("graph").clusters
    big = [c for c in clusters if c.size > 3]
    assert big and body.count("more: every member is in") == len(big)
    first = big[0]
    start = body.index(f'id="{first.id}"')
    section = body[start:body.index("</details>", start)]
    assert len(re.findall(r'<span class="id">', section)) == 3
    assert f"{first.size - 3:,} more" in section and f'href="/clusters/{first.id}?lang=en"' in section
