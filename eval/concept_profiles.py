"""Would the concept classifier's full probability profile help `similar`?  A measurement, not a feature.

For every labelled record of a library this caches the pipeline's evidence columns (lexical, dense,
graph: ``SimilarityIndex._columns`` of the record as the query) and the classifier's probabilities
for every record's text, then reports P@k by incident for fusions with and without a fourth kind of
evidence, the *concept profile*: ``cos(x_q, x_c)`` where ``x`` is a record's vector of concept
probabilities, either raw (``p``), centred on the collection's mean (``p-centred``) or as logits
standardised per concept over the collection (``logit-z``; also restricted to cause concepts).
Fusion is the pipeline's: each kind z-scored over the candidates (the labelled records but the
query), then averaged.  Usage::

    python eval/concept_profiles.py LIBRARY LABELS [--k 5] [--cache DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from incidentlib.library import Library
from incidentlib.similar_eval import load_labels
from incidentlib.tagging.tagger import incident_text

LOGIT_CLIP = 1e-4  # keeps log(p / (1 - p)) finite for probabilities of exactly 0 or 1


def profile_similarity(probabilities: np.ndarray, mode: str) -> np.ndarray:
    x = probabilities.astype(np.float64)
    if mode == "p-centred":
        x = x - x.mean(axis=0)
    elif mode == "logit-z":
        p = np.clip(x, LOGIT_CLIP, 1 - LOGIT_CLIP)
        x = np.log(p / (1 - p))
        x = (x - x.mean(axis=0)) / (x.std(axis=0) + 1e-9)
    x = x / (np.linalg.norm(x, axis=1, keepdims=True) + 1e-12)
    return x @ x.T


def standardised(values: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    sub = values[candidates]
    std = float(sub.std())
    return (values - float(sub.mean())) / std if std > 1e-12 else np.zeros_like(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("library", type=Path)
    parser.add_argument("labels")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--cache", type=Path, default=None)
    args = parser.parse_args()

    library = Library.open(args.library, cache_dir=args.cache)
    library.build_index()
    service = library._search_service
    index = service.similarity
    incidents = library.data.incidents
    labels = load_labels(args.labels, incidents)
    position = {incident_id: n for n, incident_id in enumerate(index.ids)}
    tagger = service.tagger
    if tagger.classifier is None:
        raise SystemExit("this library has no concept classifier to read profiles from")
    probabilities = tagger.classifier.probabilities([incident_text(incidents[i]) for i in index.ids])
    is_cause = np.array([tagger.vocab.get(c).kind.value == "cause" for c in tagger.classifier.concepts])
    profiles = {mode: profile_similarity(probabilities, mode) for mode in ("p", "p-centred", "logit-z")}
    profiles["logit-z, causes only"] = profile_similarity(probabilities[:, is_cause], "logit-z")
    columns = {q: index._columns(index.incident_query(incidents[q]))[0] for q in labels}
    queries = list(labels)

    def precision(kinds: tuple[str, ...], profile: str | None) -> float:
        total = 0.0
        for q in queries:
            candidates = np.array([position[o] for o in queries if o != q])
            parts = [standardised(columns[q][kind], candidates) for kind in kinds if kind in columns[q]]
            if profile is not None:
                parts.append(standardised(profiles[profile][position[q]], candidates))
            fused = np.mean(parts, axis=0)
            top = candidates[np.lexsort((candidates, -fused[candidates]))][: args.k]
            total += float(np.mean([bool(labels[q] & labels[index.ids[o]]) for o in top]))
        return total / len(queries)

    lines = [f"{args.library}: {len(queries)} queries, P@{args.k} by incident",
             "| evidence | without profile | " + " | ".join(f"+ profile {m}" for m in profiles) + " |",
             "|---|---|" + "---|" * len(profiles)]
    for kinds in ((), ("lexical", "dense", "graph"), ("dense", "graph"), ("lexical", "dense")):
        cells = ["–" if not kinds else f"{precision(kinds, None):.3f}"] + [f"{precision(kinds, m):.3f}" for m in profiles]
        lines.append(f"| {' + '.join(kinds) or 'profile alone'} | " + " | ".join(cells) + " |")
    sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
