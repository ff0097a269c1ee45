"""Search benchmarks: build throughput, query latency at 1k/10k/100k incidents, memory.

    python bench/bench_search.py                      # full run, writes docs/benchmarks.md
    python bench/bench_search.py --sizes 1000 --quick # a smoke run

What is measured, side by side in one run on one machine:

1. Embedding throughput (chunks/s) of each built-in backend on real library chunks.
2. For libraries of N incidents (synthetic copies of the real ones: each copy keeps the
   real chunk texts, with the copy number appended, and a vector that is the real chunk
   vector plus small Gaussian noise, renormalised): query latency p50/p99 of
   incidentlib's lexical (BM25), dense (the index its size gets, including the query
   embedding) and hybrid search; next to them the *floor* the libraries alone reach on the
   same tokens, vectors and queries (bm25s top-50, FAISS HNSW top-100, the query embedding)
   and a brute-force numpy search; incidentlib's hybrid p50 as a ratio to the floor; index
   build times; HNSW recall@10 against exact search; resident and peak memory.

A copy's tokens are the real chunk's tokens plus the copy number (the tokenizer splits
``text + " #n"`` into exactly that bag), so the synthetic library is tokenized once per
real chunk; tokenization speed is reported separately, on the real chunks.

Each size runs in its own subprocess so peak memory is per size.  Latencies are
wall-clock on a shared machine: compare numbers within a table, not across runs.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import json
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from incidentlib import Library  # noqa: E402
from incidentlib.embeddings import Embedder, create_embedder  # noqa: E402
from incidentlib.search import dense  # noqa: E402
from incidentlib.search.chunks import Chunk  # noqa: E402
from incidentlib.search.engine import SearchConfig, SearchEngine, SearchMode  # noqa: E402
from incidentlib.search.hnsw import HnswIndex  # noqa: E402
from incidentlib.search.lexical import LexicalIndex, Postings, postings_from_tokens  # noqa: E402
from incidentlib.search.store import FORMAT_VERSION, IndexMeta, LoadedIndex  # noqa: E402
from incidentlib.search.tokenize import tokenize  # noqa: E402

#: Depth of the floor's BM25 top-k: the candidates incidentlib takes from each ranking (CANDIDATE_DEPTH).
FLOOR_BM25_K = 50
#: Depth of the floor's vector search: enough chunks for ~50 incidents on the real library.
FLOOR_ANN_K = 100
FLOOR_IVF = f"floor: FAISS IVF-Flat top-{FLOOR_ANN_K} (incidentlib's lists and nprobe)"
FLOOR_IVF_CODES = f"floor: FAISS IVF-SQ8 top-{FLOOR_ANN_K} (incidentlib's own index, no re-ranking)"
PEER_EMBEDDING = "peer: txtai hybrid (incl. query embedding)"
PEER_GIVEN = "peer: txtai hybrid, query vector given"
#: Functions shown per profile: enough to see where a query's time goes below the entry points.
PROFILE_LINES = 25
SIMILAR = "incidentlib similar by incident (its own queries, after the others)"
HYBRID = "incidentlib hybrid (incl. query embedding)"
#: The same hybrid queries with ``SearchConfig.concurrent_legs`` off: BM25 leg, then embedding and dense leg.
HYBRID_SEQUENTIAL = "incidentlib hybrid, legs one after the other (incl. query embedding)"


def rss_mb() -> float:
    """Resident memory of this process now (not the peak)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def stage(name: str) -> None:
    """Progress on stderr with the resident memory at this point (the large sizes run close to the memory budget)."""
    sys.stderr.write(f"{time.strftime('%H:%M:%S')} {name}: RSS {rss_mb():,.0f} MB\n")
    sys.stderr.flush()


def percentile_ms(samples: list[float], q: float) -> float:
    return float(np.percentile(np.array(samples) * 1000, q))


def queries(limit: int) -> list[str]:
    lines = (REPO / "eval" / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["query"] for line in lines[:limit]]


def throughput(sample: int) -> dict[str, float]:
    library = Library.open()
    texts = [c.text for c in library._search_engine.chunks][:sample]
    results = {}
    for backend in ("use-m3", "e5-small"):
        embedder = create_embedder(backend)
        embedder.encode_documents(texts[:8])  # load weights before timing
        started = time.perf_counter()
        embedder.encode_documents(texts)
        results[backend] = len(texts) / (time.perf_counter() - started)
    return results


#: Chunks from which the synthetic BM25 postings are built in a child process before this one grows: the build's
#: sort buffers (several GB at 1.35M chunks) and the engine's other parts then never add up in one process.
BM25_APART_CHUNKS = 1_000_000
POSTINGS_ARRAYS = ("indptr", "indices", "data", "tf", "lengths")


def postings_apart(copies: int, folder: Path) -> tuple[Path, float]:
    """Build the synthetic library's postings in a child process (``--postings-only``); (folder, build seconds)."""
    proc = subprocess.run([sys.executable, __file__, "--postings-only", str(copies), str(folder)],
                          stdout=subprocess.PIPE, text=True, check=True)
    return folder, float(proc.stdout.strip().splitlines()[-1])


