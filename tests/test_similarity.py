"""The similarity pipeline, inferred concepts and the label-agreement benchmark, on a small
labelled collection made here."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import seed_tagger
from fakes import HashEmbedder
from rdflib import Graph

from incidentlib import Library
from incidentlib.importing.duplicates import DuplicateIndex, normalise_url
from incidentlib.loader import load_library
from incidentlib.models import InferenceMethod
from incidentlib.search.boilerplate import Boilerplate, sentence_key, sentence_keys, split
from incidentlib.search.engine import SearchConfig
from incidentlib.search.tokenize import tokenize
from incidentlib.similar_eval import average_precision, load_labels, precision_at

APOLOGY = "We sincerely apologize for the impact this incident had on our customers."
NEXT = "Next steps are tracked in our public roadmap."

# Three root causes, four records each, written differently; every record carries the template.
RECORDS = {
    "dns": [
        "A change to the authoritative DNS zone removed the NS records and resolvers returned SERVFAIL for every domain.",
        "Name resolution failed worldwide after a bad zone file was pushed to the DNS servers; lookups timed out.",
        "The DNS provider's anycast resolvers stopped answering queries, so clients could not resolve our hostnames.",
        "An expired DNSSEC signature made validating resolvers reject our zone, and the site was unreachable by name.",
    ],
    "disk": [
        "The database primary ran out of disk space when write-ahead logs filled the volume; writes failed.",
        "A log rotation job stopped and the root filesystem filled up, so the storage nodes crashed.",
        "Disk usage on the queue brokers reached 100% and they refused new messages until volumes were extended.",
        "Backups accumulated on the local SSD until the filesystem was full and the service could not write.",
    ],
    "cert": [
        "An intermediate TLS certificate expired and browsers refused HTTPS connections to the API.",
        "Clients failed the TLS handshake because the certificate on the load balancer had expired overnight.",
        "The certificate authority's root expired and older devices could no longer validate our HTTPS chain.",
        "Automatic certificate renewal broke silently and the expired certificate took down the web front end.",
    ],
}


def write_collection(folder: Path) -> tuple[Path, Path]:
    rows, labels = [], []
    for label, texts in RECORDS.items():
        for text in texts:
            record_id = f"TS-{len(rows) + 1:04d}"
            rows.append({"id": record_id, "org": "Example Corp", "title": text.split(";")[0].split(",")[0],
                         "body": f"{text}\n\n{APOLOGY} {NEXT}", "source_url": f"https://status.example.com/history#{record_id}"})
            labels.append({"id": record_id, "labels": [label]})
    collection, label_file = folder / "collection.jsonl", folder / "labels.jsonl"
    collection.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    label_file.write_text("".join(json.dumps(r) + "\n" for r in labels), encoding="utf-8")
    return collection, label_file


def import_collection(folder: Path) -> tuple[Path, Path]:
    from incidentlib.importing import ImportFormat, ImportOptions, run_import

    source, labels = write_collection(folder)
    report = run_import(source, folder / "lib", ImportOptions(format=ImportFormat.jsonl, id_prefix="TS"))
    assert report.written and len(report.accepted) == 12, report.rejected  # fragment URLs are different incidents
    return folder / "lib", labels


@pytest.fixture(scope="module")
def collection(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> tuple[Library, Path]:
    """The collection searched with the real default embedder (for the slow, model-dependent tests)."""
    root, labels = import_collection(tmp_path_factory.mktemp("collection"))
    library = Library.open(root, SearchConfig(cache_dir=cache_dir))
    library.build_index()
    return library, labels


@pytest.fixture(scope="module")
def hashed_collection(tmp_path_factory: pytest.TempPathFactory, hashed_tagger: Path) -> tuple[Library, Path]:
    """The same collection with the instant hashed embedder: the pipeline without a model's cost."""
    folder = tmp_path_factory.mktemp("hashed")
    root, labels = import_collection(folder)
    library = Library(load_library(root), SearchConfig(cache_dir=seed_tagger(hashed_tagger, folder / "cache")),
                      embedder=HashEmbedder())
    library.build_index()
    return library, labels


