""""Find incidents like this": one ranking pipeline for an incident and for pasted text.

Three kinds of evidence are measured for every candidate incident ``c`` against a query
``q`` (an incident of the library, or free text), after the collection's boilerplate
(:mod:`.boilerplate`) has been removed from both sides:

- **lexical** — the query's own text as a weighted query: ``L(q, c) = Σ_t w_q(t) · bm25(c, t)``
  where ``w_q(t) = (1 + ln tf_q(t)) · idf(t)`` (L2-normalised), and ``bm25(c, t)`` is the
  BM25 weight of term ``t`` in the whole text of ``c`` (k1 = 1.2, b = 0.75).  Every term of
  the query counts, by how specific it is, not only its title's words.
- **dense** — passage to passage: ``D(q, c) = mean_i max_j cos(q_i, c_j)`` over the query's
  passages ``q_i`` and the candidate's passages ``c_j``: each part of the query is matched
  by the best part of the candidate, instead of comparing two averaged vectors.
- **graph** — shared concepts: ``G(q, c) = cos(g_q, g_c)`` where ``g_x[k] = conf_x(k) · ln(1 + N / df(k))``
  over components, causes and symptoms; ``conf`` is 1 for a curated link and the
  confidence of an inferred one; for text, the concepts are inferred from the text.

Fusion: each evidence is standardised over the candidates,
``z_e(c) = (e(q, c) − mean_c e) / std_c e``, and ``score(c) = Σ_e w_e z_e(c) / Σ_e w_e`` over
the evidence the query has (no concepts → no graph term).  Standardising puts scores of
different scales on one footing without a weight tuned to one collection.

The weights ``w_e`` come from :data:`WEIGHTING`:

- ``"equal"``: ``w_e = 1``.
- ``"reliability"``: a label-free estimate of how much each kind of evidence says about the
  unobserved "alike" relation *on this collection*.  Each kind is read as a noisy measure of
  one common factor ``F`` (one-factor model): ``z_e = a_e F + u_e`` with independent noise
  ``u_e`` of variance ``1 − a_e²``.  Then ``corr(z_i, z_j) = a_i a_j`` for ``i ≠ j``, so the
  loadings follow from the agreement between kinds alone, with no labels:
  ``a_e² = r_ei · r_ej / r_ij`` for three kinds (the triad identity; more kinds: principal-axis
  factoring).  ``r`` is the Pearson correlation of the standardised scores, pooled over the
  (query, candidate) pairs of up to :data:`RELIABILITY_QUERIES` records of the collection used
  as queries.  The least-squares estimate of ``F`` weights each kind by loading over noise
  variance, ``w_e = a_e / (1 − a_e²)`` (Bartlett's factor score), so a kind that agrees with
  nothing (noise) gets a weight near 0 and one that carries the common signal dominates.
  Fewer than three kinds cannot separate signal from noise this way: equal weights.

**Neighbourhood** (database-side augmentation; score regularisation over the nearest-neighbour
graph): incidents alike in cause form groups, so a candidate whose own nearest incidents also
match the query is more likely alike than one that matches alone.  After fusion, each
candidate's score is replaced by the mean of its own and its ``neighbours`` nearest
candidates' fused scores,
``s'(c) = (s(c) + Σ_{j ∈ N(c)} s(j)) / (1 + |N(c)|)``, where ``N(c)`` are the incidents nearest
to ``c`` by the same pipeline (``c`` as the query), restricted to the candidates (the query
itself and filtered-out incidents never count).  It needs no labels and reads nothing but the
collection's own similarity graph.  Off by default (:data:`NEIGHBOURS` = 0): it raised label
agreement on an independent collection and lowered it on the bundled library with its
concepts held out (docs/search.md); ``SimilarityIndex(engine, neighbours=NEIGHBOURHOOD_SIZE)``
turns it on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from scipy import sparse  # type: ignore[import-untyped]

from ..models import Incident
from ..tagging.tagger import incident_text
from .boilerplate import Boilerplate
from .chunks import _PARAGRAPH, _split_long
from .engine import SearchEngine
from .tokenize import tokenize

BM25_K1 = 1.2  # the textbook BM25 values, as in the chunk index
BM25_B = 0.75
DENSE_KINDS = ("title", "body", "detail", "signal")  # "concepts" chunks are graph evidence, not text
EXPLAIN_TERMS = 8  # shared terms shown in ``why``, by weight
STD_FLOOR = 1e-9  # a constant evidence column carries no ranking information
WEIGHTINGS = ("equal", "reliability")
WEIGHTING = "equal"  # how evidence kinds are weighed in the fusion (see the module docstring)
RELIABILITY_QUERIES = 200  # records used as queries to estimate the weights: enough pairs for stable correlations, bounded cost
LOADING_FLOOR = 0.0  # a kind that disagrees with the others (negative loading) gets no weight, never a negative one
LOADING_CEILING = 0.95  # keeps 1 − a² away from 0, so one kind cannot take all the weight from sampling noise
FACTOR_ITERATIONS = 50  # principal-axis factoring converges in a few tens of steps for a handful of kinds
EVIDENCE_KINDS = ("lexical", "dense", "graph")
NEIGHBOURS = 0  # off by default: it helps on one independent collection and hurts on the bundled one (docs/search.md)
NEIGHBOURHOOD_SIZE = 5  # |N(c)| when turned on: a small neighbourhood, so the candidate's own match still weighs a sixth
NEIGHBOUR_POOL = 50  # nearest incidents kept per incident: filters (allowed, the query itself) still leave the neighbourhood; memory N × pool
EXPLAIN_NEIGHBOURS = 3  # neighbours shown in ``why``


@dataclass
class Evidence:
    """One candidate's evidence against a query."""

    incident_id: str
    score: float
    lexical: float | None
    dense: float
    graph: float | None
    chunk: int  # index into SearchEngine.chunks: the candidate's passage that matched best
    terms: list[str] = field(default_factory=list)
    shared: dict[str, bool] = field(default_factory=dict)  # concept id -> inferred on either side
    ranks: dict[str, int] = field(default_factory=dict)
    neighbours: list[str] = field(default_factory=list)  # its nearest incidents that also match the query (raised its score)