def save_postings(postings: Postings, folder: Path) -> None:
    for name in POSTINGS_ARRAYS:
        np.save(folder / f"{name}.npy", getattr(postings, name))
    (folder / "vocabulary.json").write_text(json.dumps({"size": postings.size, "terms": postings.vocabulary}), encoding="utf-8")


def load_postings(folder: Path) -> Postings:
    meta = json.loads((folder / "vocabulary.json").read_text(encoding="utf-8"))
    arrays = {name: np.load(folder / f"{name}.npy", mmap_mode="r" if name == "tf" else None) for name in POSTINGS_ARRAYS}
    return Postings(vocabulary=meta["terms"], size=meta["size"], **arrays)


def postings_only(copies: int, folder: Path) -> None:
    """The child side of :func:`postings_apart`: the same tokens as :func:`synthetic_engine`, postings saved to ``folder``."""
    real_tokens = [tokenize(c.text) for c in Library.open()._search_engine.chunks]
    tokens = CopyTokens(real_tokens, copies)
    started = time.perf_counter()
    postings = postings_from_tokens(iter(tokens), len(tokens))
    elapsed = time.perf_counter() - started
    save_postings(postings, folder)
    sys.stdout.write(f"{elapsed}\n")


class CopyTokens:
    """The tokens of every synthetic chunk, made when read: copy ``c`` of a real chunk has the real chunk's tokens
    plus ``str(c)`` (none added for copy 0); a sequence of ``copies × len(real)`` token lists."""

    def __init__(self, real: list[list[str]], copies: int) -> None:
        self.real, self.copies = real, copies

    def __len__(self) -> int:
        return self.copies * len(self.real)

    def __getitem__(self, position: int) -> list[str]:
        copy, chunk = divmod(position, len(self.real))
        return [*self.real[chunk], str(copy)] if copy else self.real[chunk]

    def __iter__(self):  # type: ignore[no-untyped-def]
        for copy in range(self.copies):
            suffix = str(copy)
            for chunk_tokens in self.real:
                yield [*chunk_tokens, suffix] if copy else chunk_tokens


def synthetic_engine(copies: int, noise: float, hnsw: bool, seed: int = 0, hnsw_threshold: int | None = None,
                     ) -> tuple[SearchEngine, CopyTokens, HnswIndex | None, dict[str, float], int, float]:
    """A SearchEngine over ``copies`` copies of the real library, with perturbed real vectors.

    Returns the engine, the tokens of every chunk (for the floor), the floor's HNSW index (None when not
    built), the timings, the incident count and the resident memory (MB) the engine added.
    The engine's dense index is the kind its size gets (``hnsw_threshold``, default: the library's own);
    with ``hnsw`` an HNSW index is built in any case for the floor and the recall figure (the engine's own
    when its size gets HNSW, else a second one built after the engine's memory was measured).
    """
    library = Library.open(search_config=SearchConfig())
    real_engine = library._search_engine
    real_engine.build()
    real_engine.embedder.encode_queries(["warm-up"])  # the model is part of the baseline, as in a served library
    real_chunks = real_engine.chunks
    _, chunk_to_row = real_engine._row_maps
    real_vectors = np.ascontiguousarray(real_engine.dense.vectors[chunk_to_row])
    real_tokens = [tokenize(c.text) for c in real_chunks]
    rng = np.random.default_rng(seed)
    total = copies * len(real_chunks)
    stage("real library loaded")
    prebuilt = None
    if copies * len(real_chunks) >= BM25_APART_CHUNKS:
        prebuilt = postings_apart(copies, scratch_root := Path(tempfile.mkdtemp(prefix="bench-bm25-")))
        atexit.register(shutil.rmtree, scratch_root, True)
        stage("BM25 postings built in a child process")
    tokens = CopyTokens(real_tokens, copies)  # made chunk by chunk when read: ~1 GB less at 100k than a list
    gc.collect()
    baseline_rss = rss_mb()

    chunks: list[Chunk] = []
    incidents: dict[str, None] = {}
    for copy in range(copies):
        suffix = "" if copy == 0 else f" #{copy}"
        for chunk in real_chunks:
            incident_id = chunk.incident_id if copy == 0 else f"{chunk.incident_id}-{copy}"
            incidents[incident_id] = None
            chunks.append(Chunk(id=f"{incident_id}/{chunk.id.split('/', 1)[1]}", incident_id=incident_id,
                                kind=chunk.kind, lang=chunk.lang, text=chunk.text + suffix))

    stage(f"{len(chunks):,} chunks made")
    timings = {}
    # the dense index first and the BM25 postings after it, so that the float32 vectors (read from disk once an
    # inverted file is saved) and the BM25 build's sort buffers are never in memory together
    threshold = hnsw_threshold or dense.DEFAULT_HNSW_THRESHOLD
    kind = dense.kind_for(total, threshold)
    scratch = Path(tempfile.mkdtemp(prefix="bench-vectors-"))
    atexit.register(shutil.rmtree, scratch, True)
    # an inverted file is built from vectors in a file (as the library's streaming build does) and serves them from
    # disk: they never take anonymous memory, which at 1.35M × 512 is 2.6 GB
    vectors = (np.lib.format.open_memmap(scratch / "vectors.npy", mode="w+", dtype=np.float32, shape=(total, real_vectors.shape[1]))
               if kind == "ivf" else np.empty((total, real_vectors.shape[1]), dtype=np.float32))
    for copy in range(copies):
        block = real_vectors if copy == 0 else real_vectors + rng.normal(scale=noise, size=real_vectors.shape).astype(np.float32)
        vectors[copy * len(real_chunks):(copy + 1) * len(real_chunks)] = block / np.linalg.norm(block, axis=1, keepdims=True)
    stage("vectors made")
    hnsw_index = None
    if kind == "hnsw":
        started = time.perf_counter()
        hnsw_index = HnswIndex.build(vectors)
        timings["hnsw_build_s"] = time.perf_counter() - started
        index = hnsw_index
        del vectors  # the HNSW index holds the vectors: keep one copy, as a served library does
    elif kind == "ivf":
        vectors.flush()
        started = time.perf_counter()
        built = dense.create(vectors, threshold)
        timings["incidentlib IVF build (lists, codes, nprobe calibration)"] = time.perf_counter() - started
        stage("inverted file built")
        del vectors  # served as a server loads it: the codes in memory, the float32 rows read from disk
        saved = scratch / "index"
        saved.mkdir()
        built.save(saved)
        del built
        gc.collect()
        index = dense.load(saved, "ivf")
    else:
        index = dense.create(vectors, threshold)
        del vectors  # the exact index is this matrix

    stage(f"dense index ready ({index.kind})")
    if prebuilt is not None:
        lexical = LexicalIndex(postings=load_postings(prebuilt[0]))
        timings["bm25_build_s"] = prebuilt[1]
    else:
        started = time.perf_counter()
        lexical = LexicalIndex(postings=postings_from_tokens(iter(tokens), len(tokens)))
        timings["bm25_build_s"] = time.perf_counter() - started
    gc.collect()
    stage("BM25 built")
    engine = SearchEngine(SimpleNamespace(incidents=incidents, root=REPO, content_hash="synthetic"),
                          SearchConfig(hnsw_threshold=threshold))
    meta = IndexMeta(format_version=FORMAT_VERSION, embedder="use-m3", dim=index.vectors.shape[1], content_hash="synthetic",
                     chunks=len(chunks), index_kind=index.kind, build="synthetic", built_at=0.0)
    engine.__dict__.update(chunks=chunks, lexical=lexical, embedder=real_engine.embedder)
    engine.use_index(LoadedIndex(index, [c.id for c in chunks], meta))
    for text in queries(3):  # the lazily built row maps and groupings belong to the served engine
        engine.search(text, k=10)
    gc.collect()
    stage("engine ready")
    engine_rss = rss_mb() - baseline_rss
    if hnsw and hnsw_index is None:
        started = time.perf_counter()
        hnsw_index = HnswIndex.build(engine.dense.vectors)
        timings["hnsw_build_s"] = time.perf_counter() - started
    return engine, tokens, hnsw_index, timings, len(incidents), engine_rss


