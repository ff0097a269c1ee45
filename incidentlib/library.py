"""The :class:`Library` facade: the one way in for the CLI, the HTTP API and MCP.

It loads and validates a library directory once, then answers questions about
it. Expensive structures (the RDF graph, the NetworkX projection, the search
indexes, the analysis) are built on first use and kept private.

The adapters import only this module, :mod:`incidentlib.errors`, :mod:`incidentlib.requests`
and :mod:`incidentlib.views`; the few enums and helpers they need are re-exported here.
"""

from __future__ import annotations

import difflib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from .embeddings import DEFAULT_BACKEND, Embedder, EmbedderConfig
from .errors import (
    FilterError,
    ImportInterrupted,
    IncidentNotFound,
    InvalidRequest,
    NotFound,
    TaggerNotReady,
    UnknownNodeError,
    ValidationFailed,
)
from .facets import Facets, incident_values, passes
from .gc_pause import built_for_process_lifetime, release_frozen
from .graph.export import MEDIA_TYPES, ExportFormat, export_graphml, export_jsonl, export_rdf
from .graph.knowledge import KnowledgeGraph
from .graph.store import (
    PATCH_MAX_INCIDENTS,
    GraphStore,
    GraphStoreConfig,
    StoreKind,
    open_store,
    parse_graph_store,
    read_graph,
)
from .loader import INCIDENTS_DIR, LibraryData, Problem, check_incident, check_library, each_record, load_library
from .models import LANGS, Concept, ConceptKind, Incident, InferredLink, padded_incident_id
from .paths import CACHE_ENV, DATA_ENV, default_cache_dir, resolve_data_dir
from .record_yaml import as_stored, incident_yaml
from .requests import CONCEPT_FILTERS, IncidentFilter, SearchModeName, check_k, check_lang, format_of_name
from .search.backend import BACKEND_ENV as SEARCH_BACKEND_ENV
from .search.backend import BACKEND_OPTION as SEARCH_BACKEND_OPTION
from .search.backend import parse_search_backend
from .search.chunks import ChunkMemo
from .search.concepts import ConceptRecognizer
from .search.dense import ProgressFn
from .search.engine import IndexStats, SearchConfig, SearchEngine, SearchMode
from .search.fusion import FusionMethod
from .search.layered import DenseSnapshot
from .search.lexical import Postings
from .search.service import SearchService
from .search.store import RESUME_SEGMENT, BuildReport
from .storage import atomic_write_bytes, atomic_write_text
from .store import STORE_FILE, OverlayStore
from .store.auth import ROLES, TokenInfo, TokenStore
from .store.live import Doc, Writer, dump, etag, json_patch, merged, patched
from .tagging.tagger import ConceptTagger
from .views import (
    AlertsAnswer,
    ClusterSet,
    ClusterView,
    CompactReport,
    CreatedToken,
    Diagnosis,
    ExportReport,
    GraphPath,
    HistoryEntry,
    HistoryPage,
    IncidentDetail,
    IncidentPage,
    InferredView,
    MapPoint,
    NodeLinkGraph,
    OrganizationList,
    OrganizationSummary,
    RagPassage,
    RelatedItem,
    ReviewResult,
    SearchResponse,
    SeriesDiagnosis,
    SignalExplanation,
    SignalMatch,
    SignalView,
    SourceView,
    SparqlResult,
    StoredRecord,
    TagResult,
    TokenView,
    TopicList,
    TopicPage,
    TopicSummary,
    VocabConcept,
    VocabResponse,
    WatchAnswer,
)
from .vocab import Vocabulary

if TYPE_CHECKING:
    from rdflib import Graph

    from .analysis import Analysis, ClusterMethod
    from .analysis.families import CompiledFamily
    from .analysis.tables import ShapeTable, SignalTable
    from .evaluation import EvalQuery, EvalReport
    from .importing import ImportOptions, ImportReport
    from .similar_eval import SimilarEvalReport
    from .tagging.signals import SignalConcepts

#: Kinds listed as "topics" (organizations have their own listing).
TOPIC_KINDS = (ConceptKind.component, ConceptKind.cause, ConceptKind.symptom, ConceptKind.tag)
DEFAULT_EMBEDDER = DEFAULT_BACKEND
# How often a serving process looks for changes committed by any process (one indexed SQLite read);
# a tenth of the 1 s write-to-searchable budget, leaving the rest for the index rebuild.
FOLLOW_INTERVAL_S = 0.1
# Seconds without a change after which a serving process compacts (see Library.compact): long enough that a
# burst of writes is carried write by write rather than compacted between two of them, short enough that a
# restart or another process soon finds a clean index on disk. Chosen by that argument, not tuned.
COMPACT_AFTER_IDLE_S = 5.0
# Seconds between two tries to bring a graph store along after a try failed (a SPARQL endpoint down, an I/O error):
# requests look for changes many times a second, and each try against a server that does not answer costs its
# timeout; searches do not need the store and go on meanwhile.
GRAPH_RETRY_S = 5.0
#: How long a server request that needs the concept tagger waits for the background preparation before it is refused
#: (expect_background_tagger): long enough for a tagger loaded from its cache a moment after start, short enough
#: that requests waiting for a first fit (minutes) do not hold the heavy routes' slots.
TAGGER_WAIT_SECONDS = 2.0
#: Retry-After of that refusal: a tagger loaded from its cache is ready within seconds; a first fit takes minutes,
#: and a client retrying every 10 s costs nothing.
TAGGER_RETRY_AFTER_SECONDS = 10

logger = logging.getLogger(__name__)
assert set(get_args(SearchModeName)) == {m.value for m in SearchMode}

#: Records read by the concept tagger per call in :meth:`Library.tag`: each call reports progress, and the classifier
#: scores a call's records in one matrix product rather than one product per record.
TAG_BATCH = 256
#: The steps :meth:`Library.tag` reports, in order: the classifier's fit (instant once cached), reading the records, storing.
TAG_STEPS = ("learning from the curated records", "reading the records", "storing the links")
#: Live-write steps remembered for patching the facet columns (:meth:`Library._carry_facets`): far more than the writes
#: that land during one first read of the columns; a chain longer than this reads the columns again instead.
FACET_STEPS_KEPT = 256


