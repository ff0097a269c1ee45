"""Approximate inner-product search for large libraries: a FAISS inverted file over 8-bit codes, re-ranked exactly.

At a million vectors and more, the two other indexes stop fitting the budget of one small machine:
the exact index scans every row per query (tens of milliseconds), and an HNSW graph takes many
minutes to build on two cores and holds every float32 vector in memory (2.7 GB at 1.3M vectors of
512 dimensions). This index:

- clusters the vectors into ``nlist ≈ √n`` lists (k-means on a sample) and stores each vector as
  8-bit scalar-quantised codes in its nearest list: a quarter of the float32 memory;
- answers a query by scanning the codes of the ``nprobe`` lists nearest to it, then scores the best
  candidates again with their exact float32 vectors (``2k``, at most :data:`RERANK_LIMIT`);
- keeps those float32 vectors on disk (``vectors.npy``): a query reads only its candidates' rows, with
  ``pread``, so they cost the operating system's page cache (shared by every process serving the
  library), not the process's memory. Mapping the file instead would count every touched page cache
  folio (often far larger than a 2 KB row) as resident memory of the process;
- chooses ``nprobe`` when it is built: the smallest that reaches :data:`CALIBRATION_RECALL` recall@10
  against exact search on calibration queries made from the index's own vectors (see :meth:`IvfIndex._calibrate`).

Filtered searches over few rows (``allowed`` of at most :data:`EXACT_FILTER_ROWS`) are exact.
"""

from __future__ import annotations

import logging
import math
import os
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, BinaryIO

import faiss
import numpy as np

from ..cold_pages import announce_cold_spans, residency_visible
from .cores import usable_cores
from .dense import ProgressFn, VectorIndex, empty_result, pad_batch

log = logging.getLogger(__name__)

INDEX_FILE = "ivf.faiss"
VECTORS_FILE = "vectors.npy"
#: Lists per square root of the number of vectors: √n lists of √n vectors balances the two costs of a query
#: (comparing with every centroid, scanning the probed lists) and keeps k-means cheap; the usual rule of thumb.
LISTS_PER_SQRT_N = 1.0
#: Bounds on the list count: below 16 lists the clustering saves nothing; above 65,536 the centroid scan dominates.
MIN_LISTS, MAX_LISTS = 16, 65_536
#: Training points per list: k-means needs a few dozen points per centroid for stable centroids (FAISS warns
#: below 39); 64 gives margin while keeping training to a sample (75k vectors at 1.3M rows).
TRAIN_POINTS_PER_LIST = 64
#: Candidates fetched, as a multiple of k (at most ``k + RERANK_LIMIT``): 8-bit codes move a score by about 1e-3,
#: far less than the gap between most ranks, so twice k keeps every near tie the codes could reorder at the cut.
RERANK_FACTOR = 2
#: At most this many candidates (the best by their codes) are re-scored with their float32 rows; the rest keep the
#: codes' scores.  Each re-scored row is one read from disk, and a search for 1,500 chunks (the engine's fetch for
#: 50 incidents) spent 44 ms reading 3,000 rows against 6 ms in FAISS; past the first few hundred ranks an error of
#: ~1e-3 moves a chunk a few places, which the per-incident maximum hardly sees.
RERANK_LIMIT = 256
#: The recall@10 (against exact search) that the chosen ``nprobe`` must reach on the calibration queries: above the
#: 0.95 the project promises, because real queries measured up to 0.025 below the calibration queries at the same
#: nprobe (docs/benchmarks.md: 0.968 against 0.981 at 43k vectors, 0.945 against 0.970 at 1.35M), so 0.98 keeps
#: real queries above 0.95.
CALIBRATION_RECALL = 0.98
#: ``nprobe`` values tried, in order: steps of about √2, so the choice overshoots the needed scan by at most ~40 %.
PROBE_STEPS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
#: Rows of the index used as calibration queries; 200 resolves recall to about ±0.01. Fixed seed: a rebuild
#: of the same vectors chooses the same ``nprobe``.
CALIBRATION_QUERIES = 200
CALIBRATION_SEED = 0
#: A filter allowing at most this many rows is answered exactly from the float32 vectors (one small matrix
#: product), since the probed lists might hold none of them.
EXACT_FILTER_ROWS = 65_536
#: How a saved index is opened: its lists mapped from the file read-only (FAISS's ``IO_FLAG_MMAP_IFC``), not read
#: into memory.  At 1.35M vectors the codes are 0.7 GB: reading them took 0.6-1.1 s of a server start and their
#: copy was half of the server's memory, while a query reads the few lists it probes; mapped, the pages are the
#: page cache's, shared by every process on the index.  A mapped index cannot grow: :meth:`IvfIndex.add` reads an
#: owned copy first.
MAPPED_READ = faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY
#: Rows scored per block when computing exact answers for calibration: bounds temporary memory.
_EXACT_BLOCK = 262_144
#: Rows handed to FAISS per ``add`` call while building, and checked or copied per step when saving: 128 MB of
#: float32 rows at 512 dimensions.  Vectors memory-mapped from a file (13.45M rows, 27.5 GB at 1M incidents: more
#: than this machine's memory) are then read a block at a time through the page cache, never copied whole, and the
#: build reports progress after each block.  FAISS assigns and encodes each row on its own, so the codes equal
#: one ``add`` of every row.
ADD_BLOCK = 65_536
#: FAISS's ``parallel_mode`` 3: a batch's queries are shared among the threads inside ``search_preassigned``.  Under
#: the default (0) only ``search`` splits the queries, and ``search_preassigned``, which :meth:`IvfIndex._scan` calls
#: after announcing the probed lists, runs on one thread: 12.6–12.9 against 5.0–5.4 ms for 13 queries on two cores (an
#: IVF600,SQ8 index of 400,000 random 256-dimensional vectors, nprobe 32).  Each query's answer is the same under both.
#: (FAISS's ``range_search`` refuses this mode; nothing here calls it.)
PARALLEL_OVER_QUERIES = 3
#: Bytes of one id in a FAISS list (``idx_t``, 64 bits): a list's span ends after its ids.
ID_BYTES = 8



