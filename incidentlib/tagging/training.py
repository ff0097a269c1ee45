"""Train (or reuse) the concept classifier for a library.

Training records: the library's own curated (published) records, plus the bundled
library's when the library is another one (an import target starts with the bundled
vocabulary, so its concept ids are the same).  The fitted model is cached beside the
search index, keyed by the training texts, labels and embedder, so it is trained once.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Sequence
from pathlib import Path

from ..embeddings import Embedder
from ..models import Incident
from ..storage import atomic_write_bytes
from .classifier import ConceptClassifier, Example, training_examples
from .tagger import incident_text

CACHE_VERSION = "2"  # 2: liblinear solver


def examples_for(incidents: Sequence[Incident]) -> list[Example]:
    return training_examples(incidents, lambda incident, lang: incident_text(incident, lang))


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