def test_fragment_urls_are_different_incidents() -> None:
    assert normalise_url("https://status.example.com/history#a1") != normalise_url("https://status.example.com/history#b2")
    assert normalise_url("https://www.example.com/pm/") == normalise_url("http://example.com/pm#")
    index = DuplicateIndex()
    index.add("TS-0001", ["https://status.example.com/history#a1"], ["one"])
    assert index.find(["https://status.example.com/history#b2"], ["two"]) is None
    assert index.find(["https://status.example.com/history#a1"], ["three"]) is not None


def test_boilerplate_is_found_and_stripped_but_kept_for_display(hashed_collection: tuple[Library, Path]) -> None:
    library, _ = hashed_collection
    similarity = library._search_service.similarity
    assert similarity.boilerplate.is_boilerplate(APOLOGY) and similarity.boilerplate.is_boilerplate(NEXT)
    first = library.incidents()[0]
    stripped = similarity.boilerplate.strip(first.body.en or "")
    assert APOLOGY not in stripped and RECORDS["dns"][0][:40] in stripped
    assert APOLOGY in (library.get(first.id).body.en or "")  # stored text unchanged
    # a sentence shared by only two records is not a template
    assert not Boilerplate(["Same words here.", "Same words here.", "Other."]).keys


def test_a_texts_sentence_keys_at_once_are_each_sentences_key(data_dir: Path) -> None:
    library = Library.open(data_dir)
    texts = [text for incident in library.data.incidents.values() for field in (incident.summary, incident.body)
             for text in (field.get("en"), field.get("ko")) if text]
    texts += ["\u0130STANBUL DC lost power. Restored at 14:05!  Next steps?\nNone.",  # İ lowercases to two characters
              "Latency \u0661\u0662 ms\u3002\u4e0b\u4e00\u6b65 Done.\n\n\n  ...  ", "", "   \n "]  # other digits, 。
    assert sum(len(split(text)) for text in texts) > 1000
    for text in texts:
        assert sentence_keys(text) == [sentence_key(sentence) for sentence in split(text)], text


@pytest.mark.parametrize("block", [5, 7], ids=["three blocks, the last short", "two full blocks"])
def test_the_artefact_built_in_blocks_from_streams_is_the_textbook_bm25_matrix(
        hashed_collection: tuple[Library, Path], monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    """Rows joined a few records at a time, from texts given as one-pass streams, give exactly the matrix of the
    textbook build: every record's tokens counted in a dict, BM25 weights, a COO matrix made canonical."""
    from scipy import sparse

    from incidentlib.search import similarity as similarity_module
    from incidentlib.tagging.tagger import incident_text

    library, _ = hashed_collection
    index = library._search_service.similarity
    texts = [incident_text(incident) for incident in library.incidents()] + ["", "Only. Words. Here."]
    streams = []

    def stream() -> object:
        streams.append(1)
        return (text for text in texts)  # a generator: read once, no len()

    monkeypatch.setattr(similarity_module, "BUILD_BLOCK", block)  # 14 records
    built = index._build_artefact(stream)
    assert len(streams) == 2  # one pass counts the boilerplate, one tokenizes

    boilerplate = Boilerplate(texts)
    vocabulary: dict[str, int] = {}
    rows, cols, tfs, lengths = [], [], [], []
    for row, text in enumerate(texts):
        tokens = tokenize(boilerplate.strip(text))
        lengths.append(len(tokens))
        counts: dict[int, int] = {}
        for token in tokens:
            col = vocabulary.setdefault(token, len(vocabulary))
            counts[col] = counts.get(col, 0) + 1
        for col, count in counts.items():
            rows.append(row)
            cols.append(col)
            tfs.append(count)
    df = np.bincount(cols, minlength=len(vocabulary)).astype(np.float64)
    idf = np.log(1 + (len(texts) - df + 0.5) / (df + 0.5))
    length = np.asarray(lengths, dtype=np.float64)
    tf = np.asarray(tfs, dtype=np.float64)
    k1, b = similarity_module.BM25_K1, similarity_module.BM25_B  # the same operations in the same order: equal bits
    weight = idf[cols] * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length[rows] / float(length.mean())))
    expected = sparse.coo_matrix((weight, (rows, cols)), shape=(len(texts), len(vocabulary))).tocsr()
    expected.sort_indices()
    counts_expected = sparse.coo_matrix((np.asarray(tfs), (rows, cols)), shape=expected.shape).tocsr()
    counts_expected.sort_indices()

    assert built.vocabulary == list(vocabulary) and built.boilerplate_keys == boilerplate.keys
    assert built.matrix.shape == expected.shape and built.matrix.nnz == expected.nnz > 0
    assert np.array_equal(built.matrix.indptr, expected.indptr) and np.array_equal(built.matrix.indices, expected.indices)
    assert np.array_equal(built.matrix.data, expected.data)
    assert np.array_equal(built.counts, counts_expected.data) and built.counts.dtype == np.int32
    assert np.array_equal(built.idf, idf)
    by_term = expected.tocsc()
    by_term.sort_indices()
    assert all(np.array_equal(getattr(built.columns, name), getattr(by_term, name)) for name in ("indptr", "indices", "data"))
    assert built.matrix.getrow(len(texts) - 2).nnz == 0  # the empty record has an empty row


