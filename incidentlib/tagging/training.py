"""Train (or reuse) the concept classifier for a library.

Training records: the library's own curated (published) records, plus the bundled
library's when the library is another one (an import target starts with the bundled
vocabulary, so its concept ids are the same).  The fitted model is cached beside the
search index, keyed by the training texts, labels and embedder, so it is trained once.

At most :data:`MAX_RECORDS_PER_CONCEPT` records are chosen for each concept (:func:`training_records`), so the fit
costs at most concepts × that many records, whatever the library's size.  Each record keeps all its labels, so a
concept may still see more positives than that, through records chosen for another concept.
"""

from __future__ import annotations

import bisect
import hashlib
import pickle
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..embeddings import Embedder
from ..models import Incident
from ..storage import atomic_write_bytes
from .classifier import ConceptClassifier, Example, training_examples
from .tagger import incident_text

CACHE_VERSION = "3"  # 2: liblinear solver; 3: pickled without the scikit-learn objects
#: Records chosen per concept to train on.  The fit is one logistic regression per concept over every training
#: example, so its cost grows as concepts × records: a library of 100,000 curated records (200,000 examples, 134
#: concepts) held 6.7 GB after 900 s (1,065 s of CPU) and had not finished, where 200 a concept take 472 s and 423 MB
#: (docs/benchmarks.md, "The concept tagger at 100k"). A concept's model learns its wording from its positives and
#: gains little from the thousandth near-copy of a story; 200 is twice the most any concept has in the curated
#: library (102 records), so the model fitted on it, and every measurement of it, is unchanged.  Chosen, not tuned.
MAX_RECORDS_PER_CONCEPT = 200


def _spread(record_id: str) -> bytes:
    """A fixed pseudo-random order of records (not their id order, which would keep only the oldest)."""
    return hashlib.blake2b(record_id.encode(), digest_size=8).digest()


def training_records(incidents: Iterable[Incident], per_concept: int = MAX_RECORDS_PER_CONCEPT) -> list[Incident]:
    """The curated, labelled records to train on, in the order given: for each concept, the first ``per_concept`` of
    its records in the order of :func:`_spread` (ties: in the order given), and the union of those.  Deterministic:
    the same records give the same choice (and the same cached model); a record added changes it only where it enters
    a concept's first ``per_concept``.  Idempotent: the choice made from the chosen records is the same.

    One pass that keeps only the records still among some concept's first ``per_concept``, so a caller may stream
    a large library's records through it (:func:`incidentlib.loader.each_record`) without holding them all."""
    if per_concept < 1:
        return []
    firsts: dict[str, list[tuple[bytes, int]]] = {}  # per concept, the best (spread, position) so far, sorted
    held: dict[int, tuple[Incident, int]] = {}  # position -> the record and how many concepts' firsts hold it
    for position, incident in enumerate(incidents):
        if incident.is_draft or not (incident.components or incident.causes or incident.symptoms):
            continue
        key = (_spread(incident.id), position)
        holders = 0
        for concept in {*incident.components, *incident.causes, *incident.symptoms}:
            best = firsts.setdefault(concept, [])
            if len(best) == per_concept and key > best[-1]:
                continue
            bisect.insort(best, key)
            holders += 1
            if len(best) > per_concept:
                _, dropped = best.pop()
                record, count = held[dropped]
                if count == 1:
                    del held[dropped]
                else:
                    held[dropped] = (record, count - 1)
        if holders:
            held[position] = (incident, holders)
    return [held[position][0] for position in sorted(held)]


def examples_for(incidents: Sequence[Incident], per_concept: int = MAX_RECORDS_PER_CONCEPT) -> list[Example]:
    """The training examples of :func:`training_records` of ``incidents``: one per record and language."""
    return training_examples(training_records(incidents, per_concept), lambda incident, lang: incident_text(incident, lang))


def fit_cached(examples: list[Example], embedder: Embedder, cache_dir: Path | None) -> ConceptClassifier:
    digest = hashlib.sha256(CACHE_VERSION.encode())
    digest.update(embedder.name.encode())
    for example in examples:
        digest.update(f"{example.record}\0{example.text}\0{','.join(sorted(example.concepts))}\n".encode())
    path = cache_dir / f"concept-classifier-{digest.hexdigest()[:16]}.pkl" if cache_dir else None
    cached: ConceptClassifier | None = None
    if path is not None and path.is_file():
        try:
            cached = pickle.loads(path.read_bytes())
        except (pickle.UnpicklingError, EOFError, AttributeError, ImportError):
            cached = None  # a stale or broken cache is rebuilt
    if cached is not None:
        cached.embedder = embedder
        return cached
    model = ConceptClassifier(embedder).fit(examples)
    if path is not None:
        model.embedder = None
        atomic_write_bytes(path, pickle.dumps(model))
        model.embedder = embedder
    return model
