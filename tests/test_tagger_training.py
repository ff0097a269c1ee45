"""The concept tagger's training records (incidentlib.tagging.training): bounded per concept on a large library,
the whole curated library below the bound, deterministic, and a fitted model that still learns every concept."""

from __future__ import annotations

from collections import Counter

import numpy as np

from incidentlib.loader import load_library
from incidentlib.models import Incident
from incidentlib.tagging.classifier import ConceptClassifier
from incidentlib.tagging.training import MAX_RECORDS_PER_CONCEPT, examples_for, training_records


def _labels(incident: Incident) -> set[str]:
    return {*incident.components, *incident.causes, *incident.symptoms}


def _copies(records: list[Incident], copies: int) -> list[Incident]:
    """``copies`` copies of ``records`` under new ids (a large curated library, as an archive that was reviewed)."""
    return [record.model_copy(update={"id": f"IL-{copy:03d}{number:03d}"})
            for copy in range(copies) for number, record in enumerate(records)]


def test_the_curated_library_trains_on_every_labelled_record() -> None:
    records = list(load_library("data").incidents.values())
    labelled = [r for r in records if not r.is_draft and _labels(r)]
    counts = Counter(concept for record in labelled for concept in _labels(record))
    assert max(counts.values()) <= MAX_RECORDS_PER_CONCEPT  # why the bound leaves the curated model as it was
    assert training_records(records) == labelled


def test_a_large_library_is_bounded_per_concept_and_keeps_every_concept() -> None:
    records = [r for r in load_library("data").incidents.values() if not r.is_draft][:60]
    large = _copies(records, 12)  # 720 records
    per_concept = 25
    chosen = training_records(large, per_concept)
    concepts = {concept for record in large for concept in _labels(record)}
    assert len(chosen) < len(large)
    assert len(chosen) <= per_concept * len(concepts)
    everyone = Counter(concept for record in large for concept in _labels(record))
    kept = Counter(concept for record in chosen for concept in _labels(record))
    # every concept keeps at least the bound's worth of its records (or all it has), through its own choice
    assert all(kept[concept] >= min(count, per_concept) for concept, count in everyone.items())
    assert set(kept) == concepts
    # the order given is kept, the choice is spread over the library (not its first ids) and the same every time
    positions = [large.index(record) for record in chosen]
    assert positions == sorted(positions) and max(positions) > len(large) // 2
    assert training_records(list(reversed(large)), per_concept) == list(reversed(chosen))


def test_examples_and_a_fit_on_the_bounded_records() -> None:
    records = [r for r in load_library("data").incidents.values() if not r.is_draft][:40]
    large = _copies(records, 10)
    examples = examples_for(large, per_concept=8)
    assert {e.record for e in examples} < {r.id for r in large}
    model = ConceptClassifier(None).fit(examples)  # lexical features only: no embedder in a unit test
    assert model.concepts and model.probabilities([examples[0].text]).shape == (1, len(model.concepts))


def _chosen_by_sorting(records: list[Incident], per_concept: int) -> list[Incident]:
    """The definition, written the direct way: every concept's records sorted by the spread (ties in the order
    given), the first ``per_concept`` of each, their union in the order given."""
    from incidentlib.tagging.training import _spread

    labelled = [r for r in records if not r.is_draft and _labels(r)]
    chosen: set[int] = set()
    for concept in {c for r in labelled for c in _labels(r)}:
        having = [r for r in labelled if concept in _labels(r)]
        chosen.update(id(r) for r in sorted(having, key=lambda r: _spread(r.id))[:per_concept])
    return [r for r in labelled if id(r) in chosen]


def test_the_one_pass_choice_is_the_sorted_definition_and_holds_no_more_than_it_keeps() -> None:
    records = list(load_library("data").incidents.values())[:70]
    large = _copies(records, 9)  # drafts and unlabelled records of the library included
    for per_concept in (1, 7, 30, 10_000):
        expected = _chosen_by_sorting(large, per_concept)
        chosen = training_records(iter(large), per_concept)  # a stream: read once
        assert [r.id for r in chosen] == [r.id for r in expected]
        assert training_records(chosen, per_concept) == chosen  # the choice from the chosen is the same
    assert training_records(large, 0) == []