def test_log_lines_from_other_machines_tokenize_alike() -> None:
    mine = "NVRM: Xid (PCI:0000:1b:00): 79, pid=2172, GPU has fallen off the bus. host gpu-node-017 10.0.0.12 [ 1234.567890]"
    theirs = "NVRM: Xid (PCI:0000:c3:00): 79, pid=991, GPU has fallen off the bus. host gpu-node-233 10.4.1.9 [ 98.000001]"
    assert sorted(tokenize(mine)) == sorted(tokenize(theirs))
    assert "<pci>" in tokenize(mine) and "79" in tokenize(mine)
    watchdog = "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=408951, OpType=ALLREDUCE) ran for 600351 milliseconds"
    assert "<nccl_watchdog>" in tokenize(watchdog) and "<seq>" in tokenize(watchdog)
    assert "<http_5xx>" in tokenize("upstream returned HTTP 503") and "<http_5xx>" not in tokenize("HTTP 404")


def test_similar_finds_the_same_cause_and_explains_it(hashed_collection: tuple[Library, Path]) -> None:
    library, _ = hashed_collection
    dns = library.incidents()[0]
    response = library.similar(incident_id=dns.id, k=3)
    assert dns.id not in [r.id for r in response.results]
    same = {i.id for i in library.incidents()[:4]}
    assert sum(r.id in same for r in response.results) >= 2
    top = response.results[0]
    assert top.why.evidence is not None and {"dense", "lexical"} <= set(top.why.evidence)
    assert all(t not in {"apologize", "sincerely"} for t in top.why.matched_terms)  # boilerplate does not explain
    for result in response.results:  # each term shown is a word the record writes ("resolvers", not the stem "resolver")
        written = set(re.findall(r"[a-z0-9]+", library.get(result.id).summary.en.lower()))
        assert result.why.matched_terms and set(result.why.matched_terms) <= written, (result.why.matched_terms, written)
    text = library.similar(text="TLS certificate expired and HTTPS handshakes failed", k=3)
    cert = {i.id for i in library.incidents()[8:]}
    assert text.results[0].id in cert
    inferred_refs = [c for r in text.results for c in r.why.shared_concepts]
    assert all(c.inferred for c in inferred_refs)  # drafts have no curated links: every shared concept is inferred


@pytest.mark.slow
def test_eval_similar_reports_every_method_in_one_run(collection: tuple[Library, Path]) -> None:
    library, labels = collection
    report = library.evaluate_similar(str(labels), k=3)
    methods = {m.method: m for m in report.methods}
    assert set(methods) == {"random", "bm25", "dense", "similar (incident)", "similar (text)"}
    assert report.queries == 12 and report.candidates == 12
    for method in methods.values():
        assert 0.0 <= method.p_at_k <= 1.0 and 0.0 <= method.map <= 1.0
    assert methods["similar (incident)"].p_at_k > methods["random"].p_at_k
    assert methods["similar (text)"].p_at_k > methods["random"].p_at_k
    assert "| similar (text) |" in report.to_markdown()
    assert report.baseline in ("bm25", "dense") and methods[report.baseline].gain is None
    for name in ("similar (incident)", "similar (text)"):
        scored = methods[name]
        assert scored.gain is not None and scored.gain_low is not None and scored.gain_high is not None
        assert scored.gain_low <= scored.gain <= scored.gain_high


