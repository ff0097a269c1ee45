"""Label agreement of "find incidents like this", next to baselines, on any labelled library.

Every record that has a label and shares it with at least one other record is a query.
Candidates are the other labelled records.  A neighbour *agrees* when it shares at least
one label with the query.

- ``P@k`` — the share of the top ``k`` neighbours that agree, averaged over queries;
- ``MAP`` — mean average precision over the top ``depth`` neighbours:
  ``AP = (1 / min(R, depth)) · Σ_{r ≤ depth, agrees(r)} P@r`` with ``R`` the number of
  candidates that agree.

Methods, all in one run over the same queries and candidates:

- ``random`` — candidates in a seeded random order (mean of ``RANDOM_REPEATS`` orders);
- ``bm25`` — BM25 (the library's tokenizer) over each record's whole text, the query
  record's whole text as the query;
- ``dense`` — one embedding of each record's whole text, cosine;
- ``similar (incident)`` — :meth:`Library.similar` by incident id;
- ``similar (text)`` — :meth:`Library.similar` on the query record's text as a user would
  paste it (its first ``MAX_SIMILAR_TEXT_CHARS`` characters), the record itself excluded.

Each method's P@k is also given relative to the best baseline (``bm25`` or ``dense``, the higher P@k):
``gain = P@k(method) / P@k(best) − 1``, with a paired bootstrap interval over the queries
(:func:`relative_gain_interval`).  A few hundred queries leave differences of a few percent inside the
noise: on a collection of 168 queries the interval of a +10.8 % gain runs from +1.5 to +21.7 %, so the interval
says whether a gain is the method's or the sample's.
"""

from __future__ import annotations

import csv
import json
import math
import random
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
from pydantic import BaseModel

from .errors import LabelError, ReadError
from .importing.readers import json_lines, read_utf8
from .models import padded_incident_id
from .requests import MAX_SIMILAR_TEXT_CHARS
from .search.tokenize import tokenize
from .tagging.tagger import incident_text

LABEL_FIELDS = ("causes", "components", "symptoms", "tags", "org")
RANDOM_REPEATS = 20  # enough orders that the random baseline's mean is stable to ~0.01
RANDOM_SEED = 9
MAX_DEPTH = 100  # the deepest ranking Library.similar returns
BASELINES = ("bm25", "dense")  # the single-evidence baselines a method is measured against
# Resamples of the paired bootstrap: the Monte Carlo error of a 2.5 % quantile from 2,000 resamples is a small
# fraction of the interval's width (about 3 % of it for a normal statistic), far below what the reader rounds to.
BOOTSTRAP_SAMPLES = 2000
BOOTSTRAP_SEED = 11
CONFIDENCE = 0.95
_BOOTSTRAP_BLOCK_DRAWS = 1_000_000  # query indices drawn at once (8 MB), whatever the number of queries


class MethodScore(BaseModel):
    method: str
    p_at_k: float
    map: float
    #: P@k relative to the best baseline's, minus 1; None for the best baseline itself (or when its P@k is 0)
    gain: float | None = None
    #: the paired bootstrap interval of ``gain`` at :data:`CONFIDENCE` (see :func:`relative_gain_interval`);
    #: ``gain_high`` None with a ``gain_low``: unbounded above (the baseline agrees on no query in many resamples)
    gain_low: float | None = None
    gain_high: float | None = None


class QueryScore(BaseModel):
    """One query of the benchmark: its labels, each method's P@k for it (random: averaged over its orders), and the
    ``k`` records each ranking method put first (not random's)."""

    id: str
    labels: list[str]
    p_at_k: dict[str, float]
    neighbours: dict[str, list[str]]


class SimilarEvalReport(BaseModel):
    collection: str
    labels: str
    queries: int
    candidates: int
    k: int
    methods: list[MethodScore]
    #: the baseline with the higher P@k, which ``gain`` is relative to (None when the run has neither)
    baseline: str | None = None
    confidence: float = CONFIDENCE
    #: each query's scores, when asked for (``incidentlib eval similar --per-query FILE``); None otherwise
    per_query: list[QueryScore] | None = None

    def score(self, method: str) -> MethodScore:
        return next(m for m in self.methods if m.method == method)

    def to_markdown(self) -> str:
        level = f"{self.confidence * 100:g} %"
        lines = [f"{self.collection}: {self.queries} queries over {self.candidates} labelled records, labels {self.labels}", "",
                 f"| method | P@{self.k} | MAP | P@{self.k} vs best baseline ({self.baseline or '–'}) | {level} interval |",
                 "|---|---|---|---|---|"]
        for m in self.methods:
            gain = "–" if m.gain is None else f"{m.gain * 100:+.1f} %"
            interval = "–" if m.gain_low is None else f"{m.gain_low * 100:+.1f} to " + (
                "unbounded" if m.gain_high is None else f"{m.gain_high * 100:+.1f} %")
            lines.append(f"| {m.method} | {m.p_at_k:.3f} | {m.map:.3f} | {gain} | {interval} |")
        return "\n".join(lines) + "\n"