def test_text_embeddings_are_remembered_within_a_bound(monkeypatch) -> None:
    """The classifier embeds a text once while it is remembered, and remembers at most the memo's capacity (a server
    tags every pasted text: those must not pile up), keyed by digests, not by the texts."""
    from incidentlib.tagging import classifier
    from tests.fakes import HashEmbedder

    memo = classifier.EmbeddingMemo(capacity=5)
    monkeypatch.setattr(classifier, "_EMBEDDINGS", memo)
    embedder = HashEmbedder()
    model = ConceptClassifier(embedder)
    texts = [f"nccl watchdog timeout on rank {n}" for n in range(8)]
    first = model._embed(texts[:3])
    again = model._embed(texts[:3])
    assert embedder.documents_encoded == 3 and np.array_equal(first, again)
    every = model._embed([*texts, texts[0]])  # more distinct texts than the memo holds, one of them twice
    assert np.array_equal(every, embedder.encode_queries([*texts, texts[0]]))
    assert embedder.documents_encoded == 3 + 5  # the three remembered texts were not embedded again
    assert len(memo) == 5
    assert all(isinstance(key, bytes) and len(key) == 16 for key in memo._vectors)
    model._embed([texts[3], texts[-1]])  # the five embedded last are remembered
    assert embedder.documents_encoded == 8
    model._embed(texts[:1])  # found at the start of the long batch, then pushed out by the five after it
    assert embedder.documents_encoded == 9


def test_every_concept_scored_by_one_product_equals_each_model_and_the_evidence_each_sentence() -> None:
    """``probabilities`` (one product of the stacked coefficients) equals each concept's own ``predict_proba``;
    ``evidence`` (the text's sentences transformed once) picks the sentence the per-sentence loop picks; the stacked
    weights and the sentence memo are not pickled, and a model read back scores the same."""
    import pickle

    from incidentlib.tagging.classifier import split_sentences
    from tests.fakes import HashEmbedder

    records = [r for r in load_library("data").incidents.values() if not r.is_draft][:50]
    examples = examples_for(records)
    for embedder in (None, HashEmbedder()):
        model = ConceptClassifier(embedder).fit(examples)
        texts = [e.text for e in examples[:12]] + ["", "NCCL watchdog timeout. GPU fell off the bus!", "zzz"]
        features = model._features(texts)
        each = np.stack([m.predict_proba(features)[:, 1] for m in model._models], axis=1).astype(np.float32)
        assert np.allclose(model.probabilities(texts), each, rtol=0, atol=1e-6)

        def by_sentence(text: str, concept: str, model: ConceptClassifier = model) -> str:
            weights = model._models[model.concepts.index(concept)].coef_[0][: len(model._vectorizer.vocabulary_)]
            best, best_score = "", -np.inf
            for sentence in split_sentences(text):
                vector = model._vectorizer.transform([sentence])
                score = float((vector @ weights).ravel()[0]) if vector.nnz else -np.inf
                if score > best_score:
                    best, best_score = sentence, score
            return best

        picked = [(model.evidence(t, c), by_sentence(t, c)) for t in texts for c in model.concepts]
        assert all(new == old for new, old in picked) and any(new for new, _ in picked)
        state = model.__getstate__()
        assert "_stacked" not in state and "_sentences_memo" not in state
        assert "_models" not in state and "_vectorizer" not in state  # no scikit-learn object: read back without it
        read_back = pickle.loads(pickle.dumps(model))
        assert np.allclose(read_back.probabilities(texts), model.probabilities(texts), rtol=0, atol=1e-6)
        assert [read_back.evidence(t, c) for t in texts[:3] for c in model.concepts] == \
            [model.evidence(t, c) for t in texts[:3] for c in model.concepts]
        # the TF-IDF the model reads text with is scikit-learn's own transform
        assert np.allclose(model._lexical(texts).toarray(), model._vectorizer.transform(texts).toarray(), rtol=0, atol=1e-12)
        if embedder is None:
            again = pickle.loads(pickle.dumps(model))
            assert np.array_equal(again.probabilities(texts), model.probabilities(texts))
            # fitted again in place on other records: nothing of the first fit's caches is used
            refit = model.fit(examples_for(records[25:]))
            fresh = ConceptClassifier(None).fit(examples_for(records[25:]))
            assert np.array_equal(refit.probabilities(texts), fresh.probabilities(texts))
            assert [refit.evidence(texts[0], c) for c in refit.concepts] == [fresh.evidence(texts[0], c) for c in fresh.concepts]
