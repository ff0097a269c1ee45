"""The neighbourhood step of ``similar``: a candidate is scored with its nearest incidents, on a
small labelled collection made here (three causes, seven records each, one record of another
cause written in the query's place names)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from conftest import seed_tagger
from fakes import HashEmbedder

from incidentlib import Library
from incidentlib.loader import load_library
from incidentlib.search.engine import SearchConfig
from incidentlib.search.similarity import BALANCED, ELBOW, NEIGHBOURHOOD_SIZE, NEIGHBOURS, SimilarityIndex, elbow_sizes
from incidentlib.similar_eval import precision_at

# Words that say each cause; every record uses some of them, so records of one cause resemble each other.
CAUSES = {
    "disk": ["disk", "full", "volume", "filesystem", "inode", "quota", "storage", "space"],
    "cert": ["certificate", "expired", "tls", "handshake", "renewal", "chain", "https", "issuer"],
    "dns": ["dns", "resolver", "zone", "nameserver", "lookup", "record", "servfail", "ttl"],
}
FILLER = ["morning", "evening", "weekend", "customers", "engineers", "rollback", "paged", "escalated", "mitigated", "restored", "monitoring", "dashboard", "alerts", "ticket", "vendor", "contract", "region", "cluster", "tenant", "account", "billing", "portal", "mobile", "desktop", "partner", "report", "review", "timeline", "audit", "budget", "roadmap", "holiday", "migration", "release", "sprint", "backlog", "oncall", "handover", "pager", "runbook", "checklist", "meeting", "summary", "followup", "owner", "priority", "severity", "customer", "support", "status", "banner"]
PLACE = "frankfurt rhein datacenter frankfurt rhein datacenter"  # what the query and the decoy share, and nothing else does
PER_CAUSE = 7  # more than NEIGHBOURHOOD_SIZE, so each record's nearest are of its own cause


def write_collection(folder: Path) -> tuple[Path, dict[str, str], str, str]:
    rng = random.Random(5)
    filler = list(FILLER)
    rng.shuffle(filler)
    rows, label_of = [], {}
    for cause, words in CAUSES.items():
        for n in range(PER_CAUSE):
            record_id = f"NB-{len(rows) + 1:04d}"
            body = " ".join(rng.sample(words, 4))
            other = " ".join(filler[2 * len(rows): 2 * len(rows) + 2])  # words no other record has: no two records are duplicates
            rows.append({"id": record_id, "org": f"Org {cause} {n}", "title": f"{other} outage",
                         "body": f"The service failed: {body}.", "source_url": f"https://example.com/pm/{record_id}"})
            label_of[record_id] = cause
    query, decoy = rows[0]["id"], rows[PER_CAUSE]["id"]  # the first disk record; the first certificate record
    rows[0]["body"] += f" It happened in {PLACE}."
    rows[PER_CAUSE]["body"] += f" It happened in {PLACE}."
    collection = folder / "collection.jsonl"
    collection.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return collection, label_of, query, decoy


@pytest.fixture(scope="module")
def neighbourhood(tmp_path_factory: pytest.TempPathFactory, hashed_tagger: Path) -> tuple[Library, dict[str, str], str, str]:
    from incidentlib.importing import ImportFormat, ImportOptions, run_import

    folder = tmp_path_factory.mktemp("neighbourhood")
    source, label_of, query, decoy = write_collection(folder)
    report = run_import(source, folder / "lib", ImportOptions(format=ImportFormat.jsonl, id_prefix="NB", keep_near_duplicates=True))
    assert report.written and len(report.accepted) == len(label_of), report.rejected
    assert [a.id for a in report.accepted] == list(label_of)  # ids kept in the order written
    library = Library(load_library(folder / "lib"), SearchConfig(cache_dir=seed_tagger(hashed_tagger, folder / "cache")),
                      embedder=HashEmbedder())
    library.build_index()
    service = library._search_service
    assert service.similarity.neighbours == NEIGHBOURS == 0  # off by default
    service.__dict__["similarity"] = SimilarityIndex(service.engine, neighbours=NEIGHBOURHOOD_SIZE)  # what `similar` ranks with
    return library, label_of, query, decoy


def test_nearest_incidents_are_of_the_same_cause(neighbourhood: tuple[Library, dict[str, str], str, str]) -> None:
    library, label_of, _, _ = neighbourhood
    index = library._search_service.similarity
    assert index.neighbours == NEIGHBOURHOOD_SIZE
    agree = [label_of[index.ids[j]] == label_of[incident_id] for i, incident_id in enumerate(index.ids)
             for j in index.nearest[i][:NEIGHBOURHOOD_SIZE]]
    assert all(i not in row for i, row in enumerate(index.nearest))  # never its own neighbour
    assert sum(agree) / len(agree) > 0.8


def test_a_candidate_that_matches_alone_falls_below_ones_whose_neighbours_match(
        neighbourhood: tuple[Library, dict[str, str], str, str]) -> None:
    library, label_of, query, decoy = neighbourhood
    engine = library._search_service.engine
    alone, with_neighbours = SimilarityIndex(engine, neighbours=0), SimilarityIndex(engine, neighbours=NEIGHBOURHOOD_SIZE)
    incident = library.data.incidents[query]

    def top(index: SimilarityIndex, k: int = 3) -> list[str]:
        return [e.incident_id for e in index.rank(index.incident_query(incident), k)]

    assert decoy in top(alone)  # the shared place names put the other cause's record near the top ...
    assert decoy not in top(with_neighbours)  # ... its own neighbours (certificates) do not match the query
    same = {i for i, c in label_of.items() if c == label_of[query] and i != query}
    assert precision_at(top(with_neighbours), same, 3) > precision_at(top(alone), same, 3)

    def mean_precision(index: SimilarityIndex) -> float:
        return sum(precision_at([e.incident_id for e in index.rank(index.incident_query(library.data.incidents[q]), 5)],
                                {i for i, c in label_of.items() if c == label_of[q] and i != q}, 5) for q in label_of) / len(label_of)

    assert mean_precision(with_neighbours) >= mean_precision(alone)


def test_why_names_the_neighbours_that_raised_a_result(neighbourhood: tuple[Library, dict[str, str], str, str]) -> None:
    library, label_of, query, _ = neighbourhood
    response = library.similar(incident_id=query, k=5)
    named = [n for r in response.results for n in r.why.neighbours]
    assert named and query not in named
    assert all(label_of[n] == label_of[query] for n in named)
    # a filter restricts the neighbours too: a result's neighbours are candidates
    index = library._search_service.similarity
    allowed = {i for i, c in label_of.items() if c != "disk"} | {query}
    ranked = index.rank(index.incident_query(library.data.incidents[query]), 5, allowed)
    assert ranked and all(e.incident_id in allowed and set(e.neighbours) <= allowed - {query} for e in ranked)


def test_neighbours_off_and_out_of_range(neighbourhood: tuple[Library, dict[str, str], str, str]) -> None:
    library, _, query, _ = neighbourhood
    engine = library._search_service.engine
    alone = SimilarityIndex(engine, neighbours=0)
    ranked = alone.rank(alone.incident_query(library.data.incidents[query]), 5)
    assert all(e.neighbours == [] for e in ranked)
    with pytest.raises(ValueError, match="neighbours"):
        SimilarityIndex(engine, neighbours=-1)


def test_elbow_sizes_end_each_neighbourhood_at_the_largest_drop() -> None:
    scores = np.array([
        [0.9, 0.85, 0.8, 0.2, 0.1],   # a group of three, then a fall
        [0.9, 0.3, 0.25, 0.2, 0.1],   # no group: only the nearest
        [0.5, 0.5, 0.5, 0.5, 0.5],    # flat: every drop is 0, the first wins
    ])
    assert elbow_sizes(scores).tolist() == [3, 1, 1]
    assert elbow_sizes(scores * 7 - 3).tolist() == [3, 1, 1]  # shape only: shift and scale change nothing
    assert elbow_sizes(scores[:, :1]).tolist() == [1, 1, 1] and elbow_sizes(scores[:, :0]).tolist() == [0, 0, 0]


def test_elbow_neighbourhood_keeps_same_cause_groups_and_respects_filters(
        neighbourhood: tuple[Library, dict[str, str], str, str]) -> None:
    library, label_of, query, decoy = neighbourhood
    engine = library._search_service.engine
    elbow = SimilarityIndex(engine, neighbours=ELBOW)
    sizes = elbow.elbow_sizes
    assert sizes.min() >= 1 and sizes.max() < elbow.nearest.shape[1]
    kept = [(label_of[elbow.ids[j]] == label_of[incident_id]) for i, incident_id in enumerate(elbow.ids)
            for j in elbow.nearest[i][: sizes[i]]]
    assert sum(kept) / len(kept) > 0.8  # the group before the largest drop is mostly of the incident's own cause
    alone = SimilarityIndex(engine, neighbours=0)

    def mean_precision(index: SimilarityIndex) -> float:
        return sum(precision_at([e.incident_id for e in index.rank(index.incident_query(library.data.incidents[q]), 5)],
                                {i for i, c in label_of.items() if c == label_of[q] and i != q}, 5) for q in label_of) / len(label_of)

    # the decoy's nearest is the query (the shared place names); the query is never a candidate's neighbour
    assert elbow.nearest[elbow.ids.index(decoy)][0] == elbow.ids.index(query)
    assert mean_precision(elbow) >= mean_precision(alone)
    allowed = {i for i, c in label_of.items() if c != "dns"} | {query}
    filtered = elbow.rank(elbow.incident_query(library.data.incidents[query]), 5, allowed)
    assert filtered and all(e.incident_id in allowed and set(e.neighbours) <= allowed - {query} for e in filtered)
    with pytest.raises(ValueError, match="neighbours"):
        SimilarityIndex(engine, neighbours="widest")


def test_balanced_mix_weighs_own_score_and_neighbourhood_mean_equally(
        neighbourhood: tuple[Library, dict[str, str], str, str]) -> None:
    library, label_of, query, _ = neighbourhood
    engine = library._search_service.engine
    pooled = SimilarityIndex(engine, neighbours=NEIGHBOURHOOD_SIZE)
    balanced = SimilarityIndex(engine, neighbours=NEIGHBOURHOOD_SIZE, mix=BALANCED)
    alone = SimilarityIndex(engine, neighbours=0)
    incident = library.data.incidents[query]
    own = {e.incident_id: e.score for e in alone.rank(alone.incident_query(incident), len(label_of))}
    for index, own_share in ((pooled, 1 / (1 + NEIGHBOURHOOD_SIZE)), (balanced, 0.5)):
        for result in index.rank(index.incident_query(incident), len(label_of)):
            c = index.position[result.incident_id]
            near = [index.ids[j] for j in index.nearest[c] if index.ids[j] != query][:NEIGHBOURHOOD_SIZE]
            mean = sum(own[j] for j in near) / len(near)
            assert result.score == pytest.approx(own_share * own[result.incident_id] + (1 - own_share) * mean)

    def mean_precision(index: SimilarityIndex) -> float:
        return sum(precision_at([e.incident_id for e in index.rank(index.incident_query(library.data.incidents[q]), 5)],
                                {i for i, c in label_of.items() if c == label_of[q] and i != q}, 5) for q in label_of) / len(label_of)

    assert mean_precision(balanced) >= mean_precision(alone)
    with pytest.raises(ValueError, match="mix"):
        SimilarityIndex(engine, neighbours=NEIGHBOURHOOD_SIZE, mix="median")