def load_labels(spec: str, incidents: Mapping[str, object]) -> dict[str, set[str]]:
    """Labels per incident id from a field of the records or from a file.

    A file is JSONL (``{"id": …, "labels": [...]}`` or ``"label": …``) or CSV with ``id``
    and ``label`` columns (one row per label), in UTF-8.  Ids not in the library are an error.
    """
    path = Path(spec)
    if spec in LABEL_FIELDS and not path.is_file():
        from_field: dict[str, set[str]] = {}
        for incident_id, incident in incidents.items():
            value = getattr(incident, spec)
            from_field[incident_id] = {value} if isinstance(value, str) else set(value)
        return from_field
    if not path.exists():
        raise LabelError(f"--labels {spec!r}: not a file and not one of the fields {', '.join(LABEL_FIELDS)}")
    try:
        text = read_utf8(path, "of labels")
        read = _csv_labels(text, path) if path.suffix.lower() == ".csv" else _jsonl_labels(text, path)
    except ReadError as exc:
        raise LabelError(f"--labels: {exc}") from None
    labels: dict[str, set[str]] = {}
    for given, values in read.items():  # an export's own key OPS-87 is the record OPS-0087 its import stored
        padded = padded_incident_id(given.upper())
        key = padded if padded is not None and given not in incidents and padded in incidents else given
        labels.setdefault(key, set()).update(values)
    unknown = sorted(set(labels) - set(incidents))
    if unknown:
        raise LabelError(f"{path}: ids not in the library: {', '.join(unknown[:10])}{' …' if len(unknown) > 10 else ''}")
    return labels


def _csv_labels(text: str, path: Path) -> dict[str, set[str]]:
    reader = csv.DictReader(text.splitlines())
    if not reader.fieldnames or not {"id", "label"} <= set(reader.fieldnames):
        raise LabelError(f"{path}:1: needs 'id' and 'label' columns, found {', '.join(reader.fieldnames or []) or 'none'}")
    labels: dict[str, set[str]] = {}
    for number, row in enumerate(reader, 2):
        if not row.get("id") or not row.get("label"):
            raise LabelError(f"{path}:{number}: an empty 'id' or 'label'")
        labels.setdefault(row["id"], set()).add(row["label"])
    return labels


def _jsonl_labels(text: str, path: Path) -> dict[str, set[str]]:
    labels: dict[str, set[str]] = {}
    for number, row in json_lines(text, path.name):
        if not isinstance(row, dict) or "id" not in row:
            raise LabelError(f"{path}:{number}: needs an object with 'id' and 'labels' (a list) or 'label'")
        values = row["labels"] if "labels" in row else [row["label"]] if "label" in row else None
        # a string is one label, never its characters; a list holds strings or numbers
        if isinstance(values, str | int | float) and not isinstance(values, bool):
            values = [values]
        if not isinstance(values, list) or not values or not all(isinstance(v, str | int | float) and not isinstance(v, bool) for v in values):
            raise LabelError(f"{path}:{number}: 'labels' must be a non-empty list of strings (or 'label' one string)")
        labels.setdefault(str(row["id"]), set()).update(str(v) for v in values)
    return labels