def similar_latency(engine: SearchEngine, copies: int, count: int) -> tuple[dict, float, float]:
    """"Similar incidents" to ``count`` incidents spread over the synthetic library, through
    :class:`~incidentlib.search.similarity.SimilarityIndex` (the path of ``Library.similar``; default
    settings: equal weights, no neighbourhood).  The synthetic incidents are copies of the real records
    under the synthetic ids.  Returns the latencies, the seconds its lazily built parts took on the first
    request, and the resident memory (MB) they added."""
    from incidentlib.search.similarity import SimilarityIndex

    real = Library.open().data
    copied = {}
    for copy in range(copies):
        for incident in real.incidents.values():
            incident_id = incident.id if copy == 0 else f"{incident.id}-{copy}"
            copied[incident_id] = incident if copy == 0 else incident.model_copy(update={"id": incident_id})
    engine.data = SimpleNamespace(incidents={i: copied[i] for i in engine._incident_ids}, vocab=real.vocab,
                                  root=REPO, content_hash="synthetic")
    del copied
    gc.collect()
    before = rss_mb()
    index = SimilarityIndex(engine)
    ids = engine._incident_ids
    picked = [ids[round(i * (len(ids) - 1) / max(count - 1, 1))] for i in range(count)]
    started = time.perf_counter()
    index.rank(index.incident_query(engine.data.incidents[picked[0]]), 10)  # builds the lazy parts
    first = time.perf_counter() - started
    gc.collect()
    added = rss_mb() - before
    samples = []
    for incident_id in picked:
        started = time.perf_counter()
        index.rank(index.incident_query(engine.data.incidents[incident_id]), 10)
        samples.append(time.perf_counter() - started)
    return {"p50": percentile_ms(samples, 50), "p99": percentile_ms(samples, 99)}, first, added