def _search_threads() -> int:
    """The first value of ``OMP_NUM_THREADS`` when it is a positive number (OpenMP's own setting: a user's limit
    holds), else the cores this process may use.  Read from the environment, not from OpenMP, whose current count
    may be a caller's temporary limit (:func:`.similarity.one_blas_thread`) when this module is first imported."""
    configured = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if configured.isdigit() and int(configured) > 0:
        return int(configured)
    return usable_cores()


#: The most threads a batch of code searches is spread over (:func:`query_threads`).
SEARCH_THREADS = _search_threads()


@contextmanager
def query_threads(queries: int) -> Iterator[None]:
    """FAISS's OpenMP threads set to ``min(queries, SEARCH_THREADS)`` on this thread for the block, then restored.

    A batch search splits whole queries between the threads, so none waits on another's partial result and the
    answer does not depend on the count.  The candidate path of ``similar`` runs its small BLAS products on one
    thread (:func:`.similarity.one_blas_thread`); FAISS's BLAS is OpenMP-threaded, so that limit also left its code
    scan of ~10 query passages on one core: 9 ms a query at 100k incidents against 5 ms on two
    (bench/bench_similar.py --candidates-only --before-ivf, docs/benchmarks.md).  OpenMP keeps the setting per
    calling thread, so concurrent requests do not change each other's."""
    previous = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(max(1, min(queries, SEARCH_THREADS)))
    try:
        yield
    finally:
        faiss.omp_set_num_threads(previous)