def precision_at(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    return sum(1 for i in ranked[:k] if i in relevant) / k


def average_precision(ranked: Sequence[str], relevant: set[str], depth: int) -> float:
    hits, total = 0, 0.0
    for rank, item in enumerate(ranked[:depth], 1):
        if item in relevant:
            hits += 1
            total += hits / rank
    return total / min(len(relevant), depth) if relevant else 0.0


Ranker = Callable[[str, list[str]], list[str]]


def relative_gain_interval(method: np.ndarray, baseline: np.ndarray, confidence: float = CONFIDENCE,
                           samples: int = BOOTSTRAP_SAMPLES, seed: int = BOOTSTRAP_SEED) -> tuple[float, float | None] | None:
    """The percentile interval of ``mean(method) / mean(baseline) − 1`` under a paired bootstrap of the queries.

    ``method`` and ``baseline`` hold one score per query, in the same order.  Each resample draws the queries
    with replacement and keeps each query's two scores together, so what the queries share (an easy query is easy
    for both) cancels in the ratio.  A resample whose baseline mean is 0 has an unbounded gain (none when the
    method's is 0 too): the upper end is None when the upper percentile falls among those, and the interval is None
    when the lower one does (or there are no queries).  Percentiles interpolate linearly between resamples."""
    if method.shape != baseline.shape:
        raise ValueError(f"one score per query on both sides: {method.shape} against {baseline.shape}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, not {confidence}")
    n = len(method)
    if n == 0:
        return None
    rng = np.random.default_rng(seed)
    ratios: list[np.ndarray] = []
    block = max(1, _BOOTSTRAP_BLOCK_DRAWS // n)  # resamples per block
    for start in range(0, samples, block):
        drawn = rng.integers(0, n, size=(min(block, samples - start), n))
        ours, theirs = method[drawn].mean(axis=1), baseline[drawn].mean(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios.append(np.where(theirs > 0, ours / theirs - 1.0, np.where(ours > 0, np.inf, 0.0)))
    gains = np.sort(np.concatenate(ratios))
    tail = (1.0 - confidence) / 2

    def percentile(q: float) -> float:  # numpy's linear rule, with +inf kept as the end it is
        position = q * (len(gains) - 1)
        below, above = gains[math.floor(position)], gains[math.ceil(position)]
        if np.isinf(above):
            return math.inf
        return float(below + (above - below) * (position - math.floor(position)))

    low, high = percentile(tail), percentile(1.0 - tail)
    if math.isinf(low):
        return None
    return low, None if math.isinf(high) else high


def evaluate(name: str, labels_name: str, labels: dict[str, set[str]], rankers: dict[str, Ranker], k: int,
             repeats: dict[str, int] | None = None, per_query: bool = False) -> SimilarEvalReport:
    """The report; with ``per_query``, each query's P@k and first ``k`` records by method too."""
    labelled = sorted(i for i, values in labels.items() if values)
    queries = [q for q in labelled if any(labels[q] & labels[o] for o in labelled if o != q)]
    if not queries:
        raise LabelError(f"labels {labels_name}: {len(labelled)} labelled record(s) and no two share a label, so there "
                         "is nothing to measure (a field such as causes holds curated links only: drafts have none "
                         "until reviewed)")
    if k > len(labelled) - 1:
        raise LabelError(f"--k {k}: more than the {len(labelled) - 1} candidate(s) each query is ranked against")
    depth = min(MAX_DEPTH, max(len(labelled) - 1, 1))
    precisions: dict[str, np.ndarray] = {}  # per method, each query's P@k (averaged over repeated orders)
    maps: dict[str, float] = {}
    firsts: dict[str, list[list[str]]] = {}  # per ranking method, each query's first k records
    for method, ranker in rankers.items():
        rounds = (repeats or {}).get(method, 1)
        scores = np.zeros(len(queries))
        ap_total = 0.0
        shown: list[list[str]] = []
        for _ in range(rounds):
            for position, q in enumerate(queries):
                candidates = [o for o in labelled if o != q]
                relevant = {o for o in candidates if labels[q] & labels[o]}
                ranked = ranker(q, candidates)[:depth]
                scores[position] += precision_at(ranked, relevant, k) / rounds
                ap_total += average_precision(ranked, relevant, depth)
                if per_query and rounds == 1:
                    shown.append(ranked[:k])
        precisions[method] = scores
        maps[method] = ap_total / max(rounds * len(queries), 1)
        if shown:
            firsts[method] = shown
    means = {method: float(values.mean()) if len(values) else 0.0 for method, values in precisions.items()}
    baseline = max((m for m in BASELINES if m in means), key=lambda m: means[m], default=None)
    methods = []
    for method, values in precisions.items():
        gain: dict[str, float] = {}
        if baseline is not None and method != baseline and means[baseline] > 0:
            gain["gain"] = round(means[method] / means[baseline] - 1.0, 4)
            interval = relative_gain_interval(values, precisions[baseline])
            if interval is not None:
                gain["gain_low"] = round(interval[0], 4)
                if interval[1] is not None:
                    gain["gain_high"] = round(interval[1], 4)
        methods.append(MethodScore(method=method, p_at_k=round(means[method], 4), map=round(maps[method], 4), **gain))
    details = [
        QueryScore(id=q, labels=sorted(labels[q]), p_at_k={method: round(float(values[position]), 4) for method, values in precisions.items()},
                   neighbours={method: shown[position] for method, shown in firsts.items()})
        for position, q in enumerate(queries)
    ] if per_query else None
    return SimilarEvalReport(collection=name, labels=labels_name, queries=len(queries), candidates=len(labelled), k=k,
                             methods=methods, baseline=baseline, per_query=details)


def baseline_rankers(incidents: Mapping[str, object], embedder: object, seed: int = RANDOM_SEED) -> dict[str, Ranker]:
    """random, BM25 over whole texts, and one whole-text embedding per record."""
    ids = list(incidents)
    texts = [incident_text(incidents[i]) for i in ids]  # type: ignore[arg-type]
    position = {i: n for n, i in enumerate(ids)}
    tokens = [tokenize(t) or ["∅"] for t in texts]
    retriever = bm25s.BM25()
    retriever.index(tokens, show_progress=False)
    vectors = embedder.encode_documents(texts)  # type: ignore[attr-defined]
    rng = random.Random(seed)

    def by_scores(scores: np.ndarray, candidates: list[str]) -> list[str]:
        return sorted(candidates, key=lambda c: (-float(scores[position[c]]), c))

    def rank_random(query: str, candidates: list[str]) -> list[str]:
        order = list(candidates)
        rng.shuffle(order)
        return order

    def rank_bm25(query: str, candidates: list[str]) -> list[str]:
        return by_scores(np.asarray(retriever.get_scores(tokens[position[query]])), candidates)

    def rank_dense(query: str, candidates: list[str]) -> list[str]:
        return by_scores(vectors @ vectors[position[query]], candidates)

    return {"random": rank_random, "bm25": rank_bm25, "dense": rank_dense}


def similar_rankers(library: object, tagger_for: Mapping[str, object] | None = None) -> dict[str, Ranker]:
    """``similar`` by incident and by text through the library facade's pipeline.

    ``tagger_for`` gives, per query record, the concept tagger to read its text with (the
    leave-concepts-out run uses the tagger of the record's fold, which never saw it)."""
    service = library._search_service  # type: ignore[attr-defined]
    incidents = library.data.incidents  # type: ignore[attr-defined]

    def by_incident(query: str, candidates: list[str]) -> list[str]:
        return [r.id for r in service.similar_to_incident(query, k=MAX_DEPTH, allowed=set(candidates))]

    def by_text(query: str, candidates: list[str]) -> list[str]:
        text = incident_text(incidents[query])[:MAX_SIMILAR_TEXT_CHARS]
        if tagger_for is not None:
            service.tagger = tagger_for[query]
        return [r.id for r in service.similar_to_text(text, k=MAX_DEPTH, allowed=set(candidates))]

    return {"similar (incident)": by_incident, "similar (text)": by_text}


# ---- leave-concepts-out ------------------------------------------------------------
FOLDS = 5  # each record is tagged by a classifier that never saw it (5-fold cross-fitting)
BLIND_PREFIX = "LC"


def leave_concepts_out(source: Any, target: Path, folds: int = FOLDS) -> tuple[Path, dict[str, Any]]:
    """Copy ``source``'s records into ``target`` as drafts with every concept and curated link
    stripped, then infer their concepts with a classifier trained on the *other* folds' curated
    records.  Returns the labels file (the held-out causes) and the tagger of each record's fold."""
    import shutil

    import yaml

    from .models import Incident, Status
    from .tagging.classifier import ConceptClassifier
    from .tagging.tagger import ConceptTagger
    from .tagging.training import examples_for

    incidents: dict[str, Incident] = source.data.incidents
    shutil.copytree(source.root / "vocab", target / "vocab")
    (target / "incidents").mkdir(parents=True)
    ids = sorted(incidents)
    fold_of = {incident_id: n % folds for n, incident_id in enumerate(ids)}
    embedder = source._search_engine.embedder
    taggers: dict[int, ConceptTagger] = {}
    blind: dict[str, Incident] = {}
    for incident_id in ids:
        incident = incidents[incident_id]
        # model_copy does not validate: the status must be the enum itself (a string would not read as a draft)
        blind[incident_id] = incident.model_copy(update={
            "status": Status.draft, "components": [], "causes": [], "symptoms": [], "tags": [], "related": [],
            "suggestions": [], "inferred": []})
    for fold in range(folds):
        train = [incidents[i] for i in ids if fold_of[i] != fold]
        classifier = ConceptClassifier(embedder).fit(examples_for(train))
        taggers[fold] = ConceptTagger(source.vocab, classifier, source.signal_concepts)
        members = [i for i in ids if fold_of[i] == fold]
        for incident_id, links in zip(members, taggers[fold].infer_incidents([blind[i] for i in members]), strict=True):
            blind[incident_id] = blind[incident_id].model_copy(update={"inferred": links})
    for incident_id, incident in blind.items():
        document = incident.model_dump(mode="json", exclude_none=True, exclude_defaults=True) | {"id": incident_id, "org": incident.org, "status": "draft"}
        (target / "incidents" / f"{incident_id}.yaml").write_text(yaml.safe_dump(document, allow_unicode=True, sort_keys=False), encoding="utf-8")
    labels_path = target / "held-out-causes.jsonl"
    labels_path.write_text("".join(json.dumps({"id": i, "labels": incidents[i].causes}) + "\n" for i in ids if incidents[i].causes),
                           encoding="utf-8")
    return labels_path, {i: taggers[fold_of[i]] for i in ids}
