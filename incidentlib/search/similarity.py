""""Find incidents like this": one ranking pipeline for an incident and for pasted text.

Four kinds of evidence are measured for every candidate incident ``c`` against a query
``q`` (an incident of the library, or free text), after the collection's boilerplate
(:mod:`.boilerplate`) has been removed from both sides:

- **lexical** — the query's own text as a weighted query: ``L(q, c) = Σ_t w_q(t) · bm25(c, t)``
  where ``w_q(t) = 1 + ln tf_q(t)`` (L2-normalised), and ``bm25(c, t)`` is the
  BM25 weight of term ``t`` in the whole text of ``c`` (k1 = 1.2, b = 0.75), its idf included.  Every term of
  the query counts, by how specific it is (the idf, once), not only its title's words.
- **dense** — passage to passage: ``D(q, c) = mean_i max_j cos(q_i, c_j)`` over the query's
  passages ``q_i`` and the candidate's passages ``c_j``: each part of the query is matched
  by the best part of the candidate, instead of comparing two averaged vectors.
- **graph** — shared concepts: ``G(q, c) = cos(g_q, g_c)`` where ``g_x[k] = conf_x(k) · ln(1 + N / df(k))``
  over components, causes and symptoms and the concepts broader than them (a driver bug is a software bug;
  :mod:`.concept_space`); ``conf`` is 1 for a curated link and the
  confidence of an inferred one; for text, the concepts are inferred from the text.
- **cause** — shared causes: ``C(q, c) = cos(g_q, g_c)`` over the cause concepts alone (the same weights,
  :mod:`.concept_space`).  "Alike" for this library means alike in root cause (its "same cause · shared X"
  relation), and in the graph evidence a shared cause weighs no more than a shared component or symptom; this
  kind lets it count once more.  A query that names no cause (curated or inferred) has no cause term.

Fusion: each evidence is standardised over the candidates,
``z_e(c) = (e(q, c) − mean_c e) / std_c e``, and ``score(c) = Σ_e w_e z_e(c) / Σ_e w_e`` over
the evidence the query has (no concepts → no graph term, no cause → no cause term).  Standardising puts scores of
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
  The cause evidence reads the graph's concept links, so its errors are the graph's (two kinds of one source
  agree whether or not they are right): the model is fitted on lexical, dense and graph, and cause takes graph's weight.

**Neighbourhood** (database-side augmentation; score regularisation over the nearest-neighbour
graph): incidents alike in cause form groups, so a candidate whose own nearest incidents also
match the query is more likely alike than one that matches alone.  After fusion, each
candidate's score is combined with its neighbours' fused scores.  ``N(c)`` are the incidents
nearest to ``c`` by the same pipeline (``c`` as the query), restricted to the candidates (the
query itself and filtered-out incidents never count), either

- the ``neighbours`` nearest (a fixed size), or
- ``neighbours="elbow"``: the nearest before the largest drop of ``c``'s own sorted fused
  scores, ``|N(c)| = 1 + argmax_i (s_i − s_{i+1})`` over its :data:`NEIGHBOUR_POOL` nearest —
  a size that follows how ``c``'s part of the collection is grouped, not a constant.

and the two are combined by ``mix``:

- ``"pooled"`` (database-side augmentation): ``s'(c) = (s(c) + Σ_{j ∈ N(c)} s(j)) / (1 + |N(c)|)``,
  so the candidate's own match weighs ``1 / (1 + |N(c)|)``;
- ``"balanced"``: ``s'(c) = ½ s(c) + ½ mean_{j ∈ N(c)} s(j)``: the candidate's own evidence and
  its neighbourhood's are two estimates of the same thing with no label to say which is more
  reliable, so they weigh equally (as the evidence kinds do), whatever the neighbourhood's size.

It needs no labels and reads nothing but the collection's own similarity graph.  Off by default
(:data:`NEIGHBOURS` = 0): every variant measured raised label agreement on some collection and
lowered it on another (docs/search.md, "Neighbourhood methods");
``SimilarityIndex(engine, neighbours=NEIGHBOURHOOD_SIZE, mix="balanced")`` turns on the one that
lowered none measurably.

**Candidates, then exact evidence** (large libraries).  Below :data:`CANDIDATE_THRESHOLD` kept
passages every incident is scored exactly, as above.  From it on, scoring every incident costs
one product of the query's passages with every kept passage and a second copy of all passage
vectors, so ``rank`` works on a bounded pool instead:

1. *pool* ``P`` = the union of
   - **dense**: the :data:`DENSE_HITS` nearest passages of each query passage ``q_i`` from the
     engine's own dense index (one batch call; an inverted file searches by its codes alone over
     :data:`CANDIDATE_PROBE_SHARE` of its calibrated lists), mapped to incidents and ordered by
     ``D̃(q, c) = mean_i max_{j ∈ hits_i ∩ c} cos(q_i, c_j)`` (0 where a query passage found
     none of ``c``'s passages); the best :data:`DENSE_POOL`;
   - **lexical**: the :data:`LEXICAL_POOL` incidents with the largest ``L(q, c) > 0``, found by
     MaxScore (:mod:`.lexical_top`): the query terms whose bounds ``w_q(t) · max_c B[c, t]`` sum
     below the pool's last score are not read, the incidents of the others' columns
     (``Σ_t w_q(t) · B[:, t]`` over a column-major copy of the BM25 matrix) that can still reach
     the pool are scored exactly by their rows (at most :data:`LEXICAL_RESCORE`);
   - **graph**: likewise the :data:`GRAPH_POOL` largest ``G(q, c) > 0`` from the query
     concepts' columns.
2. *exact evidence* on ``P``: ``D(q, c)`` exactly as above from the candidates' own passage
   vectors, fetched from the dense index by row (:meth:`VectorIndex.rows`); ``L`` and ``G``
   from the columns of step 1.
3. *fusion* with the statistics of the whole collection, as on the exact path:
   ``z_e(c) = (e(q, c) − μ_e) / σ_e`` where ``μ_e, σ_e`` are the mean and standard deviation of
   ``e(q, ·)`` over every candidate incident (all allowed incidents but the query).  For
   graph the full column is known, so ``μ = Σ e / n`` and ``σ² = Σ e² / n − μ²`` are exact.
   For lexical ``μ`` is exact from per-term column sums, and ``σ`` is exact over the incidents
   scored by their rows and estimated on the fixed sample below for the rest, whose mean is
   known (:mod:`.lexical_top`); under a filter the full columns are read and both are exact.  For dense they are estimated on a fixed sample ``S`` of
   :data:`DENSE_SAMPLE` incidents (seed :data:`SAMPLE_SEED`), scored exactly against the
   query: ``μ̂ = mean_{c ∈ S} D(q, c)``, ``σ̂ = std_{c ∈ S} D(q, c)``.  When the pool holds every
   candidate incident, the pool's own values are used instead (exact).
4. ``score(c)`` for ``c ∈ P`` as above; ``ranks`` in ``why`` are ranks among ``P``.

A filter that leaves at most :data:`EXHAUSTIVE_POOL` incidents skips step 1: they are all scored.

With pools that hold every incident the result equals the exact path's.  The neighbourhood step
needs every incident's fused scores, so it keeps the exact path.

**Built once, saved.**  The boilerplate model, the BM25 matrix ``B`` (by incident and by term, with the
term counts) and the kept-passage layout are computed over every record on first use and saved in the
engine's cache folder, keyed by the records' and chunks' text (:mod:`.similarity_store`); later
starts load them.  On the candidate path a record of the library used as the query takes ``w_q`` from
its saved term counts instead of tokenizing its text again (the same terms and counts).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import Any, Protocol, TypeVar, cast, runtime_checkable

import numpy as np
from scipy import sparse  # type: ignore[import-untyped]
from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

from ..cold_pages import announce_cold_columns
from ..loader import each_record
from ..models import ConceptKind, Incident
from ..tagging.tagger import incident_text
from .boilerplate import Boilerplate
from .chunks import chunk_digests, chunk_incident_ids, chunk_kinds, pasted_passages
from .concept_space import ClosedConcepts, ConceptSpace
from .engine import SearchEngine
from .lexical_top import LexicalTop, TermBounds, WeightedQuery, lexical_top, scores_of
from .similarity_store import SimilarityArtefact, cached_artefact, similarity_key
from .tokenize import tokenize

BM25_K1 = 1.2  # the textbook BM25 values, as in the chunk index
BM25_B = 0.75
DENSE_KINDS = ("title", "body", "detail", "signal")  # "concepts" chunks are graph evidence, not text
#: What the persisted artefact's values depend on besides the records, the chunks and the tokenizer's and boilerplate
#: model's code (:func:`.similarity_store.similarity_key`).
ARTEFACT_CONSTANTS = f"bm25 k1={BM25_K1!r} b={BM25_B!r}; passages {','.join(DENSE_KINDS)}"
EXPLAIN_TERMS = 8  # shared terms shown in ``why``, by weight
STD_FLOOR = 1e-9  # a constant evidence column carries no ranking information
WEIGHTINGS = ("equal", "reliability")
WEIGHTING = "equal"  # how evidence kinds are weighed in the fusion (see the module docstring)
#: The passes of the artefact's build, as ``prepare``'s progress names them.
BUILD_STEPS = ("counting boilerplate", "weighing terms", "keeping passages")  # each counts records
PROGRESS_EVERY = 4_096  # records between progress reports: a few a second, none for a small library's passes
#: ``progress(step, done, total)`` during the build (:meth:`SimilarityIndex.prepare`).
BuildProgress = Callable[[str, int, int], None]
T = TypeVar("T")
BUILD_BLOCK = 65_536  # records whose rows are joined at once when the artefact is built: few arrays, small temporaries
RELIABILITY_QUERIES = 200  # records used as queries to estimate the weights: enough pairs for stable correlations, bounded cost
LOADING_FLOOR = 0.0  # a kind that disagrees with the others (negative loading) gets no weight, never a negative one
LOADING_CEILING = 0.95  # keeps 1 − a² away from 0, so one kind cannot take all the weight from sampling noise
FACTOR_ITERATIONS = 50  # principal-axis factoring converges in a few tens of steps for a handful of kinds
EVIDENCE_KINDS = ("lexical", "dense", "graph", "cause")
#: The kinds the reliability model is fitted on: one source each (the cause evidence reads the graph's concept links).
FACTOR_KINDS = ("lexical", "dense", "graph")
MIN_FACTOR_KINDS = 3  # one common factor is identified from the agreement of three kinds or more (two agree or not: no more)
NEIGHBOURS = 0  # off by default: no variant measured helps on every collection (docs/search.md)
ELBOW = "elbow"  # ``neighbours=ELBOW``: each incident's neighbourhood ends at the largest drop of its nearest incidents' scores
POOLED, BALANCED = "pooled", "balanced"  # how a candidate's own score and its neighbours' are combined (module docstring)
NEIGHBOURHOOD_MIXES = (POOLED, BALANCED)
NEIGHBOURHOOD_MIX = POOLED  # the mean of all 1 + |N(c)| scores, as database-side augmentation defines it
NEIGHBOURHOOD_SIZE = 5  # |N(c)| when turned on: a small neighbourhood, so the candidate's own match still weighs a sixth
NEIGHBOUR_POOL = 50  # nearest incidents kept per incident: filters (allowed, the query itself) still leave the neighbourhood; memory N × pool
EXPLAIN_NEIGHBOURS = 3  # neighbours shown in ``why``
#: Kept passages (dense chunks of all incidents, boilerplate removed) from which ``rank`` scores a bounded
#: pool of candidates instead of every incident (module docstring).  bench/bench_similar.py --paths
#: (docs/benchmarks.md): with the exact (flat) dense index the candidate search is itself a full product, and the
#: candidate path took 1.49× the exact path's p50 at 113k kept passages; with HNSW it took 0.29× at 339k.  The
#: engine switches to HNSW at 200k index rows (:data:`.dense.DEFAULT_HNSW_THRESHOLD`), about 170k kept passages
#: (kept passages are 0.84 of the rows on the synthetic libraries): the candidate path starts there.
CANDIDATE_THRESHOLD = 170_000
DENSE_HITS = 64  # nearest passages fetched per query passage: several passages of each of the ~tens of nearest incidents
DENSE_POOL = 200  # incidents kept from the dense hits; 20× the usual k = 10, so the exact re-scoring can reorder them
LEXICAL_POOL = 200  # incidents kept by lexical score, same reason
#: Incidents at most that the lexical pool's MaxScore bound lets through to be scored exactly by their rows
#: (:mod:`.lexical_top`): 10× the pool, so the bound may be loose by an order of magnitude and the pool stays exact;
#: each costs one row of ~hundreds of terms, so 2,000 cost about what 40k entries of a column do.
LEXICAL_RESCORE = 2_000
GRAPH_POOL = 100  # incidents kept by shared concepts: concepts are coarse (many ties), a smaller pool still covers the head
#: Incidents scored exactly to estimate the dense mean and deviation.  An error in μ̂ shifts every candidate's dense z by
#: the same amount (no change in order); an error in σ̂ rescales the dense weight by about 1 ± 1/√(2n): ±3 % at 500,
#: far below the spread of the weights themselves, for ~5k passages per query.
DENSE_SAMPLE = 500
EXHAUSTIVE_POOL = 500  # allowed incidents (a filter's) at or below which all are scored exactly: no more than the pools would hold
SAMPLE_SEED = 0  # a fixed sample: the same query gets the same scores on every call
#: Share of an inverted file's calibrated ``nprobe`` that the candidate search scans, by the 8-bit codes alone (no row
#: read back to re-rank).  The calibrated number is set for the top 10 *passages* of one query at 0.98 recall; the pool
#: needs neither: it keeps 200 incidents from 64 hits of each of the query's ~11 passages (plus the lexical and concept
#: pools) and every member is scored again exactly, so a passage missed or misordered by a few 1e-3 only matters if its
#: incident then falls out of all three pools.  bench/bench_similar.py --paths --probe-shares (docs/benchmarks.md).
CANDIDATE_PROBE_SHARE = 0.25


def query_term_weight(counts: np.ndarray) -> np.ndarray:
    """``w_q(t) = 1 + ln tf_q(t)`` for each of the query's term counts: a term said again adds less each time.  No idf
    here: ``bm25(c, t)`` holds it already, and a second one (``idf²``) let a rare word the two texts share by chance, a
    place or a product name, outweigh the words they are both about; the lexical evidence alone then ranked below plain
    BM25 on all three collections measured (docs/search.md, "The idf counted once")."""
    return np.asarray(1 + np.log(counts), dtype=np.float64)


@dataclass(frozen=True)
class Pools:
    """Pool sizes of the candidate path (module docstring); the defaults are the named constants."""

    dense_hits: int = DENSE_HITS
    dense: int = DENSE_POOL
    lexical: int = LEXICAL_POOL
    graph: int = GRAPH_POOL
    sample: int = DENSE_SAMPLE
    exhaustive: int = EXHAUSTIVE_POOL
    probe_share: float = CANDIDATE_PROBE_SHARE
    prune_lexical: bool = True
    lexical_rescore: int = LEXICAL_RESCORE

    def __post_init__(self) -> None:
        for name in ("dense_hits", "dense", "lexical", "graph", "sample", "exhaustive", "lexical_rescore"):
            if getattr(self, name) < 0:
                raise ValueError(f"pools.{name}: {getattr(self, name)} is negative")
        if not 0 < self.probe_share <= 1:
            raise ValueError(f"pools.probe_share: {self.probe_share} is not in (0, 1]")


@runtime_checkable
class CodeSearch(Protocol):
    """A dense index that can search by its compressed codes alone with a given scan width (the inverted file)."""

    @property
    def nprobe(self) -> int: ...

    def search_codes_batch(self, queries: np.ndarray, k: int, nprobe: int | None = None) -> tuple[np.ndarray, np.ndarray]: ...


@cache
def _blas_controller() -> ThreadpoolController:
    return ThreadpoolController()


def one_blas_thread() -> Any:
    """A context in which BLAS runs on one thread.  The candidate path's products are small (tens of query passages
    against a few thousand rows, vectors of one column): a second thread saves less than it costs to wake, and on a
    busy machine waiting for it took 12 ms for a 100k-element dot product that takes 0.1 ms on one thread
    (docs/benchmarks.md).  Same results: the products are split by output rows, not summed across threads.  The
    inverted file's code scan sets its own threads (:func:`.ivf.query_threads`): whole query passages per thread."""
    return _blas_controller().limit(limits=1, user_api="blas")