class TxtaiPeer:
    """txtai's ``Embeddings`` with ``hybrid=True`` (its own BM25 plus its default ANN, FAISS) over the same chunk
    texts and the same vectors: txtai's external-vectors method calls :meth:`transform` for the vectors of
    what it indexes (handed back in order, each batch checked against the texts txtai passed) and of each
    query (embedded with the engine's use-m3, or the precomputed query vector when one is set)."""

    def __init__(self, texts: list[str], vectors: np.ndarray, embedder: Embedder) -> None:
        from txtai import Embeddings

        self.texts, self.vectors, self.embedder = texts, vectors, embedder
        self.cursor = 0
        self.query_vector: np.ndarray | None = None
        # txtai calls a plain function as the transform (any other callable it instantiates first)
        self.embeddings = Embeddings(method="external", transform=lambda texts: self.transform(texts), hybrid=True, content=False)

    def transform(self, texts: list[str]) -> np.ndarray:
        if self.cursor < len(self.texts):  # indexing: the rows in the order given to index()
            end = self.cursor + len(texts)
            if texts != self.texts[self.cursor:end]:
                raise RuntimeError(f"txtai asked for vectors of other texts than rows {self.cursor}..{end}")
            self.cursor = end
            return self.vectors[self.cursor - len(texts):end]
        if self.query_vector is not None:
            return self.query_vector.reshape(1, -1)
        return self.embedder.encode_queries(texts)

    def build(self) -> None:
        self.embeddings.index((row, text, None) for row, text in enumerate(self.texts))
        self.texts = []  # the peer keeps only what txtai keeps
        self.vectors = None  # type: ignore[assignment]

    def search(self, text: str, vector: np.ndarray | None = None, k: int = 10) -> list:
        self.query_vector = vector
        try:
            return self.embeddings.search(text, k)
        finally:
            self.query_vector = None

    def ann_ids(self, vector: np.ndarray, k: int) -> list[int]:
        """txtai's ANN alone (for its recall against exact search)."""
        return [int(i) for i, _ in self.embeddings.ann.search(vector.reshape(1, -1), k)[0]]

    def describe(self) -> str:
        settings = self.embeddings.ann.config.get("build", {}).get("settings", {})
        return f"txtai {txtai_version()} hybrid: BM25 (its own) + {self.embeddings.config.get('backend', 'faiss')} {settings.get('components', '')}"


def txtai_version() -> str | None:
    """The installed txtai's version, None when it is not installed (the peer is skipped then)."""
    try:
        from importlib.metadata import version

        return version("txtai")
    except Exception:  # noqa: BLE001 - any failure to find it means "not installed"
        return None