def test_labels_from_field_or_file_and_errors(hashed_collection: tuple[Library, Path], tmp_path: Path) -> None:
    library, labels = hashed_collection
    loaded = load_labels(str(labels), library.data.incidents)
    assert len(loaded) == 12 and loaded["TS-0001"] == {"dns"}
    assert set(load_labels("org", library.data.incidents)["TS-0001"]) == {"example-corp"}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "TS-9999", "labels": ["x"]}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="not in the library"):
        load_labels(str(bad), library.data.incidents)
    with pytest.raises(ValueError, match="not a file"):
        load_labels("no-such-field", library.data.incidents)
    assert precision_at(["a", "b", "c"], {"a", "c"}, 2) == 0.5
    assert average_precision(["a", "b", "c"], {"a", "c"}, 3) == pytest.approx((1 + 2 / 3) / 2)


@pytest.mark.slow
def test_inferred_links_round_trip_yaml_rdf_sparql_and_review(collection: tuple[Library, Path], tmp_path: Path) -> None:
    import shutil

    source, _ = collection
    root = tmp_path / "lib"
    shutil.copytree(source.root, root)
    path = root / "incidents" / "TS-0009.yaml"
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    document["components"] = ["tls-certificates"]  # a curated link the text also names
    path.write_text(yaml.safe_dump(document, allow_unicode=True), encoding="utf-8")
    library = Library.open(root, source.search_config)
    results = {r.id: r for r in library.tag()}
    assert all(v.concept.inferred for r in results.values() for v in r.inferred)
    assert "tls-certificates" not in {v.concept.id for v in results["TS-0009"].inferred}  # never over a curated link
    stored = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert stored["components"] == ["tls-certificates"] and stored["inferred"]
    link = stored["inferred"][0]
    assert {"concept", "kind", "evidence", "method", "confidence"} <= set(link)

    reloaded = Library.open(root, source.search_config)
    incident = reloaded.get("TS-0009")
    assert incident.inferred and incident.components == ["tls-certificates"]
    turtle = reloaded.export("ttl")
    graph = Graph().parse(data=turtle, format="turtle")
    rows = reloaded.sparql(
        "SELECT ?c ?conf ?method WHERE { ?i dcterms:identifier 'TS-0009' ; il:inference ?q . "
        "?q il:concept ?c ; il:confidence ?conf ; il:inferenceMethod ?method }")
    assert len(rows.rows) == len(incident.inferred)
    assert {str(r["method"]) for r in rows.rows} <= {m.value for m in InferenceMethod}
    curated = reloaded.sparql("SELECT ?c WHERE { ?i dcterms:identifier 'TS-0009' ; il:hasComponent ?c }")
    assert len(curated.rows) == 1  # inferred links never appear as curated il:hasComponent
    assert len(graph) > 0

    proposed = [link.concept for link in incident.proposed()]
    accept, reject = proposed[0], proposed[1:2]
    review = reloaded.review("TS-0009", accept=[accept], reject=reject)
    assert review.accepted == [accept] and review.rejected == reject
    after = Library.open(root, source.search_config).get("TS-0009")
    kind_field = {"component": "components", "cause": "causes", "symptom": "symptoms"}[incident.inferred[0].kind.value]
    assert accept in getattr(after, kind_field)
    if reject:
        assert reject[0] not in {link.concept for link in after.proposed()}
        Library.open(root, source.search_config).tag(["TS-0009"])  # a second pass does not re-propose it
        again = Library.open(root, source.search_config).get("TS-0009")
        assert reject[0] not in {link.concept for link in again.proposed()}
    with pytest.raises(ValueError, match="no proposed inferred link"):
        reloaded.review("TS-0009", accept=["no-such-concept"])


def test_factor_loadings_find_the_kind_that_agrees_with_nothing() -> None:
    import numpy as np

    from incidentlib.search.similarity import evidence_loadings, factor_score_weights

    rng = np.random.default_rng(3)
    samples = []
    for _ in range(20):  # 20 queries over 50 candidates: two kinds read one hidden relation, one is noise
        hidden = rng.normal(size=50)
        samples.append(np.column_stack([hidden + 0.5 * rng.normal(size=50), hidden + 0.8 * rng.normal(size=50), rng.normal(size=50)]))
    loadings = evidence_loadings(samples)
    assert loadings is not None
    assert loadings[0] > loadings[1] > 0.5 and abs(loadings[2]) < 0.1
    weights = factor_score_weights(loadings)
    assert abs(sum(weights) - 3) < 1e-9
    assert weights[0] > weights[1] > 10 * weights[2]
    assert evidence_loadings([s[:, :2] for s in samples]) is None  # two kinds cannot tell signal from noise