class Library:
    """A loaded, validated incident library."""

    def __init__(self, data: LibraryData, search_config: SearchConfig | None = None,
                 embedder: Embedder | None = None, graph_store: GraphStoreConfig | None = None) -> None:
        """Wrap loaded ``data``; ``embedder`` replaces the one ``search_config`` names (any :class:`Embedder`);
        ``graph_store`` says where the RDF lives (default: the in-process rdflib graph)."""
        self.data = data
        self.search_config = search_config or SearchConfig()
        self._embedder = embedder
        self.graph_config = graph_store or GraphStoreConfig()
        self._base_data = data
        self._store = OverlayStore.for_library(data.root)
        self._writer = Writer(self._store, lambda: self._base_data)
        self._tokens = TokenStore(self._store)
        self._seq = 0
        self._refresh_lock = threading.Lock()
        # held by background fits (numpy/BLAS in another thread): a fork taken meanwhile can deadlock
        # (OpenBLAS's at-fork handler waits for worker threads the fitting thread holds); see forking()
        self._background = threading.Lock()
        self._recognizer: ConceptRecognizer | None = None
        # texts and BM25 postings of the last engine a refresh dropped: the next one updates them, not rebuilds
        self._lexical_carry: tuple[Sequence[str], Postings] | None = None
        # the dense index of the engine a refresh dropped: the next engine carries it (search.layered)
        self._dense_carry: DenseSnapshot | None = None
        # each incident's chunks, reused by the next engine for the incidents a change left alone
        self._chunk_memo: ChunkMemo = {}
        self._compaction: threading.Thread | None = None
        self._graph_ready = threading.Event()  # set by prepare_graph (see graph_ready)
        self._tagger_ready = threading.Event()  # set by prepare_tagger (see tagger_ready)
        self._tagger_in_background = threading.Event()  # a server prepares it (see expect_background_tagger)
        self._facets_of: tuple[str, Facets] | None = None  # the content hash of the data they are for, and they (see _facets)
        # each live write's step: the content hash before -> (the one after, the incidents it changed); see _carry_facets
        self._facet_steps: dict[str, tuple[str, frozenset[str]]] = {}
        self._facets_lock = threading.Lock()
        self._snapshot_saved: str | None = None
        # the records the open graph store holds (see _graph_store_current); None when unknown (a sync failed)
        self._graph_store_data: LibraryData | None = None
        self._graph_retry_at = 0.0
        if self._store.exists:
            self.refresh()

    @classmethod
    def open(
        cls,
        data_dir: str | Path | None = None,
        search_config: SearchConfig | None = None,
        *,
        embedder: str | None = None,
        cache_dir: Path | None = None,
        fusion: FusionMethod | str | None = None,
        graph_store: str | GraphStoreConfig | None = None,
        search_backend: str | None = None,
    ) -> Library:
        """Open ``data_dir``, ``$INCIDENTLIB_DATA`` or the bundled library.

        ``embedder``, ``cache_dir`` and ``fusion`` build the search configuration when
        ``search_config`` is not given; ``graph_store`` is ``memory``, ``oxigraph:PATH`` or a
        SPARQL endpoint URL (see :mod:`incidentlib.graph.store`); ``search_backend`` is where ranking runs,
        ``local`` (default), ``milvus:PATH.db`` or ``milvus:http(s)://HOST:PORT`` (see
        :mod:`incidentlib.search.backend`); a bad value is an :class:`InvalidRequest`.
        """
        if search_config is None:
            search_config = cls.search_settings(embedder=embedder, cache_dir=cache_dir, fusion=fusion, backend=search_backend)
        elif search_backend is not None:
            search_config = search_config.model_copy(update={"backend": parse_search_backend(search_backend)})
        graph_config = graph_store if isinstance(graph_store, GraphStoreConfig) else parse_graph_store(graph_store)
        cache = search_config.cache_dir or default_cache_dir()  # the parsed YAML is kept beside the indexes
        return cls(load_library(resolve_data_dir(data_dir), cache), search_config, graph_store=graph_config)

    @staticmethod
    def search_settings(embedder: str | None = None, cache_dir: Path | None = None,
                        fusion: FusionMethod | str | None = None, backend: str | None = None) -> SearchConfig:
        """A :class:`SearchConfig` from plain values; an unknown embedder, fusion or search backend is an
        :class:`InvalidRequest` (the backend's names ``--search-backend``)."""
        from pydantic import ValidationError

        ranking = parse_search_backend(backend)
        try:
            chosen = EmbedderConfig(backend=embedder or DEFAULT_BACKEND)
        except ValidationError as exc:  # its reason alone, not pydantic's report around it
            raise InvalidRequest("embedder: " + "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors()),
                                 parameter="embedder") from None
        try:
            method = FusionMethod(fusion) if fusion else None
        except ValueError:
            raise InvalidRequest(f"fusion: {fusion!r} is not one of {', '.join(m.value for m in FusionMethod)}",
                                 parameter="fusion") from None
        config = SearchConfig(embedder=chosen, cache_dir=cache_dir, backend=ranking)
        return config.model_copy(update={"fusion": method}) if method else config

    def with_embedder(self, embedder: str) -> Library:
        """The same loaded data searched with another embedder (same cache and fusion)."""
        config = self.search_config.model_copy(update={"embedder": EmbedderConfig(backend=embedder)})
        other = type(self)(self.data, config, graph_store=self.graph_config)
        if "_graph_store" in self.__dict__:  # an open store is shared: an embedded Oxigraph opens once per process
            other.__dict__["_graph_store"] = self._graph_store
        return other

    @staticmethod
    def check(data_dir: str | Path | None = None, strict: bool = False) -> tuple[Path, LibraryData | None, list[Problem]]:
        """Validate a library directory: its resolved root, the data when it loads, and every problem found.

        The loader's rules always apply (shape, vocabulary references, ids, dates), and the
        diagnosis tables are checked against the vocabulary.  With ``strict`` the editorial rules
        of :mod:`incidentlib.strict` apply too: title, summary and body in both languages, a
        non-empty symptom list, an explicit kind on every source, Korean particles attached to
        Latin words and digits, and no duplicate records (a shared source URL not acknowledged by
        a ``related`` link, or title+summary+body shingle Jaccard ≥ 0.9 in either language).
        """
        root = resolve_data_dir(data_dir)
        loaded, problems = check_library(root)
        if loaded is not None and not problems:
            problems = Library(loaded).table_problems()
        store = OverlayStore.for_library(root)
        if loaded is not None and store.exists:
            records = store.records()
            live = (set(loaded.incidents) | {r.id for r in records if not r.deleted}) - {r.id for r in records if r.deleted}
            for record in records:
                if not record.deleted:
                    problems.extend(check_incident(f"{STORE_FILE}#{record.id}", record.doc, live, loaded.vocab)[1])
            if not problems:
                loaded = merged(loaded, records, store.last_seq(), store.store_id())
        if strict and loaded is not None:
            from .strict import check_strict  # the strict rules are only needed here

            problems = [*problems, *check_strict(loaded)]
        return root, loaded, problems

    def table_problems(self) -> list[Problem]:
        """Problems in the diagnosis tables (data/diagnosis/*.yaml), checked against the vocabulary."""
        from .errors import TableError

        problems = []
        for table in ("shape_table", "signal_table"):
            try:
                getattr(self, table)
            except TableError as exc:
                problems.append(Problem(file=exc.where, message=exc.reason))
        return problems

    # ---- basics ----------------------------------------------------------
    @property
    def root(self) -> Path:
        """The library directory."""
        return self.data.root

    @property
    def vocab(self) -> Vocabulary:
        """The controlled vocabulary."""
        return self.data.vocab

    @property
    def embedder(self) -> str:
        """The embedder's name: the configured backend (e.g. ``use-m3``) or the given embedder's name."""
        return self._embedder.name if self._embedder is not None else self.search_config.embedder.backend

    def __len__(self) -> int:
        return len(self.data.incidents)

    def incidents(self) -> list[Incident]:
        """Every incident, in id order."""
        return list(self.data.incidents.values())

    def get(self, incident_id: str) -> Incident:
        """One incident by id (case and surrounding spaces ignored); :class:`IncidentNotFound` with close ids."""
        key = self._stored_id(incident_id)
        found = self.data.incidents.get(key)
        if found is None:
            raise IncidentNotFound(incident_id, difflib.get_close_matches(key, list(self.data.incidents), n=3))
        return found

    def _stored_id(self, incident_id: str) -> str:
        """The id an incident is stored under: case and surrounding spaces ignored, and a short ticket key read as
        the import that stored it read it (``OPS-87`` is ``OPS-0087``), for a record in view or only in the change
        log (a deleted or rejected one).  Anything else is returned as given, upper-cased, for the caller to refuse."""
        key = incident_id.strip().upper()
        if key in self.data.incidents:
            return key
        padded = padded_incident_id(key)
        if padded is not None and padded != key and (padded in self.data.incidents or self._store.history(padded)):
            return padded
        return key

    # ---- graph (private) ---------------------------------------------------
    @cached_property
    def _graph_store(self) -> GraphStore:
        """The configured store, loaded with this library's RDF when it is empty or stale (``graph.store``)."""
        data = self.data  # a refresh may replace it while the store loads: _graph_store_current tells
        store = open_store(self.graph_config, data)
        self._graph_store_data = data
        return store

    def _sync_graph_store(self, previous: LibraryData | None = None, changed: set[str] | None = None) -> str:
        """After ``self.data`` changed from ``previous`` (only the ``changed`` incidents): bring an open graph store
        along (``graph.store.follow_change``): the changed incidents' triples are patched in, in process or in a
        persistent store; a store that holds other content, or a change without a known delta (``previous`` None,
        e.g. the YAML base changed), is reloaded whole (in process: dropped and rebuilt on use).  Of several
        replicas on one store the first to see a change applies it; the others find it ``"current"``.
        Returns what happened: ``"none"`` (no store open), ``"dropped"``, ``"current"``, ``"patched"`` or ``"loaded"``."""
        from .graph.store import ensure_loaded, follow_change
        from .graph.store_memory import MemoryStore

        self._carry_projection(self.__dict__.pop("_knowledge", None), previous, changed)
        store: GraphStore | None = self.__dict__.get("_graph_store")
        if store is None:
            self.__dict__.pop("_rdf", None)
            return "none"
        data = self.data
        if isinstance(store, MemoryStore):
            if previous is None or changed is None:
                for name in ("_graph_store", "_rdf"):
                    self.__dict__.pop(name, None)
                return "dropped"
            outcome = follow_change(store, previous, data, changed)  # in place: ``_rdf`` is this same graph
        else:
            self.__dict__.pop("_rdf", None)
            if previous is None or changed is None:
                outcome = "loaded" if ensure_loaded(store, data) else "current"
            else:
                outcome = follow_change(store, previous, data, changed)
        self._graph_store_data = data
        return outcome

    def _carry_projection(self, replaced: KnowledgeGraph | None, previous: LibraryData | None, changed: set[str] | None) -> None:
        """After a live write: the graph of the current data with the projection of ``replaced`` (the graph of
        ``previous``), if it was built, patched with the ``changed`` incidents
        (:func:`~incidentlib.graph.projection_patch.patched_projection`) instead of built again from every record."""
        if replaced is None or previous is None or changed is None or replaced.data is not previous:
            return
        projection = replaced.built_projection()
        if projection is None:
            return
        from .graph.projection_patch import patched_frequencies, patched_projection

        knowledge = KnowledgeGraph(self.data, replaced.store)  # what ``_knowledge`` makes, over the same store
        patched = patched_projection(projection, previous, self.data, changed)
        knowledge.use_projection(patched)
        frequencies = replaced.__dict__.get("document_frequency")  # related's concept weights, if it made them
        if frequencies is not None:
            knowledge.__dict__["document_frequency"] = patched_frequencies(frequencies, projection, patched, changed)
        self.__dict__["_knowledge"] = knowledge

    @cached_property
    def _knowledge(self) -> KnowledgeGraph:
        """Over a shared store the projection is read from the store; the in-process store holds exactly the
        triples ``self.data`` gives, so the projection is built from the records and the rdflib graph is only
        built when SPARQL or an export needs it (most of a short CLI call's time otherwise)."""
        if self.graph_config.kind is StoreKind.memory:
            return KnowledgeGraph(self.data)
        return KnowledgeGraph(self.data, self._graph_store)

    @cached_property
    def _rdf(self) -> Graph:
        return read_graph(self._graph_store)

    def warm(self) -> None:
        """Build now what the first requests would build: :meth:`warm_search`, :meth:`prepare_graph` and
        :meth:`prepare_sparql`.  The concept tagger is left to :meth:`prepare_tagger` (in the background: its
        first fit on a new library takes a while, and start-up should not wait for it)."""
        self.warm_search()
        self.prepare_graph()
        self.prepare_sparql()

    def warm_search(self, save_snapshot: bool = True) -> None:
        """Build now what a search needs: the concept recognizer, the BM25 index and what the embedder's queries
        need (the dense index is loaded by :meth:`build_index`).  A persistent graph store is opened here too (a hash check when current): the
        SPARQL hosts ``serve`` forks must inherit the open embedded store, which one process opens at a time.
        This is what ``serve`` waits for before it listens; the graph follows (:meth:`prepare_graph`).
        ``save_snapshot=False`` leaves the start snapshot to the caller: ``serve`` writes it after it listens."""
        self.open_graph_store()
        _ = self._search_service.recognizer, self._search_engine.lexical
        self._search_engine.prepare_embedder()
        if save_snapshot:
            self.save_start_snapshot()

    def save_start_snapshot(self) -> bool:
        """Keep this library's validated records and chunks for the next start (:mod:`incidentlib.start_snapshot`)
        when they came from the YAML files themselves (no live write applied), were not read from a snapshot, and
        every record has been chunked; True when a snapshot was written."""
        data = self.data
        if data.snapshot_key is None or data.chunks is not None or data is not self._base_data:
            return False
        if self._snapshot_saved == data.snapshot_key:
            return False
        # a copy (one C-level call): a live write may add to the memo while a server writes the snapshot
        chunks = {i: entry[2] for i, entry in list(self._chunk_memo.items())
                  if entry[0] is data.incidents.get(i) and entry[1] is data.vocab}
        if len(chunks) != len(data.incidents):
            return False
        from . import start_snapshot

        cache = self.search_config.cache_dir or default_cache_dir()
        written = start_snapshot.save(cache, data.snapshot_key, list(data.vocab), data.incidents, chunks)
        self._snapshot_saved = data.snapshot_key
        return written

    def prepare_graph(self) -> None:
        """Build the NetworkX projection (from the records, or read from a persistent store) and mark the graph
        ready (:attr:`graph_ready`).  ``serve`` runs it in a background thread once it listens; a request that
        needs the projection meanwhile waits for this build (``KnowledgeGraph.nx``), never sees half of it.
        Errors are logged, not raised: the request that needs the graph meets the error itself."""
        try:
            _ = self._knowledge.nx
        except Exception:  # a background warm-up must not take the process down
            logger.exception("prepare_graph: the graph projection could not be built")
        finally:
            self._graph_ready.set()

    def open_graph_store(self) -> None:
        """Open a persistent graph store now (a hash check when it is current), so that processes forked afterwards
        inherit the open store: an embedded store is opened by one process at a time.  The in-memory store is
        left to :meth:`prepare_sparql`."""
        if self.graph_config.kind is not StoreKind.memory:
            _ = self._graph_store

    def prepare_sparql(self) -> None:
        """Build (in memory) or open the graph store SPARQL runs on: in ``serve`` this runs in the process
        that forks the SPARQL hosts (``api.sparql_runner``), not in the one that answers searches."""
        _ = self._graph_store

    @property
    def graph_ready(self) -> bool:
        """True once :meth:`prepare_graph` has run in this process (graph requests no longer wait for it)."""
        return self._graph_ready.is_set()

    def graph_endpoint(self) -> tuple[str, int] | None:
        """Host and port of a remote graph store (the one address a confined SPARQL worker may reach), else None."""
        address: tuple[str, int] | None = getattr(self._graph_store, "address", None)
        return address

    @contextmanager
    def forking(self) -> Iterator[None]:
        """Hold off this library's background work while the caller forks processes from it.

        A thread inside numpy/BLAS during ``fork()`` can deadlock the fork (OpenBLAS's at-fork
        handler waits for its worker threads), so :meth:`prepare_tagger` runs under the same lock:
        a fork waits for a fit in progress to finish, and a fit waits for the forks."""
        with self._background:
            yield

    def prepare_similar(self, progress: Callable[[str, int, int], None] | None = None) -> str:
        """Load or build now what the first ``similar`` builds over every record (the similarity artefact, saved
        beside the index), telling ``progress(step, done, total)`` while building; ``"loaded"``, ``"built"``, or
        ``"unsaved"`` when it could not be saved (:meth:`.SimilarityIndex.prepare`)."""
        return self._search_service.similarity.prepare(progress)

    def warm_similar(self) -> None:
        """Load the saved similarity artefact, if there is one, and what a ``similar`` request then builds on first use,
        so that the first ``similar`` after a start does not wait for them; nothing is built when no artefact is saved
        (``incidentlib index --similar`` saves one).  ``serve`` runs this in the background.  Errors are logged, not
        raised: the request that needs the artefact will then meet the error itself."""
        try:
            service = self._search_service
            # the passes over the records (the artefact's key and checks, each record's concepts) first, without the
            # lock a stopping server waits for; then one query, whose numpy/BLAS threads a fork must wait for (forking())
            if service.similarity.warm() == "absent":
                return
            if self.__dict__.get("_search_service") is not service:  # a write replaced it meanwhile: not worth a query
                return
            with self._background:
                service.similarity.warm_query()
        except Exception:  # a background warm-up must not take the process down
            logger.exception("warm_similar: the similarity index could not be loaded")

    def expect_background_tagger(self) -> None:
        """Say that :meth:`prepare_tagger` will run in the background (``serve`` does, after its first answer).
        From now on a request that needs the tagger before it is ready waits at most ``TAGGER_WAIT_SECONDS`` and
        is then refused with :class:`TaggerNotReady` (HTTP 503 with Retry-After), instead of fitting it on a
        request thread: a fit takes minutes on a first start, and requests waiting for it would hold every slot of
        the heavy routes, searches included.  Without this call (the CLI) the first request fits it."""
        self._tagger_in_background.set()

    def _tagger_for_request(self) -> ConceptTagger:
        if self._tagger_in_background.is_set() and not self._tagger_ready.wait(TAGGER_WAIT_SECONDS):
            raise TaggerNotReady("the concept tagger that pasted text needs is still being prepared after the server "
                                 f"started (GET /health says when: tagger_ready); retry in {TAGGER_RETRY_AFTER_SECONDS} s",
                                 TAGGER_RETRY_AFTER_SECONDS)
        return self.tagger

    def prepare_tagger(self) -> None:
        """Fit (or load from the cache beside the index) the concept tagger that pasted text needs, so
        the first ``similar``/``diagnose`` by text does not pay for it. Errors are logged, not raised:
        the request that needs the tagger will then meet the error itself."""
        self._tagger_in_background.set()
        try:
            with self._background:
                _ = self.tagger
        except Exception:  # a background warm-up must not take the process down
            logger.exception("prepare_tagger: the concept tagger could not be prepared")
        finally:
            self._tagger_ready.set()

    @property
    def tagger_ready(self) -> bool:
        """True once :meth:`prepare_tagger` has run in this process (text similarity no longer waits for a fit)."""
        return self._tagger_ready.is_set()

    # ---- listing and filters ----------------------------------------------
    def resolve_filter(self, filters: IncidentFilter) -> dict[str, set[str]]:
        """Concept filters as sets of accepted ids (the concept and its narrower ones)."""
        accepted: dict[str, set[str]] = {}
        for param in CONCEPT_FILTERS:
            assert param.kind is not None and param.incident_field is not None
            value = getattr(filters, param.name)
            if value is None or not value.strip():
                continue  # an empty filter (``org=``) does not narrow anything
            concept = self.vocab.resolve(value, param.kind)
            if concept is None:
                hint = self.vocab.suggest(value, param.kind)
                extra = f" (did you mean {', '.join(hint)}?)" if hint else ""
                raise FilterError(f"{param.name}: unknown {param.kind.value} {value!r}{extra}", parameter=param.name)
            accepted[param.incident_field] = {concept.id, *self._knowledge.descendants(concept.id)}
        return accepted

    def matches(self, incident: Incident, filters: IncidentFilter, accepted: dict[str, set[str]] | None = None) -> bool:
        """True when ``incident`` passes every filter (concepts match their narrower ones; years inclusive)."""
        accepted = self.resolve_filter(filters) if accepted is None else accepted
        return passes(lambda field: incident_values(incident, field), incident.year, incident.severity, accepted, filters,
                      incident.is_draft)

    def filter_ids(self, filters: IncidentFilter | None) -> list[str]:
        """Ids of the incidents that pass ``filters`` (all ids when there are none), in id order; the same as
        :meth:`matches` on every record, read from :attr:`_facets` (no record kept for it)."""
        if filters is None or filters.is_empty():
            return list(self.data.incidents)
        return self._facets.matching(self.resolve_filter(filters), filters)

    def prepare_facets(self) -> None:
        """Read the facet columns and index them now (:mod:`incidentlib.facets`), so that the first filtered list,
        count or diagnosis does not pay a pass over every record: 7-9 s at 100k incidents (docs/benchmarks.md,
        "Analysis calls at 100k").  ``serve`` runs it in a background thread after its first answer.  Errors are
        logged, not raised: the request that needs the columns meets the error itself."""
        try:
            self._facets.index_all()
        except Exception:  # a background warm-up must not take the process down
            logger.exception("prepare_facets: the facet columns could not be read")

    def _carry_facets(self, previous: LibraryData | None, changed: set[str] | None) -> None:
        """After a live write: the facet columns, if they were read, patched with the ``changed`` incidents for the
        current data (:meth:`Facets.patched`), instead of read again from every record.  The step is recorded first;
        when a first read of the columns is under way (it holds the lock for seconds at 100k), the write does not
        wait for it: the next use of the columns patches them along the recorded steps (:meth:`_facets_along`)."""
        if previous is None or changed is None:
            return
        steps = self._facet_steps
        steps[previous.content_hash] = (self.data.content_hash, frozenset(changed))
        while len(steps) > FACET_STEPS_KEPT:
            del steps[next(iter(steps))]  # the oldest: columns that far behind are read again instead
        if self._facets_lock.acquire(blocking=False):
            try:
                self._facets_along(self.data)
            finally:
                self._facets_lock.release()

    def _facets_along(self, data: LibraryData) -> Facets | None:
        """The columns made for ``data`` from those made last, patched with the incidents the recorded write steps
        between the two changed; ``None`` when none were made or no chain of steps leads to ``data``.  Called with
        the lock held."""
        made = self._facets_of
        if made is None:
            return None
        at, facets = made
        if at == data.content_hash:  # the same content
            return facets
        changed = set[str]()
        for _ in range(len(self._facet_steps)):
            step = self._facet_steps.get(at)
            if step is None:
                return None
            at, changed = step[0], changed | step[1]
            if at == data.content_hash:
                facets = facets.patched(data.incidents, changed)
                self._facets_of = (at, facets)
                return facets
        return None

    @property
    def _facets(self) -> Facets:
        """The fields filters and counts read of every record (:mod:`incidentlib.facets`), for the current data:
        patched along the live writes since they were made (:meth:`_facets_along`), else read in one pass."""
        data = self.data
        with self._facets_lock:
            facets = self._facets_along(data)
            if facets is None:  # kept by content hash: replaced data is not held for them
                facets = Facets.of(data.incidents)
                self._facets_of = (data.content_hash, facets)
        return facets

    def list_incidents(
        self, filters: IncidentFilter | None = None, lang: str = "en", limit: int | None = None, offset: int = 0
    ) -> IncidentPage:
        """A page of filtered incidents: ``items = ids[offset : offset + limit]``, ``total`` before paging."""
        check_lang(lang)
        if offset < 0:
            raise InvalidRequest("offset must be >= 0")
        if limit is not None and limit < 0:
            raise InvalidRequest("limit must be >= 0")
        ids = self.filter_ids(filters)
        window = ids[offset:] if limit is None else ids[offset : offset + limit]
        # a refresh (the follower thread) may swap the records after the ids were read: an incident it removed is left out
        incidents, kg = self.data.incidents, self._knowledge
        return IncidentPage(total=len(ids), items=[kg.summary(incidents[i], lang) for i in window if i in incidents])

    # ---- one incident --------------------------------------------------------
    def detail(self, incident_id: str, lang: str = "en", related_limit: int = 10) -> IncidentDetail:
        """The full record in ``lang`` (the body falls back to the language it exists in), with related incidents."""
        check_lang(lang)
        incident = self.get(incident_id)
        kg = self._knowledge
        body_lang = lang if getattr(incident.body, lang) else incident.body.languages()[0]
        return IncidentDetail(
            id=incident.id,
            lang=lang,
            title=incident.title.get(lang),
            summary=incident.summary.get(lang),
            body=incident.body.get(body_lang).strip(),
            body_lang=body_lang,
            org=kg.concept_ref(incident.org, lang),
            date=incident.date,
            date_kind=incident.date_kind.value,
            status=incident.status.value,
            severity=incident.severity.value if incident.severity else None,
            tags=[kg.concept_ref(c, lang) for c in incident.tags],
            components=[kg.concept_ref(c, lang) for c in incident.components],
            causes=[kg.concept_ref(c, lang) for c in incident.causes],
            symptoms=[kg.concept_ref(c, lang) for c in incident.symptoms],
            inferred=[self._inferred_view(link, lang) for link in incident.proposed()],
            signals=[SignalView(text=s.text, note=s.note.get(lang) if s.note else None) for s in incident.signals],
            detection=incident.detection.get(lang) if incident.detection else None,
            mitigation=incident.mitigation.get(lang) if incident.mitigation else None,
            lessons=[lesson.get(lang) for lesson in incident.lessons],
            sources=[
                SourceView(url=str(s.url), title=s.title, publisher=s.publisher, kind=s.kind.value, published=s.published)
                for s in incident.sources
            ],
            related=self.related(incident.id, lang=lang, limit=related_limit),
        )

    def related(self, incident_id: str, lang: str = "en", limit: int | None = 10) -> list[RelatedItem]:
        """Incidents sharing components or causes; score = Σ ln(1 + N / df(c)) over shared concepts (docs/graph.md)."""
        check_lang(lang)
        return self._knowledge.related(self.get(incident_id).id, lang=lang, limit=limit)

    # ---- concepts and graph walks --------------------------------------------
    def topic(self, concept: str, lang: str = "en") -> TopicPage:
        """A concept's page: definition, incidents, co-occurring concepts, organizations."""
        return self._knowledge.topic(concept, lang=check_lang(lang))

    def _incident_counts(self) -> Counter[str]:
        return self._facets.concept_counts()

    def topics(self, kind: ConceptKind | str | None = None, lang: str = "en") -> TopicList:
        """Every component, cause, symptom and tag (or one ``kind``) with its number of incidents."""
        check_lang(lang)
        counts = self._incident_counts()
        kinds = [ConceptKind(kind)] if kind else list(TOPIC_KINDS)
        return TopicList(items=[
            TopicSummary(id=c.id, kind=c.kind.value, label=c.label.get(lang), incidents=counts[c.id])
            for k in kinds for c in self.vocab.of_kind(k)
        ])

    def concepts(self, kind: ConceptKind | str | None = None) -> list[Concept]:
        """The vocabulary's concepts of one kind (all kinds when ``kind`` is None), kinds in enum order."""
        kinds = [ConceptKind(kind)] if kind else list(ConceptKind)
        return [c for k in kinds for c in self.vocab.of_kind(k)]

    def vocabulary(self, kind: ConceptKind | str | None = None) -> VocabResponse:
        """The controlled vocabulary with labels, aliases and definitions in both languages, in file order."""
        wanted = ConceptKind(kind) if kind else None
        concepts = [
            VocabConcept(
                id=c.id, kind=c.kind.value,
                labels={"en": c.label.en or "", "ko": c.label.ko or ""},
                alt_labels={"en": c.alt.en, "ko": c.alt.ko},
                broader=c.broader,
                definition={lang: text for lang in LANGS if c.definition and (text := getattr(c.definition, lang))},
                url=str(c.url) if c.url else None,
            )
            for c in self.vocab
            if wanted is None or c.kind is wanted
        ]
        return VocabResponse(total=len(concepts), concepts=concepts)

    def organizations(self, lang: str = "en") -> OrganizationList:
        """Every organization with its number of incidents, most incidents first, then by id."""
        check_lang(lang)
        counts = Counter(ids[0] for ids in self._facets.values["org"])  # the column: no record read
        items = [
            OrganizationSummary(id=o.id, label=o.label.get(lang), url=str(o.url) if o.url else None, incidents=counts[o.id])
            for o in self.vocab.of_kind(ConceptKind.organization)
        ]
        items.sort(key=lambda item: (-item.incidents, item.id))
        return OrganizationList(items=items)

    def organization(self, org_id: str, lang: str = "en") -> TopicPage:
        """An organization's page; :class:`UnknownNodeError` when ``org_id`` is not an organization."""
        concept = self.vocab.get(org_id)
        if concept is None or concept.kind is not ConceptKind.organization:
            raise UnknownNodeError(org_id, self.vocab.suggest(org_id, ConceptKind.organization))
        return self.topic(org_id, lang=lang)

    def neighbors(self, node: str, depth: int = 1, lang: str = "en") -> NodeLinkGraph:
        """Node-link JSON of everything within ``depth`` hops of ``node``."""
        return self._knowledge.neighbors(node, depth=depth, lang=check_lang(lang))

    def path(self, source: str, target: str, lang: str = "en") -> GraphPath | None:
        """The shortest path between two nodes (tags skipped), or None when they are not connected."""
        return self._knowledge.path(source, target, lang=check_lang(lang))

    def sparql(self, query: str, timeout: float | None = None) -> SparqlResult:
        """Run a read-only SPARQL query on the graph store; :class:`SparqlError` for syntax errors and updates.
        ``timeout`` bounds a remote store's answer (in-process stores are bounded by the caller, api.sparql_runner)."""
        from .graph.sparql import run_sparql  # rdflib's SPARQL parser: only for a query

        return run_sparql(self._graph_store, query, timeout)

    def export(self, fmt: ExportFormat | str) -> str:
        """The whole library as Turtle, JSON-LD, N-Triples, GraphML or JSON Lines."""
        fmt = ExportFormat(fmt)
        if fmt is ExportFormat.graphml:
            return export_graphml(self._knowledge.nx)
        if fmt is ExportFormat.jsonl:
            return export_jsonl(self.data)
        from .graph.store import reading

        with reading(self._graph_store):  # an in-process graph is patched in place by refresh(): not mid-export
            return export_rdf(self._rdf, fmt)

    # ---- search ----------------------------------------------------------------
    @cached_property
    def _search_engine(self) -> SearchEngine:
        # the engine holds the carries until used (and hands them on): once its own index is built, the one it was
        # made from is not held here too (at 100k incidents the BM25 arrays are 1.2 GB)
        carried, self._dense_carry = self._dense_carry, None
        lexical, self._lexical_carry = self._lexical_carry, None
        return SearchEngine(self.data, self.search_config, self._embedder, previous_lexical=lexical,
                            previous_dense=carried, chunk_memo=self._chunk_memo)

    @cached_property
    def _search_service(self) -> SearchService:
        # the vocabulary does not change with incident writes: keep its recognizer across refreshes
        service = SearchService(self._search_engine, self._knowledge, self._recognizer)
        self._recognizer = service.recognizer
        # pasted text gets the same concept inference as stored records (trained on first use)
        service.tagger_factory = self._tagger_for_request
        return service

    def build_index(self, progress: ProgressFn | None = None, save_snapshot: bool = True,
                    rebuild: bool = False) -> BuildReport:
        """Build, extend or reuse the persisted dense index for the configured embedder, then make the search
        backend hold it (a Milvus backend fills its collection for this content when it has none).  The records
        and their chunks are then kept for the next start (:meth:`save_start_snapshot`) unless ``save_snapshot``
        is False (``serve`` writes it after it listens).  ``rebuild``: build the dense index again from the
        vectors it holds (nothing embedded again), dropping the dead rows edits leave in an HNSW graph or inverted
        file."""
        report = self._search_engine.build(progress, rebuild=rebuild)
        if save_snapshot:
            self.save_start_snapshot()
        return report

    def index_stats(self) -> IndexStats:
        """Sizes of the search indexes and the dense index kind: exact (numpy) below ``hnsw_threshold`` vectors, HNSW
        from there, an inverted file at ``ivf_threshold`` or more (see :mod:`incidentlib.search.dense`)."""
        return self._search_engine.stats()

    @property
    def last_build(self) -> BuildReport | None:
        """The report of the last :meth:`build_index` in this process, or None before the first."""
        return self._search_engine.last_build

    def _allowed(self, filters: IncidentFilter | None) -> set[str] | None:
        if filters is None or filters.is_empty():
            return None
        return set(self.filter_ids(filters))

    def search(self, query: str, k: int = 10, mode: SearchMode | str = SearchMode.hybrid,
               filters: IncidentFilter | None = None, lang: str = "en") -> SearchResponse:
        """Lexical, dense or hybrid search; filters apply before ranking (see docs/search.md for the fusion)."""
        check_lang(lang)
        check_k(k)
        mode = SearchMode(mode)
        results = self._search_service.search(query, k=k, mode=mode, allowed=self._allowed(filters), lang=lang)
        return SearchResponse(query=query, mode=mode.value, results=results)

    def similar(self, incident_id: str | None = None, text: str | None = None, k: int = 10,
                filters: IncidentFilter | None = None, lang: str = "en") -> SearchResponse:
        """Incidents like an incident id or a free text: lexical, passage-level dense and concept-graph evidence,
        each standardised over the candidates, averaged (see :mod:`incidentlib.search.similarity`)."""
        check_lang(lang)
        check_k(k)
        if (incident_id is None) == (text is None):
            raise InvalidRequest("give exactly one of incident_id or text")
        if incident_id is not None and not incident_id.strip():  # a blank field, not an id no record has
            raise InvalidRequest("incident_id is empty", parameter="incident_id")
        allowed = self._allowed(filters)
        if incident_id is not None:
            incident = self.get(incident_id)
            results = self._search_service.similar_to_incident(incident.id, k=k, allowed=allowed, lang=lang)
            return SearchResponse(query=incident.id, mode="similar", results=results)
        assert text is not None
        results = self._search_service.similar_to_text(text, k=k, allowed=allowed, lang=lang)
        return SearchResponse(query=text, mode="similar", results=results)

    def rag_context(self, query: str, k: int = 5, lang: str = "en", filters: IncidentFilter | None = None) -> list[RagPassage]:
        """Passages ready for a RAG prompt: for each hit of a hybrid search, a passage of the incident's own text
        (never its list of vocabulary names), in ``lang`` when the incident is written in it; ``lang`` on each
        passage is the language its text is in (see :meth:`SearchService.passage`)."""
        check_lang(lang)
        check_k(k)
        passages = []
        for hit, chunk in self._search_service.passages(query, k=k, allowed=self._allowed(filters), lang=lang):
            incident = self.get(hit.incident_id)
            passages.append(RagPassage(
                text=chunk.text, incident_id=incident.id, title=incident.title.get(lang),
                source_urls=[str(s.url) for s in incident.sources],
                lang=chunk.lang, score=round(float(hit.score), 6), kind=chunk.kind, chunk_id=chunk.id,
                status=incident.status.value,
            ))
        return passages

    # ---- inferred concepts ----------------------------------------------------------
    def _inferred_view(self, link: InferredLink, lang: str) -> InferredView:
        ref = self._knowledge.concept_ref(link.concept, lang).model_copy(update={"inferred": True})
        return InferredView(concept=ref, evidence=link.evidence, method=link.method.value,
                            confidence=link.confidence, status=link.status.value)

    @cached_property
    def tagger(self) -> ConceptTagger:
        """Alias matcher + classifier learnt from curated links (this library's, plus the bundled library's
        when this is another one), cached beside the search index."""
        from .paths import bundled_data_dir
        from .tagging.training import examples_for, fit_cached, training_records

        curated: set[str] = set()

        def candidates() -> Iterator[Incident]:
            for incident in each_record(self.data.incidents):  # one pass: a large library's records are not all kept
                if not incident.is_draft:
                    curated.add(incident.id)
                    yield incident
            if self.root.resolve() != bundled_data_dir().resolve():
                bundled = load_library(bundled_data_dir()).incidents.values()
                yield from (i for i in bundled if i.id not in curated and not i.is_draft)

        records = training_records(candidates())
        engine = self._search_engine
        # in id order: the same training records give the same model (and cache key) whichever library holds them
        records.sort(key=lambda incident: incident.id)
        classifier = fit_cached(examples_for(records), engine.embedder, engine.cache_dir)
        return ConceptTagger(self.vocab, classifier, self.signal_concepts)

    @cached_property
    def signal_concepts(self) -> SignalConcepts:
        """The concepts the signal table gives for the error messages in a text (the tagger's ``signal`` method)."""
        from .tagging.signals import SignalConcepts

        return SignalConcepts(self._signal_patterns, self.vocab)

    def tag(self, ids: list[str] | None = None, write: bool = True, lang: str = "en",
            actor: str = "local", progress: Callable[[str, int, int], None] | None = None) -> list[TagResult]:
        """Infer components, causes and symptoms for records (default: every draft) and store them in
        each record's ``inferred:`` block; curated links are never touched or re-proposed, rejected ones
        never proposed again.  Confidence: noisy-OR of the alias match and the classifier probability.

        A library with a write store (docs/storage.md) stores them there, one change per record in its history,
        which a running server sees: its records are the store's, and a file edited beside it would be read by
        nobody.  A library of files alone has them written into its files.

        ``progress(step, done, total)`` hears of each step of :data:`TAG_STEPS`: the first fit of the classifier takes
        tens of seconds, and reading a large archive minutes."""
        from .tagging.store import write_inferred

        check_lang(lang)
        report = progress or _no_progress
        self.refresh()
        chosen = [self.get(i) for i in ids] if ids else [i for i in self.data.incidents.values() if i.is_draft]
        learning, reading, storing = TAG_STEPS
        report(learning, 0, 1)
        tagger = self.tagger
        report(learning, 1, 1)
        found: list[list[InferredLink]] = []
        report(reading, 0, len(chosen))
        for start in range(0, len(chosen), TAG_BATCH):
            found.extend(tagger.infer_incidents(chosen[start:start + TAG_BATCH]))
            report(reading, len(found), len(chosen))
        results = []
        for done, (incident, links) in enumerate(zip(chosen, found, strict=True)):
            report(storing, done, len(chosen))
            try:
                if not write:
                    stored = incident.model_copy(update={"inferred": links})
                elif self._in_store(incident.id):
                    stored = Incident.model_validate(self._writer.store_inferred(incident.id, links, actor))
                else:
                    stored = write_inferred(self._record_file(incident.id), links)
            except ValidationFailed as exc:  # a record the rules refuse (stored before them) is said, not the end
                problems = "; ".join(f"{p.field}: {p.message}" if p.field else p.message for p in exc.problems)
                results.append(TagResult(id=incident.id, inferred=[], problem=f"not stored: {problems}"))
                continue
            results.append(TagResult(id=incident.id, inferred=[self._inferred_view(link, lang) for link in stored.proposed()]))
        report(storing, len(chosen), len(chosen))
        if write and self._store.exists:
            self.refresh()
        return results

    def _in_store(self, incident_id: str) -> bool:
        """Whether the record was ever written through the write store, which then holds its current version: a
        record of the YAML files alone stays in its file, where a curator edits it."""
        return self._store.exists and self._store.record(incident_id) is not None

    def review(self, incident_id: str, accept: list[str] | None = None, reject: list[str] | None = None,
               lang: str = "en", actor: str = "local") -> ReviewResult:
        """Accept proposed inferred links (they become curated links of their kind) or reject them
        (kept, marked rejected, so they are not proposed again): all of them or none.  Through the write store when
        the library has one (as :meth:`tag`)."""
        from .tagging.store import review_links

        self.refresh()
        incident = self.get(incident_id)
        chosen_accept, chosen_reject = set(accept or []), set(reject or [])
        if self._in_store(incident.id):
            from .tagging.store import review_document

            # the same checks as a file's review, on the record as stored, before anything is changed
            _, accepted, rejected = review_document(dump(incident), chosen_accept, chosen_reject, incident.id)
            stored = Incident.model_validate(self._writer.review_concepts(incident.id, chosen_accept, chosen_reject, actor))
            self.refresh()
        else:
            stored, accepted, rejected = review_links(self._record_file(incident.id), chosen_accept, chosen_reject)
        return ReviewResult(id=incident.id, accepted=accepted, rejected=rejected,
                            remaining=[self._inferred_view(link, lang) for link in stored.proposed()])

    def _record_file(self, incident_id: str) -> Path:
        """The YAML file of a record of a library without a write store."""
        path = self.root / INCIDENTS_DIR / f"{incident_id}.yaml"
        if not path.is_file():
            raise InvalidRequest(f"{incident_id}: no file {path} to write the inferred links into", parameter="ids")
        return path

    def evaluate_similar(self, labels: str, k: int = 5, name: str | None = None,
                         tagger_for: dict[str, ConceptTagger] | None = None, labels_name: str | None = None,
                         per_query: bool = False) -> SimilarEvalReport:
        """Label agreement P@k and MAP of ``similar`` (by incident, by text) next to random, BM25 and
        dense baselines, in one run (see :mod:`incidentlib.similar_eval`); ``per_query``: each query's too."""
        from .similar_eval import RANDOM_REPEATS, baseline_rankers, evaluate, load_labels, similar_rankers

        check_k(k)
        label_map = load_labels(labels, self.data.incidents)
        rankers = {**baseline_rankers(self.data.incidents, self._search_engine.embedder), **similar_rankers(self, tagger_for)}
        return evaluate(name or str(self.root), labels_name or labels, label_map, rankers, k, repeats={"random": RANDOM_REPEATS},
                        per_query=per_query)

    def evaluate_leave_concepts_out(self, k: int = 5, per_query: bool = False) -> SimilarEvalReport:
        """Strip every record's concepts, keep its text as a draft in a scratch library, infer concepts
        with a classifier that never saw the record (5-fold), and measure agreement on the held-out causes."""
        import tempfile

        from .similar_eval import leave_concepts_out

        with tempfile.TemporaryDirectory(prefix="incidentlib-lco-") as scratch:
            target = Path(scratch) / "lib"
            labels, taggers = leave_concepts_out(self, target)
            blind = Library.open(target, self.search_config)
            self.build_index()
            # the drafts keep every passage of the source: their index takes its vectors from the build just
            # used (the most recent of this embedder), reused by chunk id and text
            blind.build_index()
            # the labels file is in the scratch directory, gone once this returns: the report names what it held
            return blind.evaluate_similar(str(labels), k=k, name=f"{self.root.name} (leave concepts out)", tagger_for=taggers,
                                          labels_name="held-out causes", per_query=per_query)

    # ---- root-cause exploration ---------------------------------------------------
    @cached_property
    def _analysis(self) -> Analysis:
        from .analysis import Analysis  # matplotlib and sklearn load only when analysis is used

        return Analysis(self)

    def clusters(self, method: ClusterMethod | str = "graph", lang: str = "en", members: int | None = None) -> ClusterSet:
        """Root-cause clusters (graph communities or agglomerative embedding clusters) with purity and NMI; with
        ``members``, each cluster lists its first ``members`` members (its ``size`` still counts all)."""
        return self._analysis.clusters(method, lang, members)

    def cluster(self, cluster_id: str, lang: str = "en") -> ClusterView:
        """One cluster by id (g-NN graph, e-NN embedding); :class:`UnknownClusterError` otherwise."""
        return self._analysis.cluster(cluster_id, lang)

    def diagnose(self, symptoms: list[str] | None = None, text: str | None = None, lang: str = "en",
                 limit: int = 5) -> Diagnosis:
        """Likely causes and components for symptoms and/or pasted text, with the incidents behind each."""
        return self._analysis.diagnose(symptoms=symptoms, text=text, lang=lang, limit=limit)

    def signals(self, lang: str = "en") -> list[SignalExplanation]:
        """Every verbatim error signal in the library, explained."""
        return self._analysis.signals(lang)

    def map_coverage(self) -> tuple[int, int]:
        """(incidents on the map, published incidents): a map shows a sample past ``analysis.MAP_POINTS``."""
        return self._analysis.map_coverage

    def map_points(self, lang: str = "en") -> list[MapPoint]:
        """The published incidents at their 2D map positions (t-SNE of their embeddings) with their graph cluster ids;
        past ``analysis.MAP_POINTS`` of them, a seeded sample keeping each cluster's share (see :meth:`map_coverage`)."""
        return self._analysis.map_points(lang)

    def map_png(self, lang: str = "en") -> bytes:
        """The 2D incident map as a PNG."""
        return self._analysis.map_png(lang)

    def map_html(self, lang: str = "en") -> str:
        """The 2D incident map as an interactive HTML page."""
        return self._analysis.map_html(lang)

    def neighbourhood_png(self, incident_id: str, lang: str = "en") -> bytes:
        """A picture of an incident, its concepts and its closest related incidents."""
        return self._analysis.neighbourhood_png(incident_id, lang)

    # ---- signals, series and alerts ---------------------------------------------------
    @cached_property
    def shape_table(self) -> ShapeTable:
        """data/diagnosis/shapes.yaml, validated against the vocabulary (bundled table when the library has none)."""
        from .analysis.tables import load_shapes

        return load_shapes(self.root, self.vocab, set(self.data.incidents))

    @cached_property
    def signal_table(self) -> SignalTable:
        """data/diagnosis/signals.yaml, validated against the vocabulary (bundled table when the library has none)."""
        from .analysis.tables import load_signals

        return load_signals(self.root, self.vocab)

    @cached_property
    def _signal_patterns(self) -> list[CompiledFamily]:
        from .analysis.families import compile_table

        return compile_table(self.signal_table)

    def explain_signals(self, text: str, lang: str = "en") -> list[SignalMatch]:
        """Known error signals in ``text`` (Xid, SXid, NCCL watchdog/results, IB completion statuses,
        PCIe link messages, ECC events, Kubernetes event reasons), one per family and code, explained."""
        from .analysis.families import find_signals

        return find_signals(self._signal_patterns, text, self.vocab, check_lang(lang))

    def diagnose_series(self, *, points: Sequence[Mapping[str, Any]] | None = None, text: str | None = None,
                        path: str | Path | None = None, expected: float | None = None, lang: str = "en",
                        limit: int = 5) -> SeriesDiagnosis:
        """Classify an MFU curve by shape (data/diagnosis/shapes.yaml) and rank the incidents that show it.

        Give exactly one of ``points`` (objects with ``seconds``, ``mfu`` and optional ``throttle``,
        ``event``), ``text`` (CSV or JSON) or ``path``. MFU is a fraction of expected unless
        ``expected`` is given (then ``mfu / expected``). Features and scoring are described in
        :mod:`incidentlib.analysis.shapes`; the incident ranking in :mod:`incidentlib.analysis.mfu`.
        """
        from .analysis import series as series_io
        from .analysis.mfu import diagnose_series
        from .errors import SeriesError

        check_lang(lang)
        check_k(limit, "limit")
        given = [name for name, value in (("points", points), ("text", text), ("path", path)) if value is not None]
        if len(given) != 1:
            raise SeriesError("series", "give exactly one of points, text or path" + (f" (got {', '.join(given)})" if given else ""))
        if points is not None:
            parsed = series_io.parse_json(list(points), "points")
            source = "points"
        elif text is not None:
            parsed = series_io.parse_text(text, "text")
            source = "text"
        else:
            assert path is not None
            parsed = series_io.read_file(path)
            source = str(path)
        series = series_io.build_series(parsed, expected=expected, source=source)
        return diagnose_series(self, series, self.shape_table, lang, limit)

    def answer_alerts(self, payload: object, lang: str = "en", limit: int = 5) -> AlertsAnswer:
        """Diagnose each firing alert of an Alertmanager webhook (version 4) or one generic JSON alert:
        recognised signals, likely causes/components and incidents, and a Markdown message for chat
        (rules in :mod:`incidentlib.analysis.alerts`)."""
        from .analysis.alerts import answer_alerts

        check_k(limit, "limit")
        return answer_alerts(self, payload, check_lang(lang), limit)

    def watch(self, lines: Iterable[str], lang: str = "en", limit: int = 5, clock: Callable[[], float] | None = None,
              suppressed: dict[str, int] | None = None) -> Iterator[WatchAnswer]:
        """Answer each distinct problem (``family:code``) in a log stream once per rate-limit window
        (rules in :mod:`incidentlib.analysis.watch`); ``suppressed`` collects the repeat counts."""
        from .analysis.watch import RateLimiter, watch

        check_lang(lang)
        check_k(limit, "limit")
        limiter = RateLimiter(clock=clock) if clock is not None else RateLimiter()
        if suppressed is not None:
            limiter.suppressed = suppressed
        return watch(self, lines, lang, limit, limiter)

    # ---- evaluation and import -------------------------------------------------------
    def eval_queries(self, path: Path | None = None) -> list[EvalQuery]:
        """The evaluation queries (default: eval/queries.jsonl); bad lines are an :class:`InvalidRequest`."""
        from .evaluation import default_queries_path, load_queries

        try:
            return load_queries(path or default_queries_path(), self)
        except InvalidRequest:
            raise
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None

    def evaluate(self, items: list[EvalQuery], embedders: list[str], cache_dir: Path | None = None) -> EvalReport:
        """Recall@1/5/10, MRR and nDCG@10 per mode, embedder and query language (see docs/eval.md)."""
        from .evaluation import run_evaluation

        return run_evaluation(self, items, embedders, cache_dir=cache_dir)

    @staticmethod
    def import_records(source: Path, target: Path, fmt: str | None, maps: list[str], id_prefix: str = "IL", lang: str = "en",
                       dry_run: bool = False, keep_near_duplicates: bool = False,
                       progress: Callable[[int, int], None] | None = None,
                       date_format: str | None = None, sets: list[str] | None = None,
                       new_concepts: bool = True) -> ImportReport:
        """Import a collection into ``target`` as drafts, all or nothing; bad options are an :class:`InvalidRequest`.

        ``fmt=None`` reads the format from the file's suffix (``.csv``, ``.jsonl``, ``.yml``, ``.md``…:
        :data:`.requests.FORMAT_BY_SUFFIX`), and a folder as documents; a name that tells none is refused, naming
        the formats to choose from.
        ``new_concepts=False`` rejects each record that needs an organization or tag the vocabulary lacks (naming
        it) instead of adding the concept for review."""
        from pydantic import ValidationError

        from .importing import ImportFormat, ImportOptions, run_import, validation_reasons

        if fmt is None:
            if not source.exists():  # what is wrong is the path, not a format it could not tell
                raise InvalidRequest(f"{source}: no such file or folder")
            fmt = "document" if source.is_dir() else format_of_name(source.name)
            if fmt is None:
                raise InvalidRequest(f"format: the name {source.name!r} does not tell the collection's format; "
                                     f"name it, one of {', '.join(f.value for f in ImportFormat)}", parameter="format")
        try:
            import_format = ImportFormat(fmt)
        except ValueError:
            raise InvalidRequest(f"format: {fmt!r} is not one of {', '.join(f.value for f in ImportFormat)}",
                                 parameter="format") from None
        try:
            options: ImportOptions = ImportOptions(format=import_format, maps=maps, id_prefix=id_prefix, lang=lang,
                                                   dry_run=dry_run, keep_near_duplicates=keep_near_duplicates,
                                                   date_format=date_format, sets=sets or [],
                                                   new_concepts=new_concepts)
        except ValidationError as exc:
            located = [error["loc"] for error in exc.errors() if error["loc"]]
            raise InvalidRequest("; ".join(validation_reasons(exc)),
                                 parameter=str(located[0][0]) if located else None) from None
        before = _incident_files(target)
        try:
            return run_import(source, target, options, progress)
        except KeyboardInterrupt:
            # all or nothing (incidentlib.journal): settled now, so the caller can say which, not at the next open;
            # which is read from the folder, since the stop may come after the last step of the import
            from .journal import recover

            if target.is_dir():
                recover(target)
            raise ImportInterrupted(str(target), completed=_incident_files(target) != before) from None

    # ---- live writes (docs/storage.md) ---------------------------------------------------
    def refresh(self) -> bool:
        """Apply changes other processes committed since the last look; True when something changed.

        Cost when nothing changed: one indexed SQLite read (``max(seq)`` of the change log).
        On a change the merged records are swapped in and the derived structures (graph, RDF,
        BM25, search service, analysis) are dropped; the dense index is then extended with the
        new chunks only (cached vectors are reused by chunk text hash, see search/store.py).
        """
        seq = self._store.last_seq()
        if seq == self._seq:
            if not self._derived_current():
                self._drop_stale_derived()
            return False
        with self._refresh_lock:
            if seq == self._seq:
                return False
            changes = self._store.changes_since(self._seq)
            seq = max([seq, *(c.seq for c in changes)])
            previous: LibraryData | None = None
            changed_ids: set[str] | None = None
            # the whole overlay is merged at the first look of a process that opened a store with a history, and
            # after an export (the YAML base changed); otherwise only the incidents the new changes name
            exported = any(c.action == "export" for c in changes)
            if exported or (self._seq == 0 and len(changes) > PATCH_MAX_INCIDENTS):
                if self._seq:
                    self._base_data = load_library(self.root)  # the YAML base itself changed
                    self._recognizer = None
                data = merged(self._base_data, self._store.records(), seq, self._store.store_id())
            else:
                changed = {c.incident_id: self._store.record(c.incident_id) for c in changes}
                data = patched(self.data, changed, self._base_data, seq, self._store.store_id())
                previous, changed_ids = self.data, set(changed)
            if data.chunks is None:  # the engine cuts every incident's chunks: those of the current data are reused
                self._memo_snapshot_chunks()
            self._drop_search()
            self.__dict__.pop("_analysis", None)
            self.data = data
            try:
                self._carry_facets(previous, changed_ids)
            except Exception:  # as for the graph store below: the change is applied, the columns are read again
                logger.exception("refresh: the facet columns could not be patched; they are read again on use")
                self._facets_of = None
            release_frozen()  # what was just dropped may be frozen in a cycle (incidentlib.gc_pause.release_frozen)
            self._follow_in_graph(previous, changed_ids)  # the graph store follows: patched with the changed incidents
            # published last: a request that looks meanwhile waits on the lock above for the whole change; were it
            # published with ``data``, it would take the new records with the graph of the old ones
            self._seq = seq
        return True

    def _follow_in_graph(self, previous: LibraryData | None = None, changed: set[str] | None = None) -> None:
        """:meth:`_sync_graph_store`, and when it fails, log it and go on: the change stays applied and the records,
        searches and pages follow it; the store is brought along at a later look (:meth:`_drop_stale_derived`, at
        most every :data:`GRAPH_RETRY_S`), a request that needs the graph meanwhile reads it as it was.  Raising here
        would leave the change half applied and every request (searches too) failing on the same store."""
        try:
            self._sync_graph_store(previous, changed)
        except Exception:  # any store error: a remote endpoint, an embedded store's I/O
            logger.exception("refresh: the graph store could not follow the change; trying again in %.0f s",
                             GRAPH_RETRY_S)
            self._graph_store_data = None
            self._graph_retry_at = time.monotonic() + GRAPH_RETRY_S

    def _graph_store_current(self) -> bool:
        """Whether the open graph store (if any) holds the current records: not when a request loaded it from records a
        refresh then replaced (it started before the refresh, which found no store to patch), nor after a failed sync."""
        return "_graph_store" not in self.__dict__ or self._graph_store_data is self.data

    def _drop_search(self) -> None:
        """Drop the search engine and service, keeping the engine's BM25 and dense indexes as the next one's carries."""
        replaced = self.__dict__.get("_search_engine")
        snapshot = replaced.lexical_snapshot() if replaced is not None else None
        if snapshot is not None:  # its own index, or the carry it was given and did not use
            self._lexical_carry = snapshot
        if replaced is not None:
            self._dense_carry = replaced.dense_snapshot()
            replaced.close()  # its worker thread; a request still holding it answers with the legs in turn
        for name in ("_search_engine", "_search_service"):
            self.__dict__.pop(name, None)

    def _derived_current(self) -> bool:
        """Whether the search engine, search service, graph and graph store built so far are those of ``self.data`` (a
        few identity checks).  One is not when a request built it from the records a refresh then replaced: it started
        before the refresh and stored it after the refresh had dropped the old ones.  A graph store that could not
        follow a change counts as current until its next try is due (:data:`GRAPH_RETRY_S`)."""
        data, derived = self.data, self.__dict__
        engine: SearchEngine | None = derived.get("_search_engine")
        knowledge: KnowledgeGraph | None = derived.get("_knowledge")
        service: SearchService | None = derived.get("_search_service")
        return ((engine is None or engine.data is data) and (knowledge is None or knowledge.data is data)
                and (service is None or (service.engine.data is data and service.knowledge.data is data))
                and (self._graph_store_current() or time.monotonic() < self._graph_retry_at))

    def _drop_stale_derived(self) -> None:
        """Drop what :meth:`_derived_current` finds built from replaced records (the next use builds it again); bring a
        graph store that holds other records along (:meth:`_follow_in_graph`)."""
        with self._refresh_lock:
            if self._derived_current():
                return
            derived = self.__dict__
            engine: SearchEngine | None = derived.get("_search_engine")
            service: SearchService | None = derived.get("_search_service")
            if engine is not None and engine.data is not self.data:
                self._drop_search()  # its indexes are carried: the next engine updates them with the change
            elif service is not None:
                derived.pop("_search_service", None)
            knowledge: KnowledgeGraph | None = derived.get("_knowledge")
            if knowledge is not None and knowledge.data is not self.data:
                derived.pop("_knowledge", None)
            if not self._graph_store_current() and time.monotonic() >= self._graph_retry_at:
                self._follow_in_graph()  # the whole store checked against the records: reloaded when it differs

    def _memo_snapshot_chunks(self) -> None:
        """Put the chunks of data loaded from the start snapshot in the chunk memo, so that the engine after a change
        cuts only the changed incidents again.  Not done at load: it needs every record object, and records from the
        snapshot are validated when first read (``start_snapshot.RecordParts``)."""
        data = self.data
        if data.chunks is not None and not self._chunk_memo:
            self._chunk_memo.update({i: (incident, data.vocab, data.chunks[i]) for i, incident in data.incidents.items()
                                     if i in data.chunks})

    def prepare_search(self) -> None:
        """Build now what the next search, similar or related request would build after a change:
        the BM25 index over the new chunks, the extended dense index and the search service."""
        engine = self._search_engine
        _ = engine.lexical, engine.dense, self._search_service
        engine.backend.prepare()  # a Milvus backend fills the collection for the new content now, not on a search

    def follow_changes(self, stop: threading.Event, interval: float = FOLLOW_INTERVAL_S,
                       compact_after: float = COMPACT_AFTER_IDLE_S) -> None:
        """Until ``stop`` is set: every ``interval`` seconds apply committed changes (:meth:`refresh`)
        and, when there were some, :meth:`prepare_search` (and :meth:`prepare_facets` once they have been read).
        Run in a background thread by ``serve``, so the first request after a write, in any process, finds the
        index already built.  Once no
        change came for ``compact_after`` seconds, :meth:`compact` runs in another background thread.

        Write-to-searchable latency is then at most ``interval`` + one rebuild, instead of one rebuild
        paid by whichever request comes first.  An error is logged and retried at the next tick: a
        request still refreshes on its own, so a failing follower never hides a write.
        """
        last_change = time.monotonic()
        while not stop.wait(interval):
            try:
                if self.refresh():
                    self.prepare_search()
                    if self._facets_of is not None:  # in use: patched by refresh(), indexed now, not in a request
                        self.prepare_facets()
                    last_change = time.monotonic()
                elif self.needs_compaction and time.monotonic() - last_change >= compact_after:
                    self._compact_in_background()
            except Exception:  # a background thread must outlive any one bad refresh
                logger.exception("follow_changes: refresh failed; retrying in %.1f s", interval)

    @property
    def needs_compaction(self) -> bool:
        """True when the search index was carried through changes (dead and appended rows, not saved yet)."""
        engine: SearchEngine | None = self.__dict__.get("_search_engine")
        return engine is not None and engine.needs_compaction

    def save_pending_indexes(self) -> None:
        """Save the BM25 index live writes updated and left unsaved (compaction saves it once writes stop; a server
        stopping before that calls this, so the next start loads it instead of tokenizing every chunk again)."""
        engine: SearchEngine | None = self.__dict__.get("_search_engine")
        if engine is not None:
            with self._background:
                engine.save_lexical()

    def compact(self) -> CompactReport:
        """Tidy what writes leave behind, without blocking reads or writes:

        - the dense index carried through changes (its dead rows masked, new rows in an appended
          exact delta; see :mod:`incidentlib.search.layered`) is persisted for the current content —
          an HNSW graph or inverted file on disk extended with the carried rows, an exact index
          written anew; nothing is re-embedded; when another process already wrote it, it is loaded
          instead — and swapped in;
        - the write store's write-ahead log is copied into the database and truncated.

        ``serve`` runs it in the background once the library has been quiet for
        :data:`COMPACT_AFTER_IDLE_S` seconds after a change.
        """
        started = time.perf_counter()
        engine: SearchEngine | None = self.__dict__.get("_search_engine")
        action, rows, dropped = "none", 0, 0
        if engine is not None and engine.needs_compaction:
            before = engine.dense_snapshot() if engine.dense_carried else None  # (none when only BM25 is unsaved)
            with self._background:  # a fork (SPARQL host) waits: FAISS and BLAS threads may be running
                report = engine.compact()
            if report is not None and before is not None:
                row_chunks = engine.dense.row_chunks  # an HNSW graph or inverted file extended keeps its dead rows
                kept_dead = 0 if row_chunks is None else int((row_chunks < 0).sum())
                action, rows, dropped = report.action, report.chunks, max(0, before.dead - kept_dead)
        wal_before, wal_after = self._store.checkpoint()
        return CompactReport(dense=action, dense_rows=rows, dead_rows_dropped=dropped, wal_bytes_before=wal_before,
                             wal_bytes_after=wal_after, seconds=round(time.perf_counter() - started, 3))

    def _compact_in_background(self) -> None:
        if self._compaction is not None and self._compaction.is_alive():
            return

        def run() -> None:
            try:
                report = self.compact()
                logger.info("compacted: %s", report.model_dump_json())
            except Exception:
                logger.exception("compaction failed; the carried index keeps serving")

        self._compaction = threading.Thread(target=run, name="incidentlib-compaction", daemon=True)
        self._compaction.start()

    def refresh_graph(self) -> bool:
        """:meth:`refresh`, then rebuild the RDF graph at once when something changed.

        For a process that answers SPARQL from a forked copy of the library: the copies it forks
        next inherit the rebuilt graph instead of each rebuilding it.
        """
        changed = self.refresh()
        if changed:
            _ = self._rdf
        return changed

    @property
    def change_seq(self) -> int:
        """The id of the newest change this process has applied (0 for a library never written)."""
        return self._seq

    def _stored(self, doc: Doc) -> StoredRecord:
        self.refresh()  # the writer sees its own write at once
        return StoredRecord(id=doc["id"], status=doc.get("status", "published"), etag=etag(doc), record=doc)

    def record(self, incident_id: str) -> StoredRecord:
        """One incident as stored (drafts included) with its ETag, for editing."""
        self.refresh()
        incident = self.get(incident_id)  # once: the ETag must be the one of the record returned with it
        stored = dump(incident)
        return StoredRecord(id=incident.id, status=incident.status.value, etag=etag(stored), record=stored)

    def drafts(self) -> list[StoredRecord]:
        """Every draft awaiting review, in id order (the review queue)."""
        self.refresh()
        return [StoredRecord(id=i.id, status=i.status.value, etag=etag(dump(i)), record=dump(i))
                for i in self.data.incidents.values() if i.is_draft]

    def create_draft(self, doc: Doc, actor: str = "local") -> StoredRecord:
        """Store a new draft (the next free IL-NNNN unless ``doc`` names a free id); validated like ``incidentlib validate``."""
        return self._stored(self._writer.create_draft(doc, actor))

    def update_incident(self, incident_id: str, patch: Doc, if_match: str | None, actor: str = "local") -> StoredRecord:
        """Apply a JSON Merge Patch (RFC 7386) when ``if_match`` is the current ETag: 412 stale, 428 missing."""
        return self._stored(self._writer.update(self._stored_id(incident_id), patch, if_match, actor))

    def publish(self, incident_id: str, actor: str = "local", if_match: str | None = None) -> StoredRecord:
        """Publish a draft; it must now meet the published rules (both languages, a date, a component)."""
        return self._stored(self._writer.publish(self._stored_id(incident_id), actor, if_match))

    def reject(self, incident_id: str, actor: str = "local", if_match: str | None = None) -> StoredRecord:
        """Reject a draft: it leaves every view, restorable with :meth:`restore`; with ``if_match``, only the draft
        as read (:class:`PreconditionFailed` when it was changed since)."""
        return self._stored(self._writer.reject(self._stored_id(incident_id), actor, if_match))

    def delete(self, incident_id: str, actor: str = "local") -> StoredRecord:
        """Soft delete: the record leaves every view, restorable with :meth:`restore`."""
        return self._stored(self._writer.delete(self._stored_id(incident_id), actor))

    def restore(self, incident_id: str, actor: str = "local") -> StoredRecord:
        """Bring back a deleted or rejected record as it was."""
        return self._stored(self._writer.restore(self._stored_id(incident_id), actor))

    def add_link(self, incident_id: str, target: str, reason: dict[str, str], actor: str = "local") -> StoredRecord:
        """Add a curated related link ``incident_id`` -> ``target`` with its reason ({"en": ..., "ko": ...})."""
        return self._stored(self._writer.add_link(self._stored_id(incident_id), target, reason, actor))

    def remove_link(self, incident_id: str, target: str, actor: str = "local") -> StoredRecord:
        """Remove the curated related link ``incident_id`` -> ``target``."""
        return self._stored(self._writer.remove_link(self._stored_id(incident_id), target, actor))

    def review_concept(self, incident_id: str, concept: str, accept: bool, actor: str = "local",
                       if_match: str | None = None) -> StoredRecord:
        """Accept a proposed ``inferred:`` link of ``incident_id`` into its curated field, or mark it rejected (as
        :meth:`review`); with ``if_match``, only on the version reviewed (:class:`PreconditionFailed` otherwise)."""
        if self.vocab.get(concept) is None:
            raise NotFound(concept, f"concept: unknown concept {concept!r}", self.vocab.suggest(concept))
        return self._stored(self._writer.review_concept(self._stored_id(incident_id), concept, accept, actor, if_match))

    def history(self, incident_id: str) -> HistoryPage:
        """Every change of one incident, oldest first: who, when, a JSON Patch and the before/after documents."""
        key = self._stored_id(incident_id)
        changes = self._store.history(key)
        if not changes and key not in self.data.incidents:
            self.get(incident_id)  # raises IncidentNotFound with suggestions
        return HistoryPage(id=key, items=[
            HistoryEntry(seq=c.seq, action=c.action, actor=c.actor, at=c.at, patch=json_patch(c.before, c.after),
                         before=c.before, after=c.after) for c in changes])

    def history_rdf(self, fmt: ExportFormat | str = ExportFormat.turtle, incident_id: str | None = None) -> str:
        """The change log (of one incident, or all) as PROV-O in an RDF format."""
        from .store.provenance import provenance_graph

        changes = self._store.history(self._stored_id(incident_id)) if incident_id else self._store.all_changes()
        fmt = ExportFormat(fmt)
        if fmt in (ExportFormat.graphml, ExportFormat.jsonl):
            raise InvalidRequest("format: provenance is RDF: use ttl, jsonld or nt")
        return export_rdf(provenance_graph(changes), fmt)

    def import_drafts(self, source: Path, fmt: str, maps: list[str], id_prefix: str = "IL", lang: str = "en",
                      dry_run: bool = False, keep_near_duplicates: bool = False, actor: str = "local",
                      date_format: str | None = None, sets: list[str] | None = None) -> ImportReport:
        """``incidentlib import`` through the write store: same formats and mapping, all or nothing.

        The importer runs against a scratch copy of the live library; its drafts are then stored in one
        transaction. A record that needs new vocabulary (an organization, a tag) is rejected, named in the report
        like any other rejected record, in a dry run as in the import itself: vocabulary is curated in git.
        """
        import shutil
        import tempfile

        import yaml

        self.refresh()
        with tempfile.TemporaryDirectory(prefix="incidentlib-import-") as scratch:
            work = Path(scratch) / "library"
            shutil.copytree(self.root / "vocab", work / "vocab")
            (work / INCIDENTS_DIR).mkdir()
            for incident in self.data.incidents.values():
                (work / INCIDENTS_DIR / f"{incident.id}.yaml").write_text(
                    yaml.safe_dump(dump(incident), allow_unicode=True, sort_keys=False), encoding="utf-8")
            report = self.import_records(source, work, fmt, maps, id_prefix=id_prefix, lang=lang, dry_run=dry_run,
                                         keep_near_duplicates=keep_near_duplicates, date_format=date_format,
                                         sets=sets, new_concepts=False)
            report.into = str(self.root)
            if dry_run or not report.accepted:
                return report
            if report.new_organizations or report.new_tags:
                raise InvalidRequest("vocab: the import needs new concepts "
                                     f"({', '.join([*report.new_organizations, *report.new_tags])}); add them to vocab/ "
                                     "in git first, or import on the command line")
            docs = [dict(yaml.safe_load((work / INCIDENTS_DIR / f"{item.id}.yaml").read_text(encoding="utf-8")))
                    for item in report.accepted]
        self._writer.import_drafts(docs, actor)
        self.refresh()
        return report

    @staticmethod
    def record_yaml(document: dict[str, Any], like: str | None = None) -> str:
        """A record's document as incident YAML, laid out as ``like`` (the text of the file it replaces) wherever a
        field is unchanged (:mod:`incidentlib.record_yaml`)."""
        return incident_yaml(document, like)

    @staticmethod
    def as_stored(value: Any) -> Any:
        """A document read from YAML as the write store keeps it (an unquoted date as ISO text)."""
        return as_stored(value)

    def editable_yaml(self, record: StoredRecord) -> str:
        """A stored record as YAML to edit, laid out as its file when it has one (so an edit reads as a small diff)."""
        path = self.root / INCIDENTS_DIR / f"{record.id}.yaml"
        return incident_yaml(record.record, path.read_text(encoding="utf-8") if path.is_file() else None)

    def export_yaml(self, actor: str = "local") -> ExportReport:
        """Write the overlay back into the YAML library (atomic renames) and empty it; the history stays.

        After this, ``incidents/*.yaml`` alone holds the library again (review it with ``git diff``).
        """

        self.refresh()
        live = set(self.data.incidents)  # the merged view: the files and the store, deletions applied
        refused = [problem for record in self._store.records() if not record.deleted
                   for problem in check_incident(f"{STORE_FILE}#{record.id}", record.doc, live, self.vocab)[1]]
        if refused:  # a record the rules refuse would make the YAML library impossible to open
            raise ValidationFailed(refused)
        written, removed = [], []
        with self._store.write() as tx:
            for record in (tx.record(i) for i in sorted(tx.ids())):
                if record is None:
                    continue
                path = self.root / INCIDENTS_DIR / f"{record.id}.yaml"
                if record.deleted:
                    if path.exists():
                        path.unlink()
                        removed.append(record.id)
                else:  # laid out as the file it replaces, so the change reads as a small diff
                    atomic_write_text(path, incident_yaml(record.doc, path.read_text(encoding="utf-8") if path.exists() else None))
                    written.append(record.id)
                tx.drop(record.id)
            tx.log("*", "export", actor)
        self.refresh()
        return ExportReport(written=written, removed=removed)

    # ---- tokens ----------------------------------------------------------------------------
    @staticmethod
    def _token_view(info: TokenInfo) -> TokenView:
        return TokenView(id=info.id, name=info.name, role=info.role, created=info.created, expires=info.expires,
                         revoked=info.revoked, active=info.active)

    def create_token(self, name: str, role: str, expires_days: int | None = None) -> CreatedToken:
        """A new API token (reader, editor or admin); the secret is in the result only."""
        token, info = self._tokens.create(name, role, expires_days)
        return CreatedToken(token=token, **self._token_view(info).model_dump())

    def tokens(self) -> list[TokenView]:
        """Every token ever created (secrets are never stored, only salted hashes)."""
        return [self._token_view(t) for t in self._tokens.list()]

    def revoke_token(self, token_id: str) -> TokenView:
        """Revoke a token by its id (the 8 hex digits after ``il_``)."""
        return self._token_view(self._tokens.revoke(token_id))

    def authorize(self, token: str | None, need: str) -> str:
        """The token's name when it is valid with a role of at least ``need``; :class:`AuthError` / :class:`Forbidden`."""
        if need not in ROLES:
            raise InvalidRequest(f"role: must be one of {', '.join(ROLES)}, got {need!r}")
        return self._tokens.verify(token, need).name


def _no_progress(step: str, done: int, total: int) -> None:
    """A progress callback that hears nothing (none was given)."""


def _incident_files(root: Path) -> set[str]:
    """The names in a library's incidents folder (none when it has none): what an import adds to."""
    try:
        return {path.name for path in (root / INCIDENTS_DIR).iterdir()}
    except OSError:
        return set()


__all__ = [
    "CACHE_ENV",
    "DATA_ENV",
    "DEFAULT_EMBEDDER",
    "MEDIA_TYPES",
    "RESUME_SEGMENT",
    "SEARCH_BACKEND_ENV",
    "SEARCH_BACKEND_OPTION",
    "BuildReport",
    "ExportFormat",
    "FusionMethod",
    "IncidentFilter",
    "IncidentNotFound",
    "Library",
    "SearchConfig",
    "SearchMode",
    "SparqlResult",
    "atomic_write_bytes",
    "atomic_write_text",
    "built_for_process_lifetime",
    "check_k",
    "check_lang",
]