def run_size(copies: int, query_count: int, hnsw: bool, floor_bm25_index: bool = True, hnsw_threshold: int | None = None,
             peer: bool = True, similar_count: int = 0, profile_count: int = 0, ivf_floor: str = "flat") -> dict:
    import bm25s

    engine, tokens, hnsw_index, timings, incident_count, engine_rss = synthetic_engine(
        copies, noise=0.05, hnsw=hnsw, hnsw_threshold=hnsw_threshold)
    rss = {"incidentlib engine (chunks, BM25 postings, dense index)": engine_rss}
    floor_bm25 = bm25s.BM25(k1=1.2, b=0.75)
    if floor_bm25_index:
        before = rss_mb()
        started = time.perf_counter()
        floor_bm25.index([t or ["∅"] for t in tokens], show_progress=False)
        timings["bm25s_build_s"] = time.perf_counter() - started
        gc.collect()
        rss["floor: bm25s"] = rss_mb() - before
    del tokens
    gc.collect()
    stage("bm25s floor built")
    texts = queries(query_count)
    # in query-sized batches (one BLAS thread, as a served query): one batch of 100 took over 9 GB at 100k incidents
    query_vectors = np.vstack([engine.embedder.encode_queries(texts[i:i + 16]) for i in range(0, len(texts), 16)])
    vectors = engine.dense.vectors
    stage("queries embedded")
    txtai_peer = None
    skipped = None
    if peer and txtai_version() is None:
        skipped = "txtai is not installed (pip install 'incidentlib[bench]'): the peer rows are skipped"
        sys.stderr.write(skipped + "\n")
    elif peer:
        sys.stderr.write(f"building the txtai peer over {len(engine.chunks):,} chunks …\n")
        importlib.import_module("txtai")  # its import (transformers, torch) is not index memory: keep it out of the delta

        gc.collect()
        before = rss_mb()
        txtai_peer = TxtaiPeer([c.text for c in engine.chunks], vectors, engine.embedder)
        started = time.perf_counter()
        txtai_peer.build()
        timings["txtai_build_s"] = time.perf_counter() - started
        txtai_peer.search(texts[0], query_vectors[0])
        gc.collect()
        rss[f"peer: txtai {txtai_version()} (BM25 + ANN)"] = rss_mb() - before
    floor_kind, ivf_floor = ivf_floor, None
    own_index = engine.dense.index
    if own_index.kind == "ivf" and floor_kind == "flat":  # the floor for an inverted file: FAISS's own, float32 lists, same lists and nprobe
        import faiss

        gc.collect()
        before = rss_mb()
        started = time.perf_counter()
        lists, nprobe = int(own_index.lists), int(own_index.nprobe)  # type: ignore[attr-defined]
        ivf_floor = faiss.index_factory(vectors.shape[1], f"IVF{lists},Flat", faiss.METRIC_INNER_PRODUCT)
        sample = np.sort(np.random.default_rng(0).choice(len(vectors), min(len(vectors), lists * 64), replace=False))
        ivf_floor.train(np.ascontiguousarray(vectors[sample]))
        for start in range(0, len(vectors), 262_144):
            ivf_floor.add(np.ascontiguousarray(vectors[start:start + 262_144]))
        ivf_floor.nprobe = nprobe
        timings["floor_ivf_build_s"] = time.perf_counter() - started
        gc.collect()
        rss["floor: FAISS IVF-Flat"] = rss_mb() - before
    stage("timing queries")
    serving_rss = rss_mb()  # engine + floor indexes (+ peer), before the timed queries
    known = floor_bm25.vocab_dict if floor_bm25_index else {}
    query_tokens = [[t for t in tokenize(q) if t in known] for q in texts]

    def floor_bm25_top(i: int) -> None:
        if query_tokens[i]:
            floor_bm25.retrieve([query_tokens[i]], k=FLOOR_BM25_K, show_progress=False, n_threads=1)

    hybrid_sequential, hybrid_given_vector = hybrid_variants(engine, query_vectors)
    # the two paths must rank alike before their times mean anything
    differ = [t for i, t in enumerate(texts) if engine.search(t, k=10, mode=SearchMode.hybrid) != hybrid_sequential(i, t)]
    if differ:
        raise RuntimeError(f"concurrent and sequential hybrid legs rank {len(differ)} queries differently, e.g. {differ[0]!r}")

    operations = {
        "incidentlib lexical": lambda i, t: engine.search(t, k=10, mode=SearchMode.lexical),
        "incidentlib dense (incl. query embedding)": lambda i, t: engine.search(t, k=10, mode=SearchMode.dense),
        HYBRID: lambda i, t: engine.search(t, k=10, mode=SearchMode.hybrid),
        HYBRID_SEQUENTIAL: hybrid_sequential,
        "incidentlib hybrid, query vector given": hybrid_given_vector,
        "floor: query embedding (use-m3)": lambda i, t: engine.embedder.encode_queries([t]),
        f"numpy brute force top-{FLOOR_ANN_K}": lambda i, t: np.argpartition(-(vectors @ query_vectors[i]), FLOOR_ANN_K)[:FLOOR_ANN_K],
    }
    if floor_bm25_index:
        operations[f"floor: bm25s top-{FLOOR_BM25_K}"] = lambda i, t: floor_bm25_top(i)
    if hnsw_index is not None:
        operations[f"floor: FAISS HNSW top-{FLOOR_ANN_K}"] = lambda i, t: hnsw_index.search(query_vectors[i], FLOOR_ANN_K)
    if ivf_floor is not None:
        operations[FLOOR_IVF] = lambda i, t: ivf_floor.search(query_vectors[i:i + 1], FLOOR_ANN_K)
    elif own_index.kind == "ivf":  # FAISS alone on the engine's own lists and codes: no memory added
        own_faiss = own_index._index  # type: ignore[attr-defined]
        operations[FLOOR_IVF_CODES] = lambda i, t: own_faiss.search(query_vectors[i:i + 1], FLOOR_ANN_K)
    if txtai_peer is not None:
        operations[PEER_EMBEDDING] = lambda i, t: txtai_peer.search(t)
        operations[PEER_GIVEN] = lambda i, t: txtai_peer.search(t, query_vectors[i])
    for i, text in enumerate(texts[:3]):  # warm caches
        for operation in operations.values():
            operation(i, text)
    # query by query, every operation in turn: a load change on a shared machine hits all of them alike
    results: dict[str, list[float]] = {name: [] for name in operations}
    for i, text in enumerate(texts):
        for name, operation in operations.items():
            started = time.perf_counter()
            operation(i, text)
            results[name].append(time.perf_counter() - started)
    recall: dict[str, float] = {}
    exact = [set(np.argpartition(-(vectors @ q), 10)[:10].tolist()) for q in query_vectors]
    if hnsw_index is not None:
        recall["FAISS HNSW (M=32, efSearch=128; incidentlib's index from 200k vectors)"] = float(np.mean(
            [len(e & set(hnsw_index.search(q, 10)[1].tolist())) / 10 for e, q in zip(exact, query_vectors, strict=True)]))
    if own_index.kind != "flat" and own_index is not hnsw_index:
        recall[f"incidentlib's own dense index ({own_index.kind})"] = float(np.mean(
            [len(e & set(own_index.search(q, 10)[1].tolist())) / 10 for e, q in zip(exact, query_vectors, strict=True)]))
    if ivf_floor is not None:
        recall["FAISS IVF-Flat floor (same lists and nprobe)"] = float(np.mean(
            [len(e & set(ivf_floor.search(q.reshape(1, -1), 10)[1][0].tolist())) / 10 for e, q in zip(exact, query_vectors, strict=True)]))
    if txtai_peer is not None:
        recall[f"txtai's ANN ({txtai_peer.describe().split(' + ', 1)[1]})"] = float(np.mean(
            [len(e & set(txtai_peer.ann_ids(q, 10))) / 10 for e, q in zip(exact, query_vectors, strict=True)]))
    peer_text = txtai_peer.describe() if txtai_peer is not None else skipped
    latency = {name: {"p50": percentile_ms(s, 50), "p99": percentile_ms(s, 99)} for name, s in results.items()}
    sys.stderr.write(json.dumps({"latency_ms": latency, "build_s": timings, "recall_at_10": recall, "rss_delta_mb": rss}) + "\n")
    # the peer and the floor are not needed past this point: free them before the similar-incidents index is built
    operations.clear()
    txtai_peer = floor_bm25 = None  # the closures above hold them through these names
    gc.collect()
    # the same incidentlib queries again with the peer and the floor gone: what the engine does in a process of its own
    alone = {f"{name}, after the peer and floor are freed": operation for name, operation in (
        ("incidentlib dense (incl. query embedding)", lambda i, t: engine.search(t, k=10, mode=SearchMode.dense)),
        (HYBRID, lambda i, t: engine.search(t, k=10, mode=SearchMode.hybrid)),
        (HYBRID_SEQUENTIAL, hybrid_sequential),
        ("incidentlib hybrid, query vector given", hybrid_given_vector))}
    samples: dict[str, list[float]] = {name: [] for name in alone}
    for i, text in enumerate(texts):
        for name, operation in alone.items():
            started = time.perf_counter()
            operation(i, text)
            samples[name].append(time.perf_counter() - started)
    latency |= {name: {"p50": percentile_ms(s, 50), "p99": percentile_ms(s, 99)} for name, s in samples.items()}
    similar = None
    if similar_count:
        similar, timings["similar_first_request_s"], rss["similar-incidents index (built on the first request)"] = \
            similar_latency(engine, copies, similar_count)
    profiles = {}
    if profile_count:
        # cProfile sees the calling thread only: the sequential path shows both legs, the concurrent one the wait
        profiles[HYBRID_SEQUENTIAL] = profile_text(lambda: [hybrid_sequential(0, t) for t in texts[:profile_count]])
        profiles[f"{HYBRID}, legs concurrent (the calling thread)"] = profile_text(
            lambda: [engine.search(t, k=10, mode=SearchMode.hybrid) for t in texts[:profile_count]])
        if similar_count:
            from incidentlib.search.similarity import SimilarityIndex

            index = SimilarityIndex(engine)
            picked = engine._incident_ids[:: max(1, len(engine._incident_ids) // profile_count)][:profile_count]
            index.rank(index.incident_query(engine.data.incidents[picked[0]]), 10)  # lazy parts outside the profile
            profiles["incidentlib similar by incident"] = profile_text(
                lambda: [index.rank(index.incident_query(engine.data.incidents[i]), 10) for i in picked])
            del index
    return {
        "incidents": incident_count,
        "chunks": len(engine.chunks),
        "dense_index": engine.dense.index.describe(),
        "peer": peer_text,
        "latency_ms": latency | ({SIMILAR: similar} if similar else {}),
        "build_s": timings,
        "recall_at_10": recall,
        "rss_delta_mb": rss,
        "serving_rss_mb": serving_rss,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "profiles": profiles,
    }


def hybrid_variants(engine: SearchEngine, query_vectors: np.ndarray) -> tuple[Callable[[int, str], list],
                                                                              Callable[[int, str], None]]:
    """Two timed operations on query ``i`` with text ``text``: hybrid search with the legs one after the other
    (``concurrent_legs`` off for the call), and the two legs fused with the query vector given (row ``i``)."""
    concurrent_config = engine.config
    sequential_config = concurrent_config.model_copy(update={"concurrent_legs": False})

    def hybrid_sequential(i: int, text: str) -> list:
        engine.config = sequential_config
        try:
            return engine.search(text, k=10, mode=SearchMode.hybrid)
        finally:
            engine.config = concurrent_config

    def hybrid_given_vector(i: int, text: str) -> None:
        depth = engine.config.candidate_depth
        engine.fuse_rankings(engine.rank_lexical(text, None, depth), engine.rank_dense_vector(query_vectors[i], None, depth), 10)

    return hybrid_sequential, hybrid_given_vector


def profile_text(work: Callable[[], object], lines: int = PROFILE_LINES) -> str:
    """cProfile of ``work()``: the top ``lines`` functions by cumulative time, as pstats prints them."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    profiler.runcall(work)
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(lines)
    text = out.getvalue()
    return text[text.index("ncalls"):] if "ncalls" in text else text


def tokenize_rate() -> float:
    """Chunks tokenized per second on the real library."""
    texts = [c.text for c in Library.open()._search_engine.chunks]
    started = time.perf_counter()
    for text in texts:
        tokenize(text)
    return len(texts) / (time.perf_counter() - started)


NOTES = """
## Notes

- Libraries above the real one are synthetic: copies of the real incidents whose chunk
  texts carry the copy number and whose vectors are the real vectors plus Gaussian noise
  (σ = 0.05 per dimension, a noise vector of norm ≈ 1.1 against unit vectors), renormalised:
  a chunk's copies form a loose cluster around it (cosine ≈ 0.66 to the original). The ANN
  recall figures are for this data, not for real incidents.
- incidentlib rows run the whole ranking path of `SearchEngine` (BM25 over the postings of
  the query's tokens, exact or HNSW vector search, per-incident max, fusion); "dense" and
  "hybrid" include embedding the query with use-m3. The floor rows time the libraries alone
  on the same tokens, vectors and queries; "floor total" adds the three floor p50s.
- txtai runs as a peer engine doing hybrid search: `Embeddings(hybrid=True)` with its own
  BM25 and its default ANN (FAISS; IVF with its own cell count and nprobe from 5,000 rows),
  fed the same chunk texts and the same vectors through its external-vectors method; it
  returns the top 10 chunks (incidentlib returns incidents, the best chunk of each).
- "RSS added" is what each part added to the process's resident memory when it was built
  (measured after a garbage collection; the engine's figure includes its chunk list, BM25
  postings, dense index and the groupings built on the first queries; the model, the real
  library and the benchmark's token lists are in the baseline). "Process RSS" holds
  everything at once; peak RSS includes the builds.
"""


def _cell(size: dict, op: str) -> str:
    values = size["latency_ms"].get(op)
    return f"{values['p50']:.1f} / {values['p99']:.1f}" if values else "–"


def floor_p50(size: dict, embedding: bool = True) -> float | None:
    """Query embedding (unless not ``embedding``) + bm25s top-k + FAISS HNSW (else IVF-Flat), p50 ms; None when one was not run."""
    latency = size["latency_ms"]
    parts = [latency.get(f"floor: bm25s top-{FLOOR_BM25_K}"),
             latency.get(f"floor: FAISS HNSW top-{FLOOR_ANN_K}") or latency.get(FLOOR_IVF) or latency.get(FLOOR_IVF_CODES)]
    if embedding:
        parts.append(latency.get("floor: query embedding (use-m3)"))
    return sum(p["p50"] for p in parts) if all(parts) else None  # type: ignore[index]


def render(report: dict, command: str) -> str:
    lines = [f"Produced by `{command}` on {report['machine']}, in one run.",
             "Latencies are wall-clock milliseconds over the evaluation queries; compare within a table.", ""]
    if report.get("throughput"):
        lines += ["### Embedding throughput (real library chunks)", "", "| backend | chunks/s |", "|---|---|"]
        lines += [f"| {backend} | {rate:.1f} |" for backend, rate in report["throughput"].items()]
        lines.append("")
    lines += [f"Tokenizer: {report['tokenize_rate']:.0f} chunks/s on the real library's chunks.", ""]
    sizes = report["sizes"]
    lines += ["### Query latency, p50 / p99 (ms)", "",
              "| operation | " + " | ".join(f"{s['incidents']:,} incidents ({s['chunks']:,} chunks)" for s in sizes) + " |",
              "|---|" + "---|" * len(sizes)]
    lines.append("| incidentlib dense index | " + " | ".join(s["dense_index"] for s in sizes) + " |")
    for op in dict.fromkeys(op for s in sizes for op in s["latency_ms"]):
        lines.append(f"| {op} | " + " | ".join(_cell(s, op) for s in sizes) + " |")
    floors = [floor_p50(s) for s in sizes]
    lines.append("| floor total p50 (embedding + bm25s + ANN: HNSW, else IVF-Flat or IVF on incidentlib's codes) | " + " | ".join(f"{f:.1f}" if f else "–" for f in floors) + " |")
    hybrid = HYBRID
    lines.append(f"| **{HYBRID} p50 ÷ {HYBRID_SEQUENTIAL} p50** | " + " | ".join(
        _ratio(s, HYBRID, HYBRID_SEQUENTIAL) for s in sizes) + " |")
    lines.append("| **incidentlib hybrid p50 ÷ floor** | " + " | ".join(
        f"**{s['latency_ms'][hybrid]['p50'] / f:.2f}×**" if f else "–" for s, f in zip(sizes, floors, strict=True)) + " |")
    bare = [floor_p50(s, embedding=False) for s in sizes]
    given = "incidentlib hybrid, query vector given"
    lines.append("| floor without the embedding p50 (bm25s + ANN) | " + " | ".join(f"{f:.1f}" if f else "–" for f in bare) + " |")
    lines.append("| **incidentlib hybrid (vector given) p50 ÷ floor without the embedding** | " + " | ".join(
        f"**{s['latency_ms'][given]['p50'] / f:.2f}×**" if f else "–" for s, f in zip(sizes, bare, strict=True)) + " |")
    lines.append("| **incidentlib hybrid p50 ÷ txtai hybrid p50 (incl. query embedding)** | " + " | ".join(
        _ratio(s, hybrid, PEER_EMBEDDING) for s in sizes) + " |")
    lines.append("| **incidentlib hybrid p50 ÷ txtai hybrid p50 (query vector given)** | " + " | ".join(
        _ratio(s, given, PEER_GIVEN) for s in sizes) + " |")
    lines += ["", "### Index build time (s), ANN recall and memory", "",
              "| | " + " | ".join(f"{s['incidents']:,}" for s in sizes) + " |", "|---|" + "---|" * len(sizes)]
    for key, label in (("bm25_build_s", "incidentlib BM25 build from tokens"), ("bm25s_build_s", "bm25s build from the same tokens"),
                       ("hnsw_build_s", "FAISS HNSW build"),
                       ("incidentlib IVF build (lists, codes, nprobe calibration)", "incidentlib IVF build (lists, codes, nprobe calibration)"),
                       ("floor_ivf_build_s", "FAISS IVF-Flat build (floor)"), ("txtai_build_s", "txtai build (its BM25 + its ANN, vectors given)"),
                       ("similar_first_request_s", "similar by incident: first request (builds its index)")):
        lines.append(f"| {label} | " + " | ".join(f"{s['build_s'][key]:.2f}" if key in s["build_s"] else "–" for s in sizes) + " |")
    for name in dict.fromkeys(n for s in sizes for n in s["recall_at_10"]):
        lines.append(f"| recall@10 vs exact: {name} | " + " | ".join(
            f"{s['recall_at_10'][name]:.3f}" if name in s["recall_at_10"] else "–" for s in sizes) + " |")
    for name in dict.fromkeys(n for s in sizes for n in s["rss_delta_mb"]):
        lines.append(f"| RSS added (MB): {name} | " + " | ".join(
            f"{s['rss_delta_mb'][name]:.0f}" if name in s["rss_delta_mb"] else "–" for s in sizes) + " |")
    lines.append("| process RSS before the timed queries (MB) | " + " | ".join(f"{s['serving_rss_mb']:.0f}" for s in sizes) + " |")
    lines.append("| peak RSS (MB) | " + " | ".join(f"{s['peak_rss_mb']:.0f}" for s in sizes) + " |")
    for s in sizes:
        if s.get("peer"):
            lines.append(f"\nPeer at {s['incidents']:,} incidents: {s['peer']}.")
    for s in sizes:
        for name, text in s.get("profiles", {}).items():
            lines += ["", f"### Profile at {s['incidents']:,} incidents: {name}", "", "```", text.rstrip(), "```"]
    return "\n".join(lines) + "\n" + NOTES


def _ratio(size: dict, ours: str, theirs: str) -> str:
    latency = size["latency_ms"]
    if ours not in latency or theirs not in latency:
        return "–"
    return f"**{latency[ours]['p50'] / latency[theirs]['p50']:.2f}×**"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000], help="library sizes in incidents")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--throughput-sample", type=int, default=256)
    parser.add_argument("--hnsw-up-to", type=int, default=100000, help="also build HNSW for sizes up to this")
    parser.add_argument("--bm25s-up-to", type=int, default=100000, help="build the bm25s floor for sizes up to this")
    parser.add_argument("--hnsw-threshold", type=int, help="vectors at which incidentlib's own index becomes HNSW (default: the library's)")
    parser.add_argument("--output", type=Path, help="also write the Markdown tables here")
    parser.add_argument("--quick", action="store_true", help="fewer queries and a small throughput sample")
    parser.add_argument("--no-throughput", action="store_true", help="skip the embedding throughput table")
    parser.add_argument("--no-peer", action="store_true", help="skip the txtai peer")
    parser.add_argument("--profile", type=int, default=0, help="cProfile this many hybrid and similar queries (0: none)")
    parser.add_argument("--similar", type=int, default=30, help="incidents used as 'similar by incident' queries (0: skip)")
    parser.add_argument("--ivf-floor", choices=["flat", "codes"], default="flat",
                        help="ANN floor when incidentlib's index is an inverted file: a FAISS IVF-Flat with the same lists "
                        "(adds the float32 vectors to memory, ~3.3 GB at 100k) or FAISS searching incidentlib's own codes")
    parser.add_argument("--one-size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--postings-only", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.queries, args.throughput_sample = 20, 32
    if args.postings_only:
        postings_only(int(args.postings_only[0]), Path(args.postings_only[1]))
        return

    real = len(Library.open())
    if args.one_size:
        copies = max(1, round(args.one_size / real))
        result = run_size(copies, args.queries, hnsw=args.one_size <= args.hnsw_up_to,
                          floor_bm25_index=args.one_size <= args.bm25s_up_to, hnsw_threshold=args.hnsw_threshold,
                          peer=not args.no_peer, similar_count=args.similar, profile_count=args.profile,
                          ivf_floor=args.ivf_floor)
        sys.stdout.write(json.dumps(result) + "\n")
        return

    report = {"machine": f"{platform.machine()}, {platform.python_implementation()} {platform.python_version()}",
              "throughput": {} if args.no_throughput else throughput(args.throughput_sample),
              "tokenize_rate": tokenize_rate(), "sizes": []}
    for size in args.sizes:
        sys.stderr.write(f"size {size} …\n")
        proc = subprocess.run([sys.executable, __file__, "--one-size", str(size), "--queries", str(args.queries),
                               "--hnsw-up-to", str(args.hnsw_up_to), "--bm25s-up-to", str(args.bm25s_up_to),
                               *(["--hnsw-threshold", str(args.hnsw_threshold)] if args.hnsw_threshold else []),
                               *(["--no-peer"] if args.no_peer else []), "--similar", str(args.similar),
                               "--ivf-floor", args.ivf_floor,
                               "--profile", str(args.profile)], stdout=subprocess.PIPE, text=True, check=True)
        report["sizes"].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    command = "python bench/bench_search.py " + " ".join(sys.argv[1:])
    text = render(report, command.strip())
    if args.output:
        args.output.write_text(text, encoding="utf-8")
        args.output.with_suffix(".json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