@pytest.mark.slow
def test_reliability_weighting_discounts_graph_evidence_that_is_noise(
        collection: tuple[Library, Path], tmp_path: Path, cache_dir: Path) -> None:
    import random
    import shutil

    from incidentlib.models import ConceptKind
    from incidentlib.search.similarity import SimilarityIndex

    library, _ = collection
    root = tmp_path / "noisy"
    shutil.copytree(library.root, root)
    pool = [(c, kind) for kind in (ConceptKind.cause, ConceptKind.symptom) for c in library.data.vocab.ids(kind)[:3]]
    rng = random.Random(11)
    for path in sorted((root / "incidents").glob("*.yaml")):  # concepts drawn at random, blind to the record's cause
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        document["inferred"] = [{"concept": c, "kind": kind.value, "evidence": "drawn at random", "method": "classifier",
                                 "confidence": 0.9} for c, kind in rng.sample(pool, 2)]
        path.write_text(yaml.safe_dump(document, allow_unicode=True, sort_keys=False), encoding="utf-8")
    noisy = Library.open(root, SearchConfig(cache_dir=cache_dir))
    noisy.build_index()
    engine = noisy._search_service.engine
    equal, reliable = SimilarityIndex(engine), SimilarityIndex(engine, "reliability")
    assert equal.weights == {"lexical": 1.0, "dense": 1.0, "graph": 1.0, "cause": 1.0}
    weights = reliable.weights
    # the causes drawn at random are noise too: the cause evidence is discounted with the graph's
    assert max(weights["graph"], weights["cause"]) < 0.5 * min(weights["lexical"], weights["dense"]), weights

    def top(index: SimilarityIndex, drop_graph: bool = False) -> list[set[str]]:
        queries = [index.incident_query(i) for i in noisy.incidents()]
        if drop_graph:
            queries = [replace(q, concepts={}) for q in queries]
        return [{e.incident_id for e in index.rank(q, 3)} for q in queries]

    def moved(index: SimilarityIndex) -> int:
        """Top-3 places the noisy kind changes, against the same fusion without it."""
        return sum(len(a - b) for a, b in zip(top(index), top(index, drop_graph=True), strict=True))

    assert moved(equal) > 0  # the noise reorders the top under equal weights ...
    assert moved(reliable) < moved(equal) and moved(reliable) <= 1  # ... and hardly at all once weighed
    with pytest.raises(ValueError, match="weighting"):
        SimilarityIndex(engine, "learned")


def test_first_argmax_is_argmax_per_segment_first_on_ties() -> None:
    from incidentlib.search.similarity import first_argmax

    rng = np.random.default_rng(7)
    for _ in range(50):
        counts = rng.integers(1, 6, size=int(rng.integers(1, 40)))
        values = rng.integers(0, 4, size=int(counts.sum())).astype(np.float32)  # few distinct values: many ties
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        expected = [int(start + np.argmax(values[start : start + count])) for start, count in zip(starts, counts, strict=True)]
        assert first_argmax(values, starts).tolist() == expected
    assert first_argmax(np.zeros(0, dtype=np.float32), np.zeros(0, dtype=np.int64)).tolist() == []
    with pytest.raises(ValueError, match="at least one value"):
        first_argmax(np.ones(3, dtype=np.float32), np.array([0, 3]))


def test_top_by_score_then_id_is_the_full_sort_cut_to_k() -> None:
    from incidentlib.search.similarity import top_by_score_then_id

    rng = np.random.default_rng(11)
    ids = np.array([f"IL-{i:04d}" for i in rng.permutation(300)], dtype=str)
    for k in (0, 1, 5, 10, 299, 300, 400):
        scores = rng.integers(0, 6, size=300).astype(np.float64)  # ties at the cut are the hard case
        candidates = np.flatnonzero(rng.random(300) < 0.8)
        full = candidates[np.lexsort((ids[candidates], -scores[candidates]))][:k]
        assert top_by_score_then_id(scores, candidates, ids, k).tolist() == full.tolist()