@dataclass(frozen=True)
class Query:
    """What a query brings: its lexical vector, passage vectors and concept weights."""

    terms: dict[int, float]
    passages: np.ndarray
    concepts: dict[str, float]
    inferred: frozenset[str]
    exclude: str | None = None


class SimilarityIndex:
    """Incident-level lexical, dense and graph evidence over one library."""

    def __init__(self, engine: SearchEngine, weighting: str = WEIGHTING, neighbours: int = NEIGHBOURS) -> None:
        if weighting not in WEIGHTINGS:
            raise ValueError(f"weighting: {weighting!r} is not one of {', '.join(WEIGHTINGS)}")
        if neighbours < 0 or neighbours > NEIGHBOUR_POOL:
            raise ValueError(f"neighbours: {neighbours} is not between 0 and {NEIGHBOUR_POOL}")
        self.weighting = weighting
        self.neighbours = neighbours
        self.engine = engine
        self.data = engine.data
        self.ids: list[str] = list(self.data.incidents)
        self.position = {incident_id: i for i, incident_id in enumerate(self.ids)}

    @cached_property
    def _id_array(self) -> np.ndarray:
        """The incident ids as a numpy string array (the tie-break key of :meth:`rank`)."""
        return np.array(self.ids, dtype=str)

    # ---- collection-aware text --------------------------------------------------
    @cached_property
    def boilerplate(self) -> Boilerplate:
        return Boilerplate([incident_text(i) for i in self.data.incidents.values()])

    # ---- lexical ----------------------------------------------------------------
    @cached_property
    def _lexical(self) -> tuple[dict[str, int], np.ndarray, sparse.csr_matrix]:
        """Vocabulary, idf and the (incidents × terms) BM25 weight matrix."""
        docs = [tokenize(self.boilerplate.strip(incident_text(i))) for i in self.data.incidents.values()]
        vocabulary: dict[str, int] = {}
        rows, cols, tfs = [], [], []
        for row, tokens in enumerate(docs):
            counts: dict[int, int] = {}
            for token in tokens:
                col = vocabulary.setdefault(token, len(vocabulary))
                counts[col] = counts.get(col, 0) + 1
            for col, count in counts.items():
                rows.append(row)
                cols.append(col)
                tfs.append(count)
        n = max(len(docs), 1)
        df = np.bincount(np.asarray(cols, dtype=np.int64), minlength=len(vocabulary)).astype(np.float64)
        idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
        lengths = np.array([len(d) for d in docs], dtype=np.float64)
        average = float(lengths.mean()) if len(lengths) and lengths.mean() > 0 else 1.0
        tf = np.asarray(tfs, dtype=np.float64)
        row_index = np.asarray(rows, dtype=np.int64)
        saturation = BM25_K1 * (1 - BM25_B + BM25_B * lengths[row_index] / average)
        weights = idf[np.asarray(cols, dtype=np.int64)] * tf * (BM25_K1 + 1) / (tf + saturation)
        matrix = sparse.csr_matrix((weights, (rows, cols)), shape=(len(docs), len(vocabulary)))
        return vocabulary, idf, matrix

    def lexical_query(self, text: str) -> dict[int, float]:
        vocabulary, idf, _ = self._lexical
        counts: dict[int, int] = {}
        for token in tokenize(self.boilerplate.strip(text)):
            if token in vocabulary:
                counts[vocabulary[token]] = counts.get(vocabulary[token], 0) + 1
        weights = {t: (1 + math.log(c)) * float(idf[t]) for t, c in counts.items()}
        norm = math.sqrt(sum(w * w for w in weights.values())) or 1.0
        return {t: w / norm for t, w in weights.items()}

    def _lexical_scores(self, terms: dict[int, float]) -> np.ndarray:
        _, _, matrix = self._lexical
        if not terms:
            return np.zeros(len(self.ids))
        vector = np.zeros(matrix.shape[1])
        for t, w in terms.items():
            vector[t] = w
        return np.asarray(matrix @ vector).ravel()

    @cached_property
    def _term_names(self) -> dict[int, str]:
        vocabulary, _, _ = self._lexical
        return {i: t for t, i in vocabulary.items()}

    def _terms_explained(self, terms: dict[int, float], candidate: int) -> list[str]:
        _, _, matrix = self._lexical
        row = matrix.getrow(candidate)
        contributions = sorted(((terms[t] * w, t) for t, w in zip(row.indices, row.data, strict=True) if t in terms), reverse=True)
        names = self._term_names
        shown = [names[t] for _, t in contributions if not _is_fragment(names[t])]
        return shown[:EXPLAIN_TERMS]

    # ---- dense ------------------------------------------------------------------
    @cached_property
    def _passages(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Kept passage vectors, their chunk positions, and the first column of each incident."""
        chunks = self.engine.chunks
        _, chunk_to_row = self.engine._row_maps
        keep: list[int] = []
        by_incident: dict[str, list[int]] = {}
        for position, chunk in enumerate(chunks):
            if chunk.kind in DENSE_KINDS:
                by_incident.setdefault(chunk.incident_id, []).append(position)
        starts = []
        for incident_id in self.ids:
            positions = by_incident.get(incident_id, [])
            kept = [p for p in positions if not self.boilerplate.is_all_boilerplate(chunks[p].text)]
            if not kept:  # an incident made only of template text still has its title
                kept = positions[:1]
            starts.append(len(keep))
            keep.extend(kept)
        order = np.asarray(keep, dtype=np.int64)
        vectors = self.engine.dense.vectors[chunk_to_row[order]] if len(order) else np.zeros((0, 1), dtype=np.float32)
        return np.ascontiguousarray(vectors, dtype=np.float32), order, np.asarray(starts, dtype=np.int64)

    def incident_passages(self, incident_id: str) -> np.ndarray:
        vectors, _, starts = self._passages
        i = self.position[incident_id]
        end = starts[i + 1] if i + 1 < len(starts) else len(vectors)
        return vectors[starts[i] : end]

    def text_passages(self, text: str) -> np.ndarray:
        pieces: list[str] = []
        for paragraph in _PARAGRAPH.split(text):
            stripped = self.boilerplate.strip(" ".join(paragraph.split()))
            pieces.extend(p for p in _split_long(stripped) if p.strip())
        if not pieces:
            pieces = [" ".join(text.split())]
        return self.engine.embedder.encode_documents(pieces)

    def _dense_scores(self, passages: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per incident: mean over query passages of the best candidate passage; and that passage's chunk."""
        vectors, order, starts = self._passages
        similarity = passages @ vectors.T  # (query passages × kept passages)
        best_per_query = np.maximum.reduceat(similarity, starts, axis=1)  # (query passages × incidents)
        scores = best_per_query.mean(axis=0)
        coverage = similarity.max(axis=0)  # how well each candidate passage answers some query passage
        return scores, order[first_argmax(coverage, starts)]

    # ---- graph ------------------------------------------------------------------
    @cached_property
    def _concepts(self) -> tuple[dict[str, int], np.ndarray, sparse.csr_matrix, list[dict[str, float]], list[set[str]]]:
        weighted = [i.weighted_concepts() for i in self.data.incidents.values()]
        inferred = [{link.concept for link in i.proposed()} for i in self.data.incidents.values()]
        index: dict[str, int] = {}
        for concepts in weighted:
            for c in concepts:
                index.setdefault(c, len(index))
        n = max(len(weighted), 1)
        df = np.zeros(len(index))
        for concepts in weighted:
            for c in concepts:
                df[index[c]] += 1
        idf = np.log(1 + n / np.maximum(df, 1))
        rows, cols, values = [], [], []
        for row, concepts in enumerate(weighted):
            for c, w in concepts.items():
                rows.append(row)
                cols.append(index[c])
                values.append(w * idf[index[c]])
        matrix = sparse.csr_matrix((values, (rows, cols)), shape=(len(weighted), len(index)))
        norms = np.sqrt(np.asarray(matrix.multiply(matrix).sum(axis=1)).ravel())
        norms[norms == 0] = 1.0
        return index, idf, sparse.csr_matrix(sparse.diags(1 / norms) @ matrix), weighted, inferred

    def _graph_scores(self, concepts: dict[str, float]) -> np.ndarray:
        index, idf, matrix, _, _ = self._concepts
        vector = np.zeros(matrix.shape[1])
        for c, w in concepts.items():
            if c in index:
                vector[index[c]] = w * idf[index[c]]
        norm = float(np.linalg.norm(vector))
        if norm == 0:
            return np.zeros(len(self.ids))
        return np.asarray(matrix @ (vector / norm)).ravel()

    # ---- queries ----------------------------------------------------------------
    def incident_query(self, incident: Incident) -> Query:
        return Query(
            terms=self.lexical_query(incident_text(incident)),
            passages=self.incident_passages(incident.id),
            concepts=incident.weighted_concepts(),
            inferred=frozenset(link.concept for link in incident.proposed()),
            exclude=incident.id,
        )

    def text_query(self, text: str, concepts: dict[str, float], inferred: set[str]) -> Query:
        return Query(terms=self.lexical_query(text), passages=self.text_passages(text), concepts=concepts, inferred=frozenset(inferred))

    def _columns(self, query: Query) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Every evidence the query has, per incident; and each incident's best-matching chunk."""
        dense, best_chunk = self._dense_scores(query.passages)
        columns: dict[str, np.ndarray] = {"dense": dense}
        if query.terms:
            columns["lexical"] = self._lexical_scores(query.terms)
        if query.concepts:
            columns["graph"] = self._graph_scores(query.concepts)
        return columns, best_chunk

    @cached_property
    def weights(self) -> dict[str, float]:
        """The fusion weight of each evidence kind on this collection (see the module docstring)."""
        equal = dict.fromkeys(EVIDENCE_KINDS, 1.0)
        if self.weighting == "equal" or len(self.ids) < 3:
            return equal
        step = max(1, math.ceil(len(self.ids) / RELIABILITY_QUERIES))
        samples: list[np.ndarray] = []
        for incident_id in self.ids[::step]:
            query = self.incident_query(self.data.incidents[incident_id])
            columns, _ = self._columns(query)
            if len(columns) < len(EVIDENCE_KINDS):
                continue
            others = np.ones(len(self.ids), dtype=bool)
            others[self.position[incident_id]] = False
            samples.append(np.column_stack([columns[kind][others] for kind in EVIDENCE_KINDS]))
        loadings = evidence_loadings(samples)
        if loadings is None:
            return equal
        return dict(zip(EVIDENCE_KINDS, factor_score_weights(loadings), strict=True))

    def _fuse(self, columns: dict[str, np.ndarray], candidates: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """``Σ_e w_e z_e / Σ_e w_e`` over ``candidates``, and each evidence's rank among them."""
        weights = self.weights
        fused = np.zeros(len(self.ids))
        used = 0.0
        ranks: dict[str, np.ndarray] = {}
        for name, values in columns.items():
            sub = values[candidates]
            std = float(sub.std())
            order = candidates[np.argsort(-sub, kind="stable")]
            rank = np.zeros(len(self.ids), dtype=np.int64)
            rank[order] = np.arange(1, len(order) + 1)
            ranks[name] = rank
            if std < STD_FLOOR:
                continue
            fused += weights[name] * (values - float(sub.mean())) / std
            used += weights[name]
        return fused / (used if used > 0 else 1.0), ranks

    # ---- neighbourhood ----------------------------------------------------------
    @cached_property
    def nearest(self) -> np.ndarray:
        """(incidents × pool): each incident's nearest other incidents by the fused evidence, best first.

        Computed once per index: every incident is ranked against all the others as a query."""
        n = len(self.ids)
        pool = min(NEIGHBOUR_POOL, max(n - 1, 0))
        nearest = np.zeros((n, pool), dtype=np.int64)
        everyone = np.arange(n)
        for i, incident_id in enumerate(self.ids):
            others = everyone[everyone != i]
            columns, _ = self._columns(self.incident_query(self.data.incidents[incident_id]))
            fused, _ = self._fuse(columns, others)
            nearest[i] = others[np.argsort(-fused[others], kind="stable")[:pool]]
        return nearest

    def _neighbourhood(self, fused: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``s'`` of the module docstring for every incident, and the neighbours used (−1 pads)."""
        if self.neighbours == 0 or len(self.ids) < 2:
            return fused, np.full((len(self.ids), 0), -1, dtype=np.int64)
        nearest = self.nearest
        usable = mask[nearest]
        usable &= np.cumsum(usable, axis=1) <= self.neighbours  # the first ``neighbours`` that are candidates
        total = fused + np.where(usable, fused[nearest], 0.0).sum(axis=1)
        smoothed = total / (1 + usable.sum(axis=1))
        chosen = np.where(usable, nearest, -1)
        return smoothed, chosen

    def rank(self, query: Query, k: int, allowed: set[str] | None = None) -> list[Evidence]:
        """The ``k`` best candidates by fused, standardised evidence, averaged over each candidate's
        neighbourhood (see the module docstring)."""
        mask = np.ones(len(self.ids), dtype=bool)
        if allowed is not None:
            mask &= np.array([i in allowed for i in self.ids], dtype=bool)
        if query.exclude is not None and query.exclude in self.position:
            mask[self.position[query.exclude]] = False
        candidates = np.flatnonzero(mask)
        if not len(candidates):
            return []
        columns, best_chunk = self._columns(query)
        dense = columns["dense"]
        own, ranks = self._fuse(columns, candidates)
        fused, chosen = self._neighbourhood(own, mask)
        order = top_by_score_then_id(fused, candidates, self._id_array, k)
        _, _, _, weighted, inferred = self._concepts
        results = []
        for i in order:
            shared = {c: (c in query.inferred or c in inferred[i]) for c in query.concepts if c in weighted[i]}
            near = sorted((int(j) for j in chosen[i] if j >= 0 and own[j] > own[i]), key=lambda j: -own[j])
            results.append(Evidence(
                incident_id=self.ids[i], score=float(fused[i]),
                lexical=float(columns["lexical"][i]) if "lexical" in columns else None,
                dense=float(dense[i]), graph=float(columns["graph"][i]) if "graph" in columns else None,
                chunk=int(best_chunk[i]), terms=self._terms_explained(query.terms, int(i)), shared=shared,
                ranks={name: int(r[i]) for name, r in ranks.items()},
                neighbours=[self.ids[j] for j in near[:EXPLAIN_NEIGHBOURS]],
            ))
        return results


def first_argmax(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per segment ``values[starts[i]:starts[i + 1]]`` (the last one runs to the end; none empty), the
    position in ``values`` of its largest value, the first one on ties (``np.argmax`` per segment,
    without a Python loop over the segments)."""
    if len(starts) == 0:
        return np.zeros(0, dtype=np.int64)
    counts = np.diff(np.append(starts, len(values)))
    if np.any(counts <= 0):
        raise ValueError("first_argmax: every segment needs at least one value")
    segment = np.repeat(np.arange(len(starts)), counts)
    hits = np.flatnonzero(values == np.maximum.reduceat(values, starts)[segment])
    first = np.ones(len(hits), dtype=bool)
    first[1:] = segment[hits[1:]] != segment[hits[:-1]]
    result: np.ndarray = hits[first]
    return result


def top_by_score_then_id(scores: np.ndarray, candidates: np.ndarray, ids: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` candidates with the highest ``scores``, best first, ties in ascending ``ids`` order.

    The same order as sorting every candidate by ``(-score, id)``: a partial sort keeps the
    candidates scoring at least the ``k``-th best score (all of the tied ones), and only those are
    sorted with their ids."""
    values = scores[candidates]
    if k <= 0 or len(candidates) == 0:
        return candidates[:0]
    if len(candidates) > k:
        cut = np.partition(values, len(values) - k)[len(values) - k]  # the k-th largest score
        kept = values >= cut
        candidates, values = candidates[kept], values[kept]
    result: np.ndarray = candidates[np.lexsort((ids[candidates], -values))][:k]
    return result


def evidence_loadings(samples: Sequence[np.ndarray]) -> np.ndarray | None:
    """One-factor loadings of the evidence kinds from their agreement alone.

    ``samples`` holds one (candidates × kinds) score matrix per query.  Each column is
    standardised within its query (as in the fusion), the pairs are pooled, and the loadings
    ``a`` of ``corr(z_i, z_j) = a_i a_j`` (i ≠ j) are found by principal-axis factoring: start
    from each kind's largest correlation as its communality, then repeatedly take the leading
    eigenpair of the correlation matrix with the communalities on its diagonal.  For three
    kinds the fixed point is the triad solution ``a_i² = r_ij r_ik / r_jk``.  ``None`` when
    there are fewer than three kinds or no query where every kind varies."""
    standardised = []
    for sample in samples:
        std = sample.std(axis=0)
        if sample.shape[0] < 2 or np.any(std < STD_FLOOR):
            continue
        standardised.append((sample - sample.mean(axis=0)) / std)
    if not standardised or standardised[0].shape[1] < len(EVIDENCE_KINDS):
        return None
    pooled = np.vstack(standardised)
    correlation = np.corrcoef(pooled, rowvar=False)
    kinds = correlation.shape[0]
    off_diagonal = correlation - np.eye(kinds)
    communality = np.abs(off_diagonal).max(axis=1)
    loadings = np.sqrt(communality)
    for _ in range(FACTOR_ITERATIONS):
        reduced = off_diagonal + np.diag(communality)
        values, vectors = np.linalg.eigh(reduced)
        loadings = vectors[:, -1] * math.sqrt(max(float(values[-1]), 0.0))
        if loadings.sum() < 0:
            loadings = -loadings
        communality = np.clip(loadings**2, 0.0, 1.0)
    return np.asarray(loadings, dtype=np.float64)


def factor_score_weights(loadings: np.ndarray) -> list[float]:
    """``w_e = a_e / (1 − a_e²)`` with ``a_e`` clipped to [LOADING_FLOOR, LOADING_CEILING],
    scaled to sum to the number of kinds (so equal weights are all 1); all-zero → equal."""
    a = np.clip(loadings, LOADING_FLOOR, LOADING_CEILING)
    raw = a / (1 - a**2)
    total = float(raw.sum())
    if total <= 0:
        return [1.0] * len(a)
    return [float(w) * len(a) / total for w in raw]


def _is_fragment(token: str) -> bool:
    if len(token) < 2 or set(token) == {"0"}:
        return True
    return len(token) == 2 and all("\uac00" <= ch <= "\ud7a3" for ch in token)


def batch_rank(index: SimilarityIndex, queries: Sequence[Query], k: int) -> list[list[Evidence]]:
    return [index.rank(q, k) for q in queries]