@dataclass
class Evidence:
    """One candidate's evidence against a query."""

    incident_id: str
    score: float
    lexical: float | None
    dense: float
    graph: float | None
    chunk: int  # index into SearchEngine.chunks: the candidate's passage that matched best
    cause: float | None = None
    terms: list[str] = field(default_factory=list)
    shared: dict[str, bool] = field(default_factory=dict)  # concept id -> inferred on either side
    # broader concepts shared only through narrower ones (a driver bug and a firmware bug: software-bug) -> inferred
    broader: dict[str, bool] = field(default_factory=dict)
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

    def __init__(self, engine: SearchEngine, weighting: str = WEIGHTING, neighbours: int | str = NEIGHBOURS,
                 candidate_threshold: int = CANDIDATE_THRESHOLD, pools: Pools | None = None,
                 mix: str = NEIGHBOURHOOD_MIX) -> None:
        if candidate_threshold < 0:
            raise ValueError(f"candidate_threshold: {candidate_threshold} is negative")
        self.candidate_threshold = candidate_threshold
        self.pools = pools or Pools()
        if weighting not in WEIGHTINGS:
            raise ValueError(f"weighting: {weighting!r} is not one of {', '.join(WEIGHTINGS)}")
        if mix not in NEIGHBOURHOOD_MIXES:
            raise ValueError(f"mix: {mix!r} is not one of {', '.join(NEIGHBOURHOOD_MIXES)}")
        self.mix = mix
        if isinstance(neighbours, str):
            if neighbours != ELBOW:
                raise ValueError(f"neighbours: {neighbours!r} is neither a number nor {ELBOW!r}")
        elif neighbours < 0 or neighbours > NEIGHBOUR_POOL:
            raise ValueError(f"neighbours: {neighbours} is not between 0 and {NEIGHBOUR_POOL}")
        self.weighting = weighting
        self.neighbours = neighbours
        self.engine = engine
        self.data = engine.data
        self.ids: list[str] = list(self.data.incidents)
        self.position = {incident_id: i for i, incident_id in enumerate(self.ids)}
        self.artefact_source = ""  # "loaded", "built" or "unsaved" once the artefact was needed (similarity_store.cached_artefact)
        self._artefact_lock = threading.Lock()  # one build, whether a request or `prepare` asks first
        self._artefact_held: SimilarityArtefact | None = None
        self._key: str | None = None  # the artefact's key, once computed (a pass over every record)

    @cached_property
    def _id_array(self) -> np.ndarray:
        """The incident ids as a numpy string array (the tie-break key of :meth:`rank`)."""
        return np.array(self.ids, dtype=str)

    # ---- collection-aware text --------------------------------------------------
    # ---- what is built over the whole library (persisted: similarity_store) -------
    @property
    def _artefact(self) -> SimilarityArtefact:
        """The boilerplate model, the BM25 matrix and the kept-passage layout: loaded from the engine's cache
        folder when saved for the same records, chunks and code (:mod:`.similarity_store`), else built and saved."""
        if self._artefact_held is None:
            self.prepare()
        assert self._artefact_held is not None  # built when not loaded
        return self._artefact_held

    def prepare(self, progress: BuildProgress | None = None, build: bool = True) -> str:
        """Load or build (and save) what the first request would, now, reporting ``progress(step, done, total)``
        while building; ``"loaded"``, ``"built"`` or ``"unsaved"`` (built, but not saved: the next start builds it
        again).  At a million incidents the build takes half an hour: ``incidentlib index --similar`` runs it before
        a server's first ``similar`` has to.  With ``build=False`` only a saved artefact is loaded: ``"absent"``
        when there is none."""
        with self._artefact_lock:  # a request arriving meanwhile waits for this instead of starting a build
            if self._artefact_held is None:
                held = self._load_or_build(progress, build)
                if held is None:
                    return "absent"
                self._artefact_held = held
        return self.artefact_source

    def warm(self) -> str:
        """Load the saved artefact (never build one) and the parts a request builds from the records on first use
        (each record's concepts, the concept spaces), so that a server's first ``similar`` after a start does not
        wait for them (76 s at a million incidents).  Returns what :meth:`prepare` with ``build=False`` does; then
        :meth:`warm_query` builds the rest by answering one query."""
        source = self.prepare(build=False)
        if source != "absent":
            _ = self.uses_candidates, self._concepts, self._concept_spaces, self._lexical
        return source

    def warm_query(self) -> None:
        """Answer one query, which builds what is left (the passage rows, the dense sample; the term bounds are saved with the artefact)."""
        if self.ids:
            self.rank(self.incident_query(self.data.incidents[self.ids[0]]), 1)

    def _load_or_build(self, progress: BuildProgress | None, build: bool) -> SimilarityArtefact | None:
        # streams read once, no record kept: a server makes this key on its first `similar`, which reads a few records
        chunks = self.engine.chunks
        sizes = (len(self.ids), len(chunks))
        # a chunk by its text's digest, not its text: the texts stay in the start snapshot's file, unread; kept, since a
        # load-only call that found nothing (warm) is followed by a request that builds, over the same records
        if self._key is None:
            self._key = similarity_key(((incident.id, incident_text(incident)) for incident in each_record(self.data.incidents)),
                                       zip(chunk_incident_ids(chunks), chunk_kinds(chunks), chunk_digests(chunks), strict=True),
                                       ARTEFACT_CONSTANTS, sizes)
        key = self._key
        artefact, source = cached_artefact(
            self.engine.cache_dir, key, *sizes,
            (lambda: self._build_artefact(lambda: (incident_text(incident) for incident in each_record(self.data.incidents)),
                                          progress)) if build else None)
        if artefact is not None:
            self.artefact_source = source
        return artefact

    def _build_artefact(self, texts: Callable[[], Iterable[str]], progress: BuildProgress | None = None) -> SimilarityArtefact:
        """Boilerplate model, (incidents × terms) BM25 matrix (module docstring) with its term counts, and the layout.

        ``texts`` gives a new stream of the records' texts per call: one pass counts the boilerplate, one tokenizes.
        No text or token list is kept; each record's row is its term ids (ascending) and counts, gathered in blocks of
        :data:`BUILD_BLOCK` records, so the memory is the matrix's arrays (what a million incidents need).
        ``progress(step, done, total)`` hears of each pass every :data:`PROGRESS_EVERY` records."""
        records_total = len(self.ids)
        boilerplate = Boilerplate(cast(Sequence[str], _CountedStream(_reported(texts(), progress, BUILD_STEPS[0], records_total), records_total)))
        vocabulary: dict[str, int] = {}
        blocks: list[tuple[np.ndarray, np.ndarray]] = []  # (term ids, counts) of BUILD_BLOCK records each
        pending: list[tuple[np.ndarray, np.ndarray]] = []
        row_entries: list[int] = []
        lengths_list: list[int] = []
        for text in _reported(texts(), progress, BUILD_STEPS[1], records_total):
            tokens = tokenize(boilerplate.strip(text))
            ids = np.fromiter((vocabulary.setdefault(token, len(vocabulary)) for token in tokens), dtype=np.int64, count=len(tokens))
            terms, counts = np.unique(ids, return_counts=True)  # canonical CSR: terms ascending within a row
            pending.append((terms, counts))
            row_entries.append(len(terms))
            lengths_list.append(len(tokens))
            if len(pending) == BUILD_BLOCK:
                blocks.append(_joined(pending))
                pending = []
        if pending:
            blocks.append(_joined(pending))
        del pending
        records = len(row_entries)
        indptr = np.zeros(records + 1, dtype=np.int64)
        np.cumsum(np.asarray(row_entries, dtype=np.int64), out=indptr[1:])
        del row_entries
        indices = np.concatenate([terms for terms, _ in blocks]) if blocks else np.zeros(0, dtype=np.int32)
        tfs = np.concatenate([counts for _, counts in blocks]) if blocks else np.zeros(0, dtype=np.int32)
        del blocks
        n = max(records, 1)
        df = np.bincount(indices, minlength=len(vocabulary)).astype(np.float64)
        idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
        lengths = np.asarray(lengths_list, dtype=np.float64)
        del lengths_list
        average = float(lengths.mean()) if len(lengths) and lengths.mean() > 0 else 1.0
        weights = np.empty(len(indices), dtype=np.float64)
        for first in range(0, records, BUILD_BLOCK):  # by blocks of records: the temporaries stay small
            last = min(first + BUILD_BLOCK, records)
            start, end = int(indptr[first]), int(indptr[last])
            row_index = np.repeat(np.arange(first, last), np.diff(indptr[first:last + 1]))
            tf = tfs[start:end].astype(np.float64)
            saturation = BM25_K1 * (1 - BM25_B + BM25_B * lengths[row_index] / average)
            weights[start:end] = idf[indices[start:end]] * tf * (BM25_K1 + 1) / (tf + saturation)
        matrix = sparse.csr_matrix((weights, indices, indptr), shape=(records, len(vocabulary)))
        del weights
        kept, starts = self._build_layout(boilerplate, progress, records_total)
        columns = sparse.csc_matrix(matrix)
        return SimilarityArtefact(
            boilerplate_keys=boilerplate.keys, vocabulary=list(vocabulary), idf=idf, matrix=matrix, counts=tfs,
            columns=columns, bounds=TermBounds.of(columns), kept=kept, starts=starts, chunks=len(self.engine.chunks))

    def _build_layout(self, boilerplate: Boilerplate, progress: BuildProgress | None = None,
                      total: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """The chunk positions of the kept passages, incident by incident, and the first of each incident."""
        chunks = self.engine.chunks
        keep: list[int] = []
        by_incident: dict[str, list[int]] = {}
        for position, chunk in enumerate(chunks):
            if chunk.kind in DENSE_KINDS:
                by_incident.setdefault(chunk.incident_id, []).append(position)
        starts = []
        for incident_id in _reported(self.ids, progress, BUILD_STEPS[2], total):  # the sentence checks are the cost
            positions = by_incident.get(incident_id, [])
            kept = [p for p in positions if not boilerplate.is_all_boilerplate(chunks[p].text)]
            if not kept:  # an incident made only of template text still has its title
                kept = positions[:1]
            starts.append(len(keep))
            keep.extend(kept)
        return np.asarray(keep, dtype=np.int64), np.asarray(starts, dtype=np.int64)

    # ---- collection-aware text --------------------------------------------------
    @cached_property
    def boilerplate(self) -> Boilerplate:
        return Boilerplate.from_keys(self._artefact.boilerplate_keys)

    # ---- lexical ----------------------------------------------------------------
    @cached_property
    def _lexical(self) -> tuple[dict[str, int], np.ndarray, sparse.csr_matrix]:
        """Vocabulary, idf and the (incidents × terms) BM25 weight matrix."""
        artefact = self._artefact
        return {term: i for i, term in enumerate(artefact.vocabulary)}, artefact.idf, artefact.matrix

    def lexical_query(self, text: str) -> dict[int, float]:
        vocabulary, _, _ = self._lexical
        counts: dict[int, int] = {}
        for token in tokenize(self.boilerplate.strip(text)):
            if token in vocabulary:
                counts[vocabulary[token]] = counts.get(vocabulary[token], 0) + 1
        weights = dict(zip(counts, query_term_weight(np.fromiter(counts.values(), dtype=np.float64, count=len(counts))).tolist(),
                           strict=True))
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
    def _lexical_columns(self) -> sparse.csc_matrix:
        """The BM25 matrix stored by column (candidate path): a query reads only its own terms' columns."""
        return self._artefact.columns

    def _lexical_column(self, terms: dict[int, float]) -> np.ndarray:
        """``L(q, c)`` for every incident from the query terms' columns: ``Σ_t w_q(t) · B[:, t]``.  (Summing the
        columns' entries with ``np.bincount`` instead of slicing the matrix measured 1.5–2.4× slower.)"""
        if not terms:
            return np.zeros(len(self.ids))
        columns = np.fromiter(terms.keys(), dtype=np.int64, count=len(terms))
        weights = np.fromiter(terms.values(), dtype=np.float64, count=len(terms))
        announce_cold_columns(self._lexical_columns, columns)
        return np.asarray(self._lexical_columns[:, columns] @ weights).ravel()

    @property
    def _term_bounds(self) -> TermBounds:
        """Per term the largest and the summed BM25 weight over the incidents (candidate path, :mod:`.lexical_top`)."""
        return self._artefact.bounds

    def _weighted_query(self, terms: dict[int, float]) -> WeightedQuery:
        return WeightedQuery(terms, self._artefact.matrix.shape[1])

    def _stored_terms(self, position: int) -> dict[int, float]:
        """``w_q`` of the library's incident at ``position`` (as :meth:`lexical_query` of its text finds it) from its saved
        row of term counts, without tokenizing its text again; terms in ascending id order."""
        artefact = self._artefact
        start, end = int(artefact.matrix.indptr[position]), int(artefact.matrix.indptr[position + 1])
        columns = artefact.matrix.indices[start:end]
        weights = query_term_weight(artefact.counts[start:end].astype(np.float64))
        norm = math.sqrt(float(np.sum(weights * weights))) or 1.0
        return dict(zip(columns.tolist(), (weights / norm).tolist(), strict=True))

    @cached_property
    def _term_names(self) -> dict[int, str]:
        vocabulary, _, _ = self._lexical
        return {i: t for t, i in vocabulary.items()}

    def _terms_explained(self, terms: dict[int, float], candidate: int) -> list[str]:
        """The shared terms by contribution ``w_q(t) · bm25(c, t)``, largest first (ties: higher term number first)."""
        if not terms:
            return []
        _, _, matrix = self._lexical
        start, end = matrix.indptr[candidate], matrix.indptr[candidate + 1]
        columns, weights = matrix.indices[start:end], matrix.data[start:end]
        asked = np.fromiter(terms.keys(), dtype=np.int64, count=len(terms))
        query_weights = np.fromiter(terms.values(), dtype=np.float64, count=len(terms))
        order = np.argsort(asked)
        asked, query_weights = asked[order], query_weights[order]
        found = np.minimum(np.searchsorted(asked, columns), len(asked) - 1)  # each row term's place among the asked
        shared = asked[found] == columns
        columns, weights = columns[shared], weights[shared]
        contributions = query_weights[found[shared]] * weights
        names = self._term_names
        shown: list[str] = []
        for t in columns[np.lexsort((-columns, -contributions))].tolist():
            if not _is_fragment(names[t]):
                shown.append(names[t])
                if len(shown) == EXPLAIN_TERMS:
                    break
        return shown

    # ---- dense ------------------------------------------------------------------
    @cached_property
    def _layout(self) -> tuple[np.ndarray, np.ndarray]:
        """The chunk positions of the kept passages, incident by incident, and the first of each incident."""
        return self._artefact.kept, self._artefact.starts

    @cached_property
    def _passages(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Kept passage vectors (a copy: the exact path only), their chunk positions, and the first of each incident."""
        order, starts = self._layout
        _, chunk_to_row = self.engine._row_maps
        vectors = self.engine.dense.vectors[chunk_to_row[order]] if len(order) else np.zeros((0, 1), dtype=np.float32)
        return np.ascontiguousarray(vectors, dtype=np.float32), order, starts

    @cached_property
    def uses_candidates(self) -> bool:
        """Whether ``rank`` takes the candidate path: at least ``candidate_threshold`` kept passages, no neighbourhood."""
        return self.neighbours == 0 and len(self._layout[0]) >= self.candidate_threshold

    @cached_property
    def _rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The dense index row of each kept passage; and the incident of each index row (−1: not a kept passage)."""
        order, starts = self._layout
        _, chunk_to_row = self.engine._row_maps
        rows = chunk_to_row[order]
        incident_of = np.full(len(self.engine.dense.index), -1, dtype=np.int64)
        incident_of[rows] = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(order))))
        return rows, incident_of

    def _segments(self, incidents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions in the kept-passage layout of ``incidents``' passages (in the given order), and each one's first."""
        order, starts = self._layout
        ends = np.append(starts[1:], len(order))[incidents]
        counts = ends - starts[incidents]
        local = np.zeros(len(incidents), dtype=np.int64)
        np.cumsum(counts[:-1], out=local[1:])
        flat = np.repeat(starts[incidents] - local, counts) + np.arange(int(counts.sum()))
        return flat, local

    def _dense_on(self, passages: np.ndarray, incidents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``D(q, c)`` and the best chunk for ``incidents`` only, from their rows of the dense index."""
        order, _ = self._layout
        rows, _ = self._rows
        flat, local = self._segments(incidents)
        if not len(incidents):
            return np.zeros(0), np.zeros(0, dtype=np.int64)
        scores, best = _segment_dense(passages, self.engine.dense.index.rows(rows[flat]), local)
        return scores, order[flat[best]]

    @cached_property
    def _sample(self) -> np.ndarray:
        """The incidents (positions, ascending) that estimate the dense mean and deviation: a fixed seeded sample."""
        n, size = len(self.ids), min(self.pools.sample, len(self.ids))
        if size >= n:
            return np.arange(n)
        return np.sort(np.random.default_rng(SAMPLE_SEED).choice(n, size, replace=False))

    @cached_property
    def _sample_vectors(self) -> tuple[np.ndarray, np.ndarray]:
        """The sample's passage vectors (bounded by the sample size, not the library) and each incident's first."""
        rows, _ = self._rows
        flat, local = self._segments(self._sample)
        return self.engine.dense.index.rows(rows[flat]), local

    @cached_property
    def _live_share(self) -> float:
        """The share of the dense index's rows that are live: an HNSW graph or inverted file extended after edits keeps
        the old rows dead (at most a quarter, :data:`.store.MAX_DEAD_SHARE`), and they fill fetched places."""
        row_to_chunk, _ = self.engine._row_maps
        return max(int(np.count_nonzero(row_to_chunk >= 0)), 1) / max(len(row_to_chunk), 1)

    def _dense_pool(self, passages: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """The dense candidates: incidents of the query passages' nearest passages, best :data:`DENSE_POOL` by ``D̃``
        (the hits asked for grown by the dead rows' share, so as many live ones come back as from a clean index)."""
        size, hits = self.pools.dense, self.pools.dense_hits
        if size == 0 or hits == 0 or not len(passages):
            return np.zeros(0, dtype=np.int64)
        hits = math.ceil(hits / self._live_share)
        index = self.engine.dense.index
        if isinstance(index, CodeSearch):  # by the codes, fewer lists: every pool member is scored again exactly
            found, rows = index.search_codes_batch(passages, hits, nprobe=max(1, math.ceil(index.nprobe * self.pools.probe_share)))
        else:
            found, rows = index.search_batch(passages, hits)
        _, incident_of = self._rows
        queries = len(passages)
        query_of = np.repeat(np.arange(queries), rows.shape[1])
        rows, found = rows.ravel(), found.ravel()
        incident = np.where(rows >= 0, incident_of[np.maximum(rows, 0)], -1)
        valid = incident >= 0
        valid[valid] = mask[incident[valid]]
        key, found = incident[valid] * queries + query_of[valid], found[valid]
        best_first = np.lexsort((-found, key))
        key, found = key[best_first], found[best_first]
        first = np.ones(len(key), dtype=bool)
        first[1:] = key[1:] != key[:-1]  # the best hit of each (incident, query passage)
        incidents, inverse = np.unique(key[first] // queries, return_inverse=True)
        estimate = np.bincount(inverse, weights=found[first].astype(np.float64)) / queries
        if len(incidents) > size:
            incidents = incidents[np.argpartition(-estimate, size - 1)[:size]]
        return np.asarray(incidents, dtype=np.int64)

    def incident_passages(self, incident_id: str) -> np.ndarray:
        if self.uses_candidates:  # from the index, never the copy of every passage
            flat, _ = self._segments(np.array([self.position[incident_id]]))
            return self.engine.dense.index.rows(self._rows[0][flat])
        vectors, _, starts = self._passages
        i = self.position[incident_id]
        end = starts[i + 1] if i + 1 < len(starts) else len(vectors)
        return vectors[starts[i] : end]

    def text_passages(self, text: str) -> np.ndarray:
        """The vectors of pasted text's passages (:func:`.chunks.pasted_passages`), boilerplate removed."""
        return self.engine.embedder.encode_documents(pasted_passages(text, self.boilerplate.strip))

    @cached_property
    def _has_passages(self) -> np.ndarray:
        """Whether each incident has a kept passage (every incident with a text does)."""
        order, starts = self._layout
        return np.append(starts[1:], len(order)) > starts

    def _dense_scores(self, passages: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per incident: mean over query passages of the best candidate passage; and that passage's chunk.  An
        incident without a passage scores the lowest cosine, -1, and no chunk (-1); :meth:`rank` never returns it."""
        vectors, order, starts = self._passages
        filled = self._has_passages
        scores = np.full(len(starts), -1.0, dtype=np.float32)
        chunks = np.full(len(starts), -1, dtype=np.int64)
        if filled.any():
            similarity = passages @ vectors.T  # (query passages × kept passages)
            # the filled incidents' starts: each segment between two of them is one incident's passages
            best_per_query = np.maximum.reduceat(similarity, starts[filled], axis=1)  # (query passages × incidents)
            scores[filled] = best_per_query.mean(axis=0)
            coverage = similarity.max(axis=0)  # how well each candidate passage answers some query passage
            chunks[filled] = order[first_argmax(coverage, starts[filled])]
        return scores, chunks

    # ---- graph ------------------------------------------------------------------
    @cached_property
    def _concepts(self) -> tuple[list[dict[str, float]], list[set[str]]]:
        """Each incident's weighted concepts (curated 1, inferred their confidence) and its inferred concepts."""
        weighted: list[dict[str, float]] = []
        inferred: list[set[str]] = []
        for incident in each_record(self.data.incidents):  # one pass that keeps no record
            weighted.append(incident.weighted_concepts())
            inferred.append({link.concept for link in incident.proposed()})
        return weighted, inferred

    def _shared(self, query: Query, position: int) -> tuple[dict[str, bool], dict[str, bool]]:
        """The concepts the query and an incident both hold (each: inferred on either side), and the broader concepts
        they share only through narrower ones, the narrowest of those (each: inferred when a link under it is)."""
        weighted, inferred = self._concepts
        held = weighted[position]
        shared = {c: (c in query.inferred or c in inferred[position]) for c in query.concepts if c in held}
        ancestors = self.data.vocab.ancestors

        def under(concepts: Iterable[str]) -> dict[str, set[str]]:  # each concept of the closure -> those at or under it
            found: dict[str, set[str]] = {}
            for concept in concepts:
                for reached in (concept, *ancestors(concept)):
                    found.setdefault(reached, set()).add(concept)
            return found

        mine, theirs = under(query.concepts), under(held)
        covered = {a for c in shared for a in ancestors(c)}  # what a concept shared as itself already explains
        common = {a for a in mine.keys() & theirs.keys() if a not in shared and a not in covered}
        narrowest = {a for a in common if not any(a in ancestors(b) for b in common if b != a)}
        broader = {a: any(c in query.inferred for c in mine[a]) or any(c in inferred[position] for c in theirs[a])
                   for a in sorted(narrowest)}
        return shared, broader

    @cached_property
    def _concept_spaces(self) -> tuple[ConceptSpace, ConceptSpace]:
        """The graph evidence's space and the cause evidence's (the incidents' cause concepts alone, module docstring),
        from one pass over every incident's concepts closed over the broader ones (at a million incidents the two
        passes it replaces took about a third of a restarted server's warming)."""
        vocab = self.data.vocab

        def is_cause(concept_id: str) -> bool:
            concept = vocab.get(concept_id)
            return concept is not None and concept.kind is ConceptKind.cause

        closed = ClosedConcepts.of(self._concepts[0], broader=vocab.ancestors)
        return ConceptSpace.of_closed(closed), ConceptSpace.of_closed(closed, keep=is_cause)

    @property
    def _graph_space(self) -> ConceptSpace:
        return self._concept_spaces[0]

    @property
    def _cause_space(self) -> ConceptSpace:
        return self._concept_spaces[1]

    def _graph_scores(self, concepts: dict[str, float]) -> np.ndarray:
        scores = self._graph_space.scores(concepts)
        return np.zeros(len(self.ids)) if scores is None else scores

    def _graph_column(self, concepts: dict[str, float]) -> np.ndarray:
        """``G(q, c)`` for every incident from the query concepts' columns only."""
        column = self._graph_space.column(concepts)
        return np.zeros(len(self.ids)) if column is None else column

    # ---- queries ----------------------------------------------------------------
    def incident_query(self, incident: Incident) -> Query:
        """The query of a record; on the candidate path, a record of the library takes its lexical vector from
        the saved term counts (the same terms and counts as tokenizing its text)."""
        _ = self._artefact  # first, outside the class-wide locks of the cached parts below that read it (a build is long)
        position = self.position.get(incident.id)
        stored = self.uses_candidates and position is not None and self.data.incidents.get(incident.id) is incident
        return Query(
            terms=self._stored_terms(position) if stored and position is not None else self.lexical_query(incident_text(incident)),
            passages=self.incident_passages(incident.id),
            concepts=incident.weighted_concepts(),
            inferred=frozenset(link.concept for link in incident.proposed()),
            exclude=incident.id,
        )

    def text_query(self, text: str, concepts: dict[str, float], inferred: set[str]) -> Query:
        _ = self._artefact  # first: as in incident_query
        return Query(terms=self.lexical_query(text), passages=self.text_passages(text), concepts=concepts, inferred=frozenset(inferred))

    def _columns(self, query: Query) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Every evidence the query has, per incident; and each incident's best-matching chunk."""
        dense, best_chunk = self._dense_scores(query.passages)
        columns: dict[str, np.ndarray] = {"dense": dense}
        if query.terms:
            columns["lexical"] = self._lexical_scores(query.terms)
        if query.concepts:
            columns["graph"] = self._graph_scores(query.concepts)
            cause = self._cause_space.scores(query.concepts)
            if cause is not None:
                columns["cause"] = cause
        return columns, best_chunk

    @cached_property
    def weights(self) -> dict[str, float]:
        """The fusion weight of each evidence kind on this collection (see the module docstring).  The cause evidence
        reads the same concept links as the graph evidence, so their errors are not independent, as the one-factor
        model assumes (two kinds of one source agree whether or not they are right): the model is fitted on
        :data:`FACTOR_KINDS` and the cause evidence takes the graph's weight."""
        equal = dict.fromkeys(EVIDENCE_KINDS, 1.0)
        if self.weighting == "equal" or len(self.ids) < 3:
            return equal
        step = max(1, math.ceil(len(self.ids) / RELIABILITY_QUERIES))
        samples: list[np.ndarray] = []
        for incident_id in self.ids[::step]:
            query = self.incident_query(self.data.incidents[incident_id])
            columns, _ = self._columns(query)
            if any(kind not in columns for kind in FACTOR_KINDS):
                continue
            others = np.ones(len(self.ids), dtype=bool)
            others[self.position[incident_id]] = False
            samples.append(np.column_stack([columns[kind][others] for kind in FACTOR_KINDS]))
        loadings = evidence_loadings(samples)
        if loadings is None:
            return equal
        weights = dict(zip(FACTOR_KINDS, factor_score_weights(loadings), strict=True))
        return weights | {"cause": weights["graph"]}

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
    def _nearest_graph(self) -> tuple[np.ndarray, np.ndarray]:
        """(incidents × pool) each incident's nearest other incidents by the fused evidence, best first,
        and their fused scores.

        Computed once per index: every incident is ranked against all the others as a query."""
        n = len(self.ids)
        pool = min(NEIGHBOUR_POOL, max(n - 1, 0))
        nearest = np.zeros((n, pool), dtype=np.int64)
        scores = np.zeros((n, pool), dtype=np.float64)
        everyone = np.arange(n)
        for i, incident_id in enumerate(self.ids):
            others = everyone[everyone != i]
            columns, _ = self._columns(self.incident_query(self.data.incidents[incident_id]))
            fused, _ = self._fuse(columns, others)
            nearest[i] = others[np.argsort(-fused[others], kind="stable")[:pool]]
            scores[i] = fused[nearest[i]]
        return nearest, scores

    @property
    def nearest(self) -> np.ndarray:
        """(incidents × pool): each incident's nearest other incidents by the fused evidence, best first."""
        return self._nearest_graph[0]

    @cached_property
    def elbow_sizes(self) -> np.ndarray:
        """Per incident, how many of its nearest form its neighbourhood under the ``"elbow"`` rule:
        those before the largest drop of its fused scores (see :func:`elbow_sizes`)."""
        return elbow_sizes(self._nearest_graph[1])

    def _neighbourhood(self, fused: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``s'`` of the module docstring for every incident, and the neighbours used (−1 pads)."""
        if self.neighbours == 0 or len(self.ids) < 2:
            return fused, np.full((len(self.ids), 0), -1, dtype=np.int64)
        nearest = self.nearest
        usable = mask[nearest]
        if self.neighbours == ELBOW:
            # the incident's own neighbourhood, decided over the whole collection; filtered-out ones drop out of it
            usable &= np.arange(nearest.shape[1])[None, :] < self.elbow_sizes[:, None]
        else:
            usable &= np.cumsum(usable, axis=1) <= int(self.neighbours)  # the first ``neighbours`` that are candidates
        total = fused + np.where(usable, fused[nearest], 0.0).sum(axis=1)
        count = usable.sum(axis=1)
        if self.mix == BALANCED:
            neighbourhood_mean = (total - fused) / np.maximum(count, 1)
            smoothed = np.where(count > 0, 0.5 * fused + 0.5 * neighbourhood_mean, fused)
        else:
            smoothed = total / (1 + count)
        chosen = np.where(usable, nearest, -1)
        return smoothed, chosen

    def rank(self, query: Query, k: int, allowed: set[str] | None = None) -> list[Evidence]:
        """The ``k`` best candidates by fused, standardised evidence, averaged over each candidate's
        neighbourhood (see the module docstring)."""
        # an incident without a passage (every text blank, stored before the write rules refused that) has nothing
        # to compare or show: it is never a result, and the others are ranked as without it
        mask = self._has_passages.copy()
        if allowed is not None:
            mask &= np.array([i in allowed for i in self.ids], dtype=bool)
        if query.exclude is not None and query.exclude in self.position:
            mask[self.position[query.exclude]] = False
        if self.uses_candidates:
            with one_blas_thread():
                return self._rank_candidates(query, k, mask, restricted=allowed is not None)
        candidates = np.flatnonzero(mask)
        if not len(candidates):
            return []
        columns, best_chunk = self._columns(query)
        dense = columns["dense"]
        own, ranks = self._fuse(columns, candidates)
        fused, chosen = self._neighbourhood(own, mask)
        order = top_by_score_then_id(fused, candidates, self._id_array, k)
        results = []
        for i in order:
            shared, broader = self._shared(query, int(i))
            near = sorted((int(j) for j in chosen[i] if j >= 0 and own[j] > own[i]), key=lambda j: -own[j])
            results.append(Evidence(
                incident_id=self.ids[i], score=float(fused[i]),
                lexical=float(columns["lexical"][i]) if "lexical" in columns else None,
                dense=float(dense[i]), graph=float(columns["graph"][i]) if "graph" in columns else None,
                cause=float(columns["cause"][i]) if "cause" in columns else None,
                chunk=int(best_chunk[i]), terms=self._terms_explained(query.terms, int(i)), shared=shared, broader=broader,
                ranks={name: int(r[i]) for name, r in ranks.items()},
                neighbours=[self.ids[j] for j in near[:EXPLAIN_NEIGHBOURS]],
            ))
        return results


    # ---- candidate path ---------------------------------------------------------
    def _rank_candidates(self, query: Query, k: int, mask: np.ndarray, restricted: bool) -> list[Evidence]:
        """``rank`` by candidates then exact evidence (the module docstring's candidate path)."""
        allowed_count = int(mask.sum())
        if not allowed_count:
            return []
        exclude = self.position.get(query.exclude) if query.exclude is not None else None
        pools = self.pools
        exhaustive = allowed_count <= pools.exhaustive
        graph = self._graph_column(query.concepts) if query.concepts else None
        cause = self._cause_space.column(query.concepts) if query.concepts else None
        # A filter's mean and deviation are over its incidents only: the saved column sums do not give them.
        pruned = bool(query.terms) and pools.prune_lexical and not restricted and not exhaustive
        full_lexical = self._lexical_column(query.terms) if query.terms and not pruned else None
        lexical: LexicalTop | None = None
        weighted_query = self._weighted_query(query.terms) if pruned else None
        if exhaustive:
            pool = np.flatnonzero(mask)  # a filter left few enough incidents to score them all
        else:
            parts = [self._dense_pool(query.passages, mask)]
            if graph is not None:
                parts.append(_top_positive(graph, mask, pools.graph))
            if cause is not None:
                parts.append(_top_positive(cause, mask, pools.graph))
            if full_lexical is not None:
                parts.append(_top_positive(full_lexical, mask, pools.lexical))
            elif weighted_query is not None:
                lexical = lexical_top(weighted_query, self._artefact.matrix, self._lexical_columns,
                                      self._term_bounds, mask, exclude, np.concatenate(parts), self._sample,
                                      pools.lexical, pools.lexical_rescore)
                parts.append(lexical.pool)
            pool = np.unique(np.concatenate(parts))
        if not len(pool):
            return []
        complete = len(pool) == allowed_count
        dense, best_chunk = self._dense_on(query.passages, pool)
        columns = {"dense": dense}
        stats = {"dense": _mean_std(dense) if complete else self._dense_stats(query.passages, mask, dense)}
        full = {name: values for name, values in (("lexical", full_lexical), ("graph", graph), ("cause", cause))
                if values is not None}
        if lexical is not None and weighted_query is not None:
            known = scores_of(lexical, pool)  # the pool is the seeds and the lexical pool: all scored already
            columns["lexical"] = known if known is not None else weighted_query.score_rows(self._artefact.matrix, pool)
            stats["lexical"] = _mean_std(columns["lexical"]) if complete else (lexical.mean, lexical.std)
        for name, values in full.items():
            columns[name] = values[pool]
            stats[name] = _mean_std(columns[name]) if complete else _column_stats(values, mask, exclude, restricted)
        weights = self.weights
        fused = np.zeros(len(pool))
        used = 0.0
        ranks: dict[str, np.ndarray] = {}
        for name in [kind for kind in ("dense", "lexical", "graph", "cause") if kind in columns]:  # the order they are summed in
            values = columns[name]
            rank = np.zeros(len(pool), dtype=np.int64)
            rank[np.argsort(-values, kind="stable")] = np.arange(1, len(pool) + 1)
            ranks[name] = rank
            mean, std = stats[name]
            if std < STD_FLOOR:
                continue
            fused += weights[name] * (values - mean) / std
            used += weights[name]
        fused /= used if used > 0 else 1.0
        results = []
        for j in top_by_score_then_id(fused, np.arange(len(pool)), self._id_array[pool], k):
            i = int(pool[j])
            shared, broader = self._shared(query, i)
            results.append(Evidence(
                incident_id=self.ids[i], score=float(fused[j]),
                lexical=float(columns["lexical"][j]) if "lexical" in columns else None,
                dense=float(dense[j]), graph=float(columns["graph"][j]) if "graph" in columns else None,
                cause=float(columns["cause"][j]) if "cause" in columns else None,
                chunk=int(best_chunk[j]), terms=self._terms_explained(query.terms, i),
                shared=shared, broader=broader,
                ranks={name: int(r[j]) for name, r in ranks.items()},
            ))
        return results

    def _dense_stats(self, passages: np.ndarray, mask: np.ndarray, pool_values: np.ndarray) -> tuple[float, float]:
        """``μ̂, σ̂`` of ``D(q, ·)`` over the allowed incidents of the fixed sample (the pool's when fewer than two)."""
        keep = mask[self._sample]
        if keep.sum() < 2:
            return _mean_std(pool_values)
        vectors, local = self._sample_vectors
        return _mean_std(_segment_scores(passages @ vectors.T, local)[keep])


def _segment_dense(passages: np.ndarray, vectors: np.ndarray, local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``D(q, c)`` per segment of ``vectors`` (segment ``c`` starts at ``local[c]``), and the position of each
    segment's passage that best answers some query passage."""
    similarity = passages @ vectors.T
    return _segment_scores(similarity, local), first_argmax(similarity.max(axis=0), local)


def _segment_scores(similarity: np.ndarray, local: np.ndarray) -> np.ndarray:
    """``mean_i max_{j ∈ segment c} similarity[i, j]`` per segment ``c`` (starting at ``local[c]``)."""
    scores: np.ndarray = np.maximum.reduceat(similarity, local, axis=1).mean(axis=0)
    return scores


class _CountedStream:
    """One pass over ``size`` texts with the ``len`` :class:`.boilerplate.Boilerplate` reads: the boilerplate module
    stays as it is, and with it (its source is part of the key) every artefact saved before stays valid."""

    def __init__(self, texts: Iterable[str], size: int) -> None:
        self.texts, self.size = texts, size

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[str]:
        return iter(self.texts)


def _reported(items: Iterable[T], progress: BuildProgress | None, step: str, total: int) -> Iterator[T]:
    """``items`` unchanged, telling ``progress(step, done, total)`` every :data:`PROGRESS_EVERY` items and at the end."""
    done = 0
    for item in items:
        yield item
        done += 1
        if progress is not None and done % PROGRESS_EVERY == 0:
            progress(step, done, total)
    if progress is not None:
        progress(step, done, total)


def _joined(rows: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The term ids and counts of consecutive records' rows as two int32 arrays."""
    return (np.concatenate([terms for terms, _ in rows]).astype(np.int32),
            np.concatenate([counts for _, counts in rows]).astype(np.int32))


def _mean_std(values: np.ndarray) -> tuple[float, float]:
    return (float(values.mean()), float(values.std())) if len(values) else (0.0, 0.0)


def _column_stats(values: np.ndarray, mask: np.ndarray, exclude: int | None, restricted: bool) -> tuple[float, float]:
    """Mean and standard deviation of ``values`` over the candidates: all incidents but ``exclude`` unless
    ``restricted`` by a filter (then over ``mask``).  Two passes, no copy of the column when unrestricted."""
    if restricted:
        return _mean_std(values[mask])
    n = len(values) - (exclude is not None)
    if n <= 0:
        return 0.0, 0.0
    left_out = float(values[exclude]) if exclude is not None else 0.0
    mean = (float(values.sum()) - left_out) / n
    deviation = values - mean
    squares = float(deviation @ deviation) - ((left_out - mean) ** 2 if exclude is not None else 0.0)
    return mean, math.sqrt(max(squares / n, 0.0))


def _top_positive(values: np.ndarray, mask: np.ndarray, size: int) -> np.ndarray:
    """Up to ``size`` allowed positions with the largest positive ``values`` (any order)."""
    hits = np.flatnonzero(mask & (values > 0))
    if size <= 0:
        return hits[:0]
    if len(hits) > size:
        hits = hits[np.argpartition(-values[hits], size - 1)[:size]]
    return hits


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


def elbow_sizes(scores: np.ndarray) -> np.ndarray:
    """Per row of ``scores`` (each row sorted best first), the number of leading values before the
    largest drop between consecutive values: ``1 + argmax_i (s_i − s_{i+1})``, the first on ties;
    1 for a row of one value, 0 for an empty row.

    The neighbourhood is the group that stands out from the rest of the collection for this incident:
    a tight group of alike incidents ends where the scores fall most, and an incident with no
    group keeps only its nearest.  No size is fixed in advance, and the rule reads the scores'
    shape only, so it does not change when the scores are shifted or scaled."""
    rows, pool = scores.shape
    if pool == 0:
        return np.zeros(rows, dtype=np.int64)
    if pool == 1:
        return np.ones(rows, dtype=np.int64)
    drops = scores[:, :-1] - scores[:, 1:]
    sizes: np.ndarray = np.argmax(drops, axis=1).astype(np.int64) + 1
    return sizes


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
    if not standardised or standardised[0].shape[1] < MIN_FACTOR_KINDS:
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