def test_the_lexical_evidence_counts_each_terms_rarity_once(hashed_collection: tuple[Library, Path]) -> None:
    """``w_q(t) = 1 + ln tf_q(t)`` (L2-normalised): the idf is in ``bm25(c, t)`` only, for pasted text and for a
    record of the library (whose weights come from its saved term counts) alike."""
    from collections import Counter

    from incidentlib.tagging.tagger import incident_text

    library, _ = hashed_collection
    index = library._search_service.similarity
    vocabulary, idf, matrix = index._lexical
    text = "DNS resolvers returned SERVFAIL. The DNS zone was bad, so DNS lookups failed for the zone."
    counts = Counter(vocabulary[t] for t in tokenize(index.boilerplate.strip(text)) if t in vocabulary)
    assert max(counts.values()) >= 3 and len({round(float(idf[t]), 6) for t in counts}) > 1
    raw = {t: 1 + np.log(c) for t, c in counts.items()}
    norm = float(np.sqrt(sum(w * w for w in raw.values())))
    weights = index.lexical_query(text)
    assert weights.keys() == raw.keys()
    assert all(weights[t] == pytest.approx(raw[t] / norm) for t in raw)
    scores = index._lexical_scores(weights)
    expected = sum(w * matrix[:, t].toarray().ravel() for t, w in weights.items())
    assert np.allclose(scores, expected)
    for position, incident in enumerate(library.incidents()):
        stored, fresh = index._stored_terms(index.position[incident.id]), index.lexical_query(incident_text(incident))
        assert stored.keys() == fresh.keys() and all(stored[t] == pytest.approx(fresh[t]) for t in fresh), position


def test_ranking_matches_a_full_sort_and_a_loop_over_incidents(hashed_collection: tuple[Library, Path]) -> None:
    """rank() against the straightforward method: every candidate sorted by (-score, id), and each
    incident's best chunk found by ``np.argmax`` over its own passages in a Python loop."""
    library, _ = hashed_collection
    index = library._search_service.similarity
    vectors, order, starts = index._passages
    for incident in library.incidents():
        query = index.incident_query(incident)
        columns, best_chunk = index._columns(query)
        coverage = (query.passages @ vectors.T).max(axis=0)
        bounds = [*starts[1:], len(order)]
        assert best_chunk.tolist() == [int(order[s + int(np.argmax(coverage[s:e]))]) for s, e in zip(starts, bounds, strict=True)]
        candidates = np.array([i for i, incident_id in enumerate(index.ids) if incident_id != incident.id])
        fused, _ = index._fuse(columns, candidates)
        expected = [index.ids[i] for i in sorted(candidates, key=lambda i: (-fused[i], index.ids[i]))[:5]]
        assert [e.incident_id for e in index.rank(query, 5)] == expected


def test_cause_evidence_compares_the_causes_alone(search_library) -> None:
    """The fourth kind: the cosine of the incidents' cause vectors (the concept weights, causes only, closed over the
    broader causes), fused with the others and shown in ``why.evidence``; a query that names no cause has none."""
    from incidentlib.models import ConceptKind

    index = search_library._search_service.similarity
    vocab = search_library.data.vocab
    causes = set(vocab.ids(ConceptKind.cause))
    incident = search_library.get("IL-0025")
    query = index.incident_query(incident)
    columns, _ = index._columns(query)
    assert set(columns) == {"lexical", "dense", "graph", "cause"}
    graph_space = index._graph_space  # the same weights, all concepts

    def cause_vector(concepts: dict[str, float]) -> dict[str, float]:
        closed = dict(concepts)  # every broader concept, with the highest weight under it
        for concept, weight in concepts.items():
            for ancestor in vocab.ancestors(concept):
                closed[ancestor] = max(closed.get(ancestor, 0.0), weight)
        return {c: w * graph_space.idf[graph_space.index[c]] for c, w in closed.items() if c in causes and c in graph_space.index}

    mine = cause_vector(query.concepts)
    assert mine
    weighted, _ = index._concepts
    for position in range(0, len(index.ids), 17):
        other = cause_vector(weighted[position])
        norm = np.sqrt(sum(v * v for v in mine.values()) * sum(v * v for v in other.values()))
        expected = sum(mine[c] * other.get(c, 0.0) for c in mine) / norm if norm else 0.0
        assert columns["cause"][position] == pytest.approx(expected, abs=1e-12)
    top = search_library.similar("IL-0025", k=3)
    assert all(r.why.evidence is not None and "cause" in r.why.evidence for r in top.results)
    no_cause = index.text_query("the dashboard was slow", {"nccl": 1.0}, set())
    assert "cause" not in index._columns(no_cause)[0] and "graph" in index._columns(no_cause)[0]