def list_count(rows: int) -> int:
    """``clamp(round(LISTS_PER_SQRT_N · √rows), MIN_LISTS, MAX_LISTS)``, and never more than ``rows / TRAIN_POINTS_PER_LIST``."""
    wanted = round(LISTS_PER_SQRT_N * math.sqrt(max(rows, 1)))
    return max(1, min(MAX_LISTS, max(MIN_LISTS, wanted), rows // TRAIN_POINTS_PER_LIST))


class _RowReader:
    """Reads rows of a float32 ``.npy`` matrix with ``pread`` (no mapping); the file stays open until collected."""

    def __init__(self, path: Path, offset: int, dim: int) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        self._offset = offset
        self._row_bytes = dim * 4
        self._dim = dim
        weakref.finalize(self, os.close, self.fd)
        if hasattr(os, "posix_fadvise"):  # rows are read at random (announced below): no read-ahead around each
            with suppress(OSError):  # a hint only
                os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_RANDOM)

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """Rows ``ids`` (any order, repeats allowed) as a new float32 matrix.

        A run of asked positions holding consecutive rows (an incident's passages are adjacent rows) is one
        ``preadv`` straight into its slice of the result: no intermediate bytes object, no reordering copy.  The runs
        are read in ascending file order, so a cold file is still read forwards.

        Every run is announced to the kernel first (``POSIX_FADV_WILLNEED``), so the reads of rows not in the page
        cache are in flight together instead of one after another.  At 1M incidents the file (27.5 GB) cannot stay
        cached on a 24 GB machine: a search re-ranking its cold rows took 2.15-3.26 ms p50 with them announced first
        against 3.04-3.98 read one by one (0.71-0.83× in three runs of bench/bench_rerank_reads.py); with the rows
        cached the two were within noise of each other."""
        ids = np.asarray(ids, dtype=np.int64)
        out = np.empty((len(ids), self._dim), dtype=np.float32)
        if not len(ids):
            return out
        if ids.min() < 0:
            raise IndexError(f"row {int(ids.min())} is negative")
        breaks = np.flatnonzero(np.diff(ids) != 1) + 1
        starts = np.concatenate([[0], breaks])
        ends = np.concatenate([breaks, [len(ids)]])
        target = out.data.cast("B")
        size = self._row_bytes
        order = np.argsort(ids[starts], kind="stable").tolist()
        if len(order) > 1 and hasattr(os, "posix_fadvise"):  # not on every system (macOS has none): a hint only
            for run in order:
                start, end = int(starts[run]), int(ends[run])
                os.posix_fadvise(self.fd, self._offset + int(ids[start]) * size, (end - start) * size, os.POSIX_FADV_WILLNEED)
        for run in order:
            start, end = int(starts[run]), int(ends[run])
            wanted = (end - start) * size
            read = os.preadv(self.fd, [target[start * size:end * size]], self._offset + int(ids[start]) * size)
            if read != wanted:  # only past the end of the file: a row that does not exist
                raise IndexError(f"rows {int(ids[start])}..{int(ids[end - 1])} are past the end of the vectors file")
        return out


class IvfIndex:
    kind = "ivf"

    def __init__(self, index: Any, vectors: np.ndarray) -> None:
        index.parallel_mode = PARALLEL_OVER_QUERIES
        self._index = index
        self._vectors = vectors
        self._reader: _RowReader | None = None
        # the file a mapped index was loaded from, held open: an owned copy is read from it before the index grows
        # (by then a newer build may have removed the file's name)
        self._mapped_from: BinaryIO | None = None
        self._list_spans: tuple[np.ndarray, np.ndarray] | None = None  # of a mapped index (:meth:`_spans`)
        self._file: Path | None = None
        self._serve_rows(vectors)

    def _serve_rows(self, vectors: np.ndarray) -> None:
        """Take ``vectors`` as the float32 rows; when they map a whole ``.npy`` file (a build over mapped vectors, a
        loaded or saved index), remember the file and read rows from it with ``pread``."""
        self._vectors = vectors
        self._file = _whole_file(vectors)
        self._reader = None
        if self._file is not None:
            assert isinstance(vectors, np.memmap)
            self._reader = _RowReader(self._file, int(vectors.offset), int(vectors.shape[1]))

    def _rows(self, ids: np.ndarray) -> np.ndarray:
        """Float32 rows ``ids``: read from the file when the vectors are on disk, else taken from memory."""
        if self._reader is not None:
            return self._reader.rows(ids)
        return np.asarray(self._vectors[ids])

    @classmethod
    def build(cls, vectors: np.ndarray, progress: ProgressFn | None = None) -> IvfIndex:
        """Train lists and codes on a sample of ``vectors``, add them all, and calibrate ``nprobe``.

        ``vectors`` may be memory-mapped from a ``.npy`` file (``np.load(..., mmap_mode="r")``): the rows are then
        read :data:`ADD_BLOCK` at a time and never copied into memory, and saving the index into the file's own
        folder writes only the codes.  ``progress(rows added, rows)`` is called after each block."""
        if not (isinstance(vectors, np.memmap) and vectors.dtype == np.float32 and vectors.flags.c_contiguous):
            vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        rows, dim = vectors.shape
        lists = list_count(rows)
        index = faiss.index_factory(dim, f"IVF{lists},SQ8", faiss.METRIC_INNER_PRODUCT)
        sample_size = min(rows, lists * TRAIN_POINTS_PER_LIST)
        rng = np.random.default_rng(CALIBRATION_SEED)
        sample = vectors if sample_size == rows else vectors[np.sort(rng.choice(rows, sample_size, replace=False))]
        index.train(np.ascontiguousarray(sample))
        del sample
        if progress:
            progress(0, rows)
        for start in range(0, rows, ADD_BLOCK):
            index.add(np.ascontiguousarray(vectors[start:start + ADD_BLOCK]))
            if progress:
                progress(min(start + ADD_BLOCK, rows), rows)
        built = cls(index, vectors)
        built._calibrate()
        return built

    @classmethod
    def load(cls, folder: Path) -> IvfIndex:
        """The saved index, its lists mapped from the file (:data:`MAPPED_READ`) and its rows memory-mapped."""
        source = (folder / INDEX_FILE).open("rb")
        try:
            index = faiss.read_index(str(folder / INDEX_FILE), MAPPED_READ)
            if not isinstance(index, faiss.IndexIVF):
                raise ValueError(f"{INDEX_FILE} holds a {type(index).__name__}, not an inverted-file index")
            vectors = np.load(folder / VECTORS_FILE, mmap_mode="r", allow_pickle=False)
            if vectors.ndim != 2 or len(vectors) != index.ntotal or (len(vectors) and vectors.shape[1] != index.d):
                raise ValueError(f"{VECTORS_FILE} holds {vectors.shape} vectors for an index of {index.ntotal} × {index.d}")
        except BaseException:
            source.close()
            raise
        loaded = cls(index, vectors)
        loaded._mapped_from = source
        if not residency_visible(folder / INDEX_FILE):
            log.warning("%s: owned by another user and not writable: the kernel hides which of its pages are cached, so "
                        "cold lists are read one page fault at a time (build the index as this user to avoid it)",
                        folder / INDEX_FILE)
        weakref.finalize(loaded, source.close)  # closed with the index (closing twice is harmless)
        return loaded

    def _own_lists(self) -> None:
        """Replace a mapped index by a copy in memory read from its file (a mapped one cannot grow: FAISS aborts)."""
        source, self._mapped_from = self._mapped_from, None
        if source is None:
            return
        with source:
            source.seek(0)
            owned: Any = faiss.read_index(faiss.PyCallbackIOReader(source.read))  # type: ignore[attr-defined]  # not in the stubs
        owned.nprobe = self._index.nprobe
        owned.parallel_mode = PARALLEL_OVER_QUERIES
        self._index = owned
        self._list_spans = None

    def _spans(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Per list, the address of its first code and one past its last id in the mapping of the index file (FAISS
        writes a list's codes, then its ids); None when the lists are not mapped.  Read once: a mapped index never
        changes (:meth:`add` makes an owned copy)."""
        if self._mapped_from is None:
            return None
        if self._list_spans is None:
            lists = self._index.invlists
            starts = np.zeros(self.lists, dtype=np.int64)
            ends = np.zeros(self.lists, dtype=np.int64)
            for number in range(self.lists):
                size = int(lists.list_size(number))
                if size:
                    codes, ids = lists.get_codes(number), lists.get_ids(number)
                    starts[number] = faiss.rev_swig_ptr(codes, size * lists.code_size).ctypes.data
                    ends[number] = faiss.rev_swig_ptr(ids, size).ctypes.data + size * ID_BYTES
                    lists.release_codes(number, codes)
                    lists.release_ids(number, ids)
            self._list_spans = (starts, ends)
        return self._list_spans

    def _scan(self, queries: np.ndarray, k: int, params: Any) -> tuple[np.ndarray, np.ndarray]:
        """FAISS's search of ``queries`` (contiguous float32) with ``params`` (``nprobe``, a selector): the lists it
        will probe are found first and, when mapped and cold, announced together (:func:`.announce_cold_spans`), then
        scanned (``search_preassigned``, with the same coarse assignment; the answer is FAISS's own search's)."""
        spans = self._spans()
        if spans is None:
            return self._index.search(queries, k, params=params)  # type: ignore[no-any-return]
        # FAISS reads the assignment with rows of min(nlist, nprobe) entries: ask the quantizer for exactly that many
        params.nprobe = max(1, min(int(params.nprobe), self.lists))
        coarse, assigned = self._index.quantizer.search(queries, int(params.nprobe))
        probed = np.unique(assigned[assigned >= 0])
        announce_cold_spans(spans[0][probed], spans[1][probed])
        distances = np.empty((len(queries), k), dtype=np.float32)
        labels = np.empty((len(queries), k), dtype=np.int64)
        assigned = np.ascontiguousarray(assigned, dtype=np.int64)
        coarse = np.ascontiguousarray(coarse, dtype=np.float32)
        # the C++ method: FAISS's Python wrapper of search_preassigned takes no search parameters (nprobe, selector)
        self._index.search_preassigned_c(len(queries), faiss.swig_ptr(queries), k, faiss.swig_ptr(assigned),
                                         faiss.swig_ptr(coarse), faiss.swig_ptr(distances), faiss.swig_ptr(labels),
                                         False, params)
        return distances, labels

    @property
    def mapped(self) -> bool:
        """Whether the lists are mapped from the file (read-only) rather than held in memory."""
        return self._mapped_from is not None

    @property
    def vectors(self) -> np.ndarray:
        """The float32 rows (memory-mapped from disk once saved or loaded: for callers that read many rows)."""
        return self._vectors

    @property
    def nprobe(self) -> int:
        return int(self._index.nprobe)

    @property
    def lists(self) -> int:
        return int(self._index.nlist)

    def __len__(self) -> int:
        return int(self._index.ntotal)

    def add(self, vectors: np.ndarray, rows_file: Path | None = None) -> VectorIndex:
        """Codes for the new rows go into the trained lists (no retraining).  The float32 rows are appended in memory,
        or, with ``rows_file``, written there: the current rows copied :data:`ADD_BLOCK` at a time, the new ones after
        them, and served from that file.  A library of 1M incidents that grows by one keeps its 27.5 GB of rows on
        disk that way (appended in memory they would be read whole); saving into ``rows_file``'s folder then writes
        the codes alone."""
        if not len(vectors):
            return self
        fresh = np.ascontiguousarray(vectors, dtype=np.float32)
        self._own_lists()
        self._index.add(fresh)
        if rows_file is None:
            self._serve_rows(np.vstack([self._vectors, fresh]))  # in memory until the next save
            return self
        _write_rows(rows_file, self._vectors, fresh)
        self._serve_rows(np.load(rows_file, mmap_mode="r", allow_pickle=False))
        return self

    def scores(self, query: np.ndarray) -> None:
        """An inverted file does not score every row; callers use :meth:`search`."""

    def search(self, query: np.ndarray, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` (scores, row ids), best first, scored exactly; ``allowed`` restricts the rows before ranking."""
        total = len(self)
        if total == 0 or k <= 0:
            return empty_result()
        query = np.ascontiguousarray(np.asarray(query, dtype=np.float32).reshape(1, -1))
        params = faiss.SearchParametersIVF(nprobe=self.nprobe)  # type: ignore[call-arg]  # the stubs miss its keywords
        if allowed is not None:
            rows = np.asarray(allowed, dtype=np.int64)
            if len(rows) == 0:
                return empty_result()
            if len(rows) <= EXACT_FILTER_ROWS:
                ordered = np.sort(rows)
                return _top(self._rows(ordered) @ query[0], ordered, k)
            params = faiss.SearchParametersIVF(  # type: ignore[call-arg]  # the stubs miss its keyword arguments
                sel=faiss.IDSelectorBatch(np.ascontiguousarray(rows)), nprobe=self.nprobe)
        fetch = min(total, k + min(k * (RERANK_FACTOR - 1), RERANK_LIMIT))
        coded, ids = self._scan(query, fetch, params)
        keep = ids[0] >= 0
        found, scores = ids[0][keep].astype(np.int64), coded[0][keep].astype(np.float32)
        if not len(found):
            return empty_result()
        head = np.sort(found[:RERANK_LIMIT])  # the best by their codes, ascending rows read the file in order
        exact = self._rows(head) @ query[0]
        if len(found) <= RERANK_LIMIT:
            return _top(exact, head, k)
        return _top(np.concatenate([exact, scores[RERANK_LIMIT:]]), np.concatenate([head, found[RERANK_LIMIT:]]), k)

    def search_batch(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`search` for each query (each re-ranks its own head exactly)."""
        queries = np.asarray(queries, dtype=np.float32).reshape(-1, int(self._index.d))
        return pad_batch([self.search(query, k) for query in queries], min(k, len(self)))

    def search_codes_batch(self, queries: np.ndarray, k: int, nprobe: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` of each query by the 8-bit codes alone, in one FAISS call, scanning ``nprobe`` lists (default:
        the calibrated number): no row is read from disk.  For callers that score what they find again exactly
        (the candidate path of ``similar``).  (scores, row ids), each (queries × k), best first; −1 / −inf pads.
        The queries are spread over FAISS's threads (:func:`query_threads`), whatever limit the caller's BLAS has."""
        queries = np.ascontiguousarray(np.asarray(queries, dtype=np.float32).reshape(-1, int(self._index.d)))
        k = min(k, len(self))
        if not len(queries) or k <= 0:
            return np.zeros((len(queries), 0), dtype=np.float32), np.zeros((len(queries), 0), dtype=np.int64)
        params = faiss.SearchParametersIVF(nprobe=max(1, min(nprobe or self.nprobe, self.lists)))  # type: ignore[call-arg]
        with query_threads(len(queries)):
            scores, ids = self._scan(queries, k, params)
        return np.where(ids >= 0, scores, -np.inf).astype(np.float32), ids.astype(np.int64)

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """Float32 rows ``ids``, in the order asked (read from the file in ascending order: see :class:`_RowReader`)."""
        return self._rows(np.asarray(ids, dtype=np.int64))

    def save(self, folder: Path) -> list[str]:
        """Write the codes and the float32 rows, then serve the rows from the written file.

        Rows that already are ``folder``'s vectors file (an index built over it, memory-mapped) are not written
        again; rows mapped from another file are copied :data:`ADD_BLOCK` at a time, never read whole."""
        target = folder / VECTORS_FILE
        for start in range(0, len(self._vectors), ADD_BLOCK):
            if not np.isfinite(self._vectors[start:start + ADD_BLOCK]).all():
                raise ValueError(f"refusing to save NaN or infinite vectors (in rows {start:,}..{start + ADD_BLOCK - 1:,})")
        faiss.write_index(self._index, str(folder / INDEX_FILE))
        if not self._reads_from(target):
            _write_rows(target, self._vectors)
        self._serve_rows(np.load(target, mmap_mode="r", allow_pickle=False))
        return [INDEX_FILE, VECTORS_FILE]

    def _reads_from(self, path: Path) -> bool:
        """Whether the rows are read from the file at ``path``: compared by the open file, not by name, since a build
        is renamed into place after its files are written (writing over the file the rows are read from would
        truncate it under the map)."""
        if self._reader is None or not path.exists():
            return False
        mine, theirs = os.fstat(self._reader.fd), path.stat()
        return (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)

    def describe(self) -> str:
        return (f"IVF (FAISS, {self.lists:,} lists, 8-bit codes, nprobe={self.nprobe}, exact re-ranking from "
                f"vectors on disk) over {len(self):,} vectors")

    def _calibrate(self) -> None:
        """Set ``nprobe`` to the first of :data:`PROBE_STEPS` reaching :data:`CALIBRATION_RECALL` recall@10.

        Recall@10 = |IVF top 10 ∩ exact top 10| / 10, averaged over the calibration queries.  A query is
        ``normalise(a + b)`` for two random rows ``a`` and ``b``: a point between two regions of the data whose
        neighbours lie in several lists.  A row itself would be a far too easy query (its neighbours, often
        near-duplicates, share its list); real queries sit at a cosine of about 0.5 from their best rows, and the
        mixtures measured close to them (docs/benchmarks.md).
        """
        rows = len(self)
        if rows <= 10:
            self._index.nprobe = self.lists
            return
        rng = np.random.default_rng(CALIBRATION_SEED)
        count = min(CALIBRATION_QUERIES, rows)
        mixed = np.asarray(self._vectors[rng.choice(rows, count)]) + np.asarray(self._vectors[rng.choice(rows, count)])
        norms = np.linalg.norm(mixed, axis=1, keepdims=True)
        queries = np.ascontiguousarray(mixed[norms[:, 0] > 0] / norms[norms[:, 0] > 0], dtype=np.float32)
        truth = [set(row.tolist()) for row in _exact_top(self._vectors, queries, 10)]
        for nprobe in [*(step for step in PROBE_STEPS if step < self.lists), self.lists]:
            self._index.nprobe = nprobe
            found = sum(len(set(self.search(query, 10)[1].tolist()) & wanted) for query, wanted in zip(queries, truth, strict=True))
            if found >= CALIBRATION_RECALL * sum(len(t) for t in truth):
                return


def _write_rows(path: Path, rows: np.ndarray, more: np.ndarray | None = None) -> None:
    """Write ``rows`` (then ``more``, when given) as one float32 ``.npy`` matrix at ``path``, through a map, copying
    :data:`ADD_BLOCK` rows at a time: rows mapped from a file are never read whole."""
    extra = 0 if more is None else len(more)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(len(rows) + extra, rows.shape[1]))
    for start in range(0, len(rows), ADD_BLOCK):
        stop = min(start + ADD_BLOCK, len(rows))
        out[start:stop] = rows[start:stop]
    if more is not None:
        out[len(rows):] = more
    out.flush()


def _whole_file(vectors: np.ndarray) -> Path | None:
    """The ``.npy`` file that ``vectors`` maps whole (every row, from the first), else None.

    A C-contiguous float32 map of the file's full shape can only be all of it; a slice of a map (fewer rows, or an
    offset that numpy does not update on slicing) is not, and is read like memory."""
    if not (isinstance(vectors, np.memmap) and vectors.filename is not None and vectors.dtype == np.float32
            and vectors.flags.c_contiguous and vectors.ndim == 2):
        return None
    path = Path(vectors.filename)
    try:
        on_disk = np.load(path, mmap_mode="r", allow_pickle=False)  # reads the header only
    except (OSError, ValueError):
        return None
    whole = (isinstance(on_disk, np.memmap) and on_disk.shape == vectors.shape and on_disk.dtype == np.float32
             and on_disk.flags.c_contiguous and on_disk.offset == vectors.offset)
    return path if whole else None


def _top(scores: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    k = min(k, len(scores))
    top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
    top = top[np.argsort(-scores[top], kind="stable")]
    return scores[top].astype(np.float32), rows[top].astype(np.int64)


def _exact_top(vectors: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """Row ids of the exact top ``k`` of each query, computed block by block over ``vectors``."""
    best_scores = np.full((len(queries), 0), -np.inf, dtype=np.float32)
    best_ids = np.zeros((len(queries), 0), dtype=np.int64)
    for start in range(0, len(vectors), _EXACT_BLOCK):
        block = np.asarray(vectors[start : start + _EXACT_BLOCK])
        scores = queries @ block.T
        take = min(k, scores.shape[1])
        part = np.argpartition(-scores, take - 1, axis=1)[:, :take]
        best_scores = np.hstack([best_scores, np.take_along_axis(scores, part, axis=1)])
        best_ids = np.hstack([best_ids, part + start])
        keep = np.argsort(-best_scores, axis=1, kind="stable")[:, :k]
        best_scores = np.take_along_axis(best_scores, keep, axis=1)
        best_ids = np.take_along_axis(best_ids, keep, axis=1)
    return best_ids