def test_why_names_a_broader_concept_shared_only_through_narrower_ones(search_library) -> None:
    """A driver-bug query and a firmware-bug incident share software-bug: the graph and cause evidence count it, and
    ``why`` lists it once, marked broader (never beside a concept both hold that already explains it)."""
    index = search_library._search_service.similarity
    vocab = search_library.data.vocab
    assert vocab.ancestors("driver-bug") == vocab.ancestors("firmware-bug") == ["software-bug"]
    weighted, _ = index._concepts
    firmware = next(i for i, held in enumerate(weighted)
                    if "firmware-bug" in held and not {"driver-bug", "software-bug"} & held.keys())
    query = index.text_query("a kernel module failed to load after an upgrade", {"driver-bug": 0.9}, {"driver-bug"})
    columns, _ = index._columns(query)
    assert columns["cause"][firmware] > 0.0 and columns["graph"][firmware] > 0.0
    shared, broader = index._shared(query, firmware)
    assert shared == {} and broader == {"software-bug": True}  # inferred: the query's link under it is inferred
    both = next(i for i, held in enumerate(weighted) if "driver-bug" in held)
    shared, broader = index._shared(query, both)
    assert "driver-bug" in shared and "software-bug" not in broader  # driver-bug itself already explains it
    evidence = [e for e in index.rank(query, len(index.ids)) if e.incident_id == index.ids[firmware]]
    assert evidence and evidence[0].broader == {"software-bug": True}
    result = search_library._search_service._similar_result(evidence[0], "en")
    refs = [ref for ref in result.why.shared_concepts if ref.id == "software-bug"]
    assert len(refs) == 1 and refs[0].broader and refs[0].inferred
    assert refs[0].marked_label() == f"{refs[0].label} (broader, inferred)"


@pytest.mark.slow
def test_leave_concepts_out_writes_blind_drafts_and_the_held_out_causes(data_dir: Path, tmp_path: Path) -> None:
    """The bundled library's benchmark: every record copied as a draft without its curated concepts, tagged by the
    classifier of another fold (never one that saw its labels), the held-out causes as labels; the copies are
    written without a serialiser warning (the status is the enum, not a string)."""
    import warnings

    from incidentlib.similar_eval import leave_concepts_out

    source = Library(load_library(data_dir), SearchConfig(cache_dir=tmp_path / "cache"), embedder=HashEmbedder())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        labels_path, taggers = leave_concepts_out(source, tmp_path / "blind", folds=5)
    assert not [w for w in caught if "serializ" in str(w.message).lower()]
    blind = load_library(tmp_path / "blind")
    assert set(blind.incidents) == set(source.data.incidents) == set(taggers)
    assert all(i.is_draft and not (i.components or i.causes or i.symptoms or i.tags or i.related)
               for i in blind.incidents.values())
    assert sum(1 for i in blind.incidents.values() if i.proposed()) > len(blind.incidents) // 2  # tagged
    labels = [json.loads(line) for line in labels_path.read_text(encoding="utf-8").splitlines()]
    assert {row["id"]: row["labels"] for row in labels} == {
        i.id: i.causes for i in source.data.incidents.values() if i.causes}
    assert len({id(tagger) for tagger in taggers.values()}) == 5  # one per fold


def test_tag_reports_each_step_and_reads_in_batches_with_the_same_result(hashed_collection: tuple[Library, Path],
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import incidentlib.library as library_module

    library, _ = hashed_collection
    whole = library.tag(write=False)  # one batch: the twelve drafts at once
    heard: list[tuple[str, int, int]] = []
    monkeypatch.setattr(library_module, "TAG_BATCH", 5)
    batched = library.tag(write=False, progress=lambda step, done, total: heard.append((step, done, total)))
    assert [r.model_dump() for r in batched] == [r.model_dump() for r in whole] and len(whole) == 12
    learning, reading, storing = library_module.TAG_STEPS
    assert [step for step, _, _ in heard] == sorted((step for step, _, _ in heard), key=library_module.TAG_STEPS.index)
    assert [(d, t) for s, d, t in heard if s == learning] == [(0, 1), (1, 1)]
    assert [(d, t) for s, d, t in heard if s == reading] == [(0, 12), (5, 12), (10, 12), (12, 12)]
    stored = [d for s, d, t in heard if s == storing]
    assert stored == sorted(stored) and stored[0] == 0 and stored[-1] == 12
