"""Search at the size of 1M incidents, from indexes on disk: latency, memory and how long the engine takes to be ready.

    python bench/bench_ann.py --copies 3110 --kinds ivf --mapped --work W   # the vectors and the inverted file
    python bench/bench_search_1m.py --ann-work W --postings P --queries 100

``bench_search.py`` builds its synthetic libraries in memory: at 1M incidents (13.45M chunks) the chunk objects,
the float32 vectors (27.5 GB) and a one-pass BM25 build do not fit this 24 GB machine.  This benchmark serves the
same synthetic library (``--copies`` copies of the bundled library: copy ``c`` of a chunk has the real text plus
``" #c"`` and the real use-m3 vector plus Gaussian noise, renormalised) the way a large library is served:

- the dense index is the inverted file ``bench_ann.py --mapped`` built and saved over the vectors of ``W``
  (loaded as a server loads it: lists mapped, float32 rows read from disk for re-ranking);
- the BM25 postings are built in segments into files (:mod:`incidentlib.search.lexical_segments`) in a child
  process the first time (timed there), then mapped;
- the chunks are a :class:`~incidentlib.search.chunks.ChunkTable` whose columns make each row when read, with each
  chunk's incident as a run column, as the start snapshot holds them.

It reports, in one run: the seconds and memory until the engine answers (index files opened, row maps made, three
warm-up queries); p50/p99 of lexical, dense (incl. the query embedding) and hybrid search (legs at once, legs one
after the other, and with the query vector given), next to the query embedding alone and FAISS alone on the same
lists and codes (the ANN floor); recall@10 of the dense index against exact search on real queries (the exact
answers ``bench_ann.py`` computed); and resident memory after the queries.

The copies make every word of the bundled library 3,110 times as frequent: a query term's postings are 3,110 times
as long as in the bundled library, where a real collection of 1M incidents has a far larger vocabulary. The lexical
leg here is therefore a pessimistic case.
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_ann import RECALL_AT, rss_mb  # noqa: E402
from bench_search import FLOOR_ANN_K, hybrid_variants, percentile_ms, queries, stage  # noqa: E402

from incidentlib import Library  # noqa: E402
from incidentlib.row_sequence import RowSequence, RunColumn  # noqa: E402
from incidentlib.search import dense, lexical_segments  # noqa: E402
from incidentlib.search.chunks import ChunkTable  # noqa: E402
from incidentlib.search.engine import SearchConfig, SearchEngine, SearchMode  # noqa: E402
from incidentlib.search.lexical import ARRAYS, LexicalIndex, Postings  # noqa: E402
from incidentlib.search.store import FORMAT_VERSION, IndexMeta, LoadedIndex  # noqa: E402

HYBRID = "incidentlib hybrid (incl. query embedding)"
HYBRID_SEQUENTIAL = "incidentlib hybrid, legs one after the other (incl. query embedding)"
HYBRID_GIVEN = "incidentlib hybrid, query vector given"
LEXICAL = "incidentlib lexical"
DENSE = "incidentlib dense (incl. query embedding)"
EMBEDDING = "floor: query embedding (use-m3)"
FLOOR_CODES = f"floor: FAISS IVF-SQ8 top-{FLOOR_ANN_K} (incidentlib's own lists and codes, no re-ranking)"


class CopyColumn(RowSequence[str]):
    """Row ``copy · n + i`` is ``real[i]`` for copy 0, else ``make(real[i], copy)``: a column of the synthetic
    library made when read."""

    def __init__(self, real: Sequence[str], copies: int, make: Callable[[str, int], str] | None = None) -> None:
        self.real, self.copies, self.make = list(real), copies, make

    def __len__(self) -> int:
        return self.copies * len(self.real)

    def _row(self, row: int) -> str:
        copy, position = divmod(row, len(self.real))
        value = self.real[position]
        return value if copy == 0 or self.make is None else self.make(value, copy)


def copy_text(text: str, copy: int) -> str:
    return f"{text} #{copy}"  # bench_search.py's recipe: the copy number is one more token


def copy_chunk_id(chunk_id: str, copy: int) -> str:
    incident_id, rest = chunk_id.split("/", 1)
    return f"{incident_id}-{copy}/{rest}"


def real_library() -> tuple[SearchEngine, list[str], list[int]]:
    """The bundled library's engine (built), its incidents in chunk order and each one's chunk count."""
    engine = Library.open(search_config=SearchConfig())._search_engine
    engine.build()
    order, offsets, grouped = engine._incident_chunks
    if not grouped:
        raise RuntimeError("the bundled library's chunks are not grouped by incident")
    counts = np.diff(offsets).tolist()
    return engine, list(engine._incident_ids), counts


def postings_only(copies: int, folder: Path) -> None:
    """Child process: the synthetic library's postings in segments into ``folder/arrays``, the vocabulary beside."""
    engine, _, _ = real_library()
    texts = CopyColumn([chunk.text for chunk in engine.chunks], copies, copy_text)
    started = time.perf_counter()

    def progress(done: int, total: int) -> None:
        elapsed = time.perf_counter() - started
        sys.stderr.write(f"    counted {done:,} of {total:,} chunks in {elapsed:.0f} s, "
                         f"about {(total - done) * elapsed / max(done, 1):.0f} s of counting left\n")

    folder.mkdir(parents=True, exist_ok=True)
    if (folder / "arrays").exists():  # an interrupted build's (vocabulary.json is written last)
        shutil.rmtree(folder / "arrays")
    postings = lexical_segments.build_postings_in_segments(texts, folder / "arrays", progress=progress)
    seconds = time.perf_counter() - started
    (folder / "vocabulary.json").write_text(json.dumps({"size": postings.size, "terms": postings.vocabulary,
                                                        "build_s": seconds, "copies": copies}), encoding="utf-8")
    sys.stdout.write(f"{seconds}\n")


def mapped_postings(folder: Path) -> Postings:
    meta = json.loads((folder / "vocabulary.json").read_text(encoding="utf-8"))
    arrays = {name: np.load(folder / "arrays" / f"{name}.npy", mmap_mode="r") for name in ARRAYS}
    return Postings(vocabulary=meta["terms"], size=meta["size"], **arrays)


def ready_engine(real: SearchEngine, incident_ids: list[str], counts: list[int], copies: int, ann: Path,
                 postings: Path) -> tuple[SearchEngine, dict[str, float]]:
    """The 1M engine from the files on disk, as a server opens them; seconds per step."""
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    real_chunks = real.chunks
    names = [*incident_ids, *(f"{incident_id}-{copy}" for copy in range(1, copies) for incident_id in incident_ids)]
    table = ChunkTable(ids=CopyColumn([c.id for c in real_chunks], copies, copy_chunk_id),
                       incident_ids=RunColumn(names, counts * copies),
                       kinds=CopyColumn([c.kind for c in real_chunks], copies),
                       langs=CopyColumn([c.lang for c in real_chunks], copies),
                       digests=CopyColumn([c.digest for c in real_chunks], copies),
                       texts=CopyColumn([c.text for c in real_chunks], copies, copy_text))
    seconds["chunk table (columns made when read, incidents as runs)"] = time.perf_counter() - started
    step = time.perf_counter()
    index = dense.load(ann / "ivf", "ivf")
    if len(index) != len(table):
        raise SystemExit(f"the inverted file holds {len(index):,} rows for {len(table):,} chunks: other --copies?")
    seconds["inverted file opened (lists mapped)"] = time.perf_counter() - step
    step = time.perf_counter()
    lexical = LexicalIndex(postings=mapped_postings(postings))
    seconds["BM25 postings opened (mapped) and vocabulary read"] = time.perf_counter() - step
    step = time.perf_counter()
    engine = SearchEngine(SimpleNamespace(incidents=dict.fromkeys(names), root=REPO, content_hash="synthetic", chunks=None),
                          SearchConfig())
    engine.__dict__.update(chunks=table, lexical=lexical, embedder=real.embedder)
    meta = IndexMeta(format_version=FORMAT_VERSION, embedder=real.embedder.name, dim=int(index.vectors.shape[1]),
                     content_hash="synthetic", chunks=len(table), index_kind=index.kind, build="synthetic", built_at=0.0)
    engine.use_index(LoadedIndex(index, table.ids, meta, rows_are_chunks=True))  # type: ignore[arg-type]  # a lazy column
    for text in queries(3):  # the row maps and groupings are made on the first queries
        engine.search(text, k=10)
    seconds["engine made and three first queries"] = time.perf_counter() - step
    seconds["in all"] = time.perf_counter() - started
    return engine, seconds


def measure(ann: Path, postings: Path, query_count: int) -> dict:
    shape = json.loads((ann / "prepared.json").read_text())
    copies = int(shape["copies"])
    real, incident_ids, counts = real_library()
    if sum(counts) != shape["real_chunks"]:
        raise SystemExit(f"{ann} was prepared from {shape['real_chunks']:,} chunks; the bundled library has {sum(counts):,}")
    if not (postings / "vocabulary.json").exists():
        stage(f"building the BM25 postings of {copies * sum(counts):,} chunks in segments (child process)")
        output = subprocess.run([sys.executable, __file__, "--postings-only", str(copies), str(postings)],
                                stdout=subprocess.PIPE, text=True, check=True).stdout
        stage(f"postings built in {float(output.strip().splitlines()[-1]):.1f} s")
    built = json.loads((postings / "vocabulary.json").read_text(encoding="utf-8"))
    if built.get("copies") != copies:
        raise SystemExit(f"{postings} holds the postings of {built.get('copies')} copies, not {copies}")
    texts = queries(query_count)
    real.embedder.encode_queries(texts[:2])  # the model is loaded in a served library before any query
    gc.collect()
    baseline = {"VmRSS": rss_mb(), "RssAnon": rss_mb("RssAnon"), "RssFile": rss_mb("RssFile")}
    stage("opening the 1M engine")
    engine, ready = ready_engine(real, incident_ids, counts, copies, ann, postings)
    stage("engine ready")
    after_ready = {field: rss_mb(field) - baseline[field] for field in baseline}
    query_vectors = np.vstack([engine.embedder.encode_queries(texts[i:i + 16]) for i in range(0, len(texts), 16)])
    own = engine.dense.index
    own_faiss = own._index  # type: ignore[attr-defined]
    hybrid_sequential, hybrid_given_vector = hybrid_variants(engine, query_vectors)
    differ = [t for i, t in enumerate(texts[:20]) if engine.search(t, k=10, mode=SearchMode.hybrid) != hybrid_sequential(i, t)]
    if differ:
        raise RuntimeError(f"concurrent and sequential hybrid legs rank {len(differ)} queries differently, e.g. {differ[0]!r}")
    operations: dict[str, Callable[[int, str], object]] = {
        LEXICAL: lambda i, t: engine.search(t, k=10, mode=SearchMode.lexical),
        DENSE: lambda i, t: engine.search(t, k=10, mode=SearchMode.dense),
        HYBRID: lambda i, t: engine.search(t, k=10, mode=SearchMode.hybrid),
        HYBRID_SEQUENTIAL: hybrid_sequential,
        HYBRID_GIVEN: hybrid_given_vector,
        EMBEDDING: lambda i, t: engine.embedder.encode_queries([t]),
        FLOOR_CODES: lambda i, t: own_faiss.search(query_vectors[i:i + 1], FLOOR_ANN_K),
    }
    stage("timing queries")
    samples: dict[str, list[float]] = {name: [] for name in operations}
    for i, text in enumerate(texts):  # query by query, every operation in turn: a load change hits all alike
        for name, operation in operations.items():
            started = time.perf_counter()
            operation(i, text)
            samples[name].append(time.perf_counter() - started)
    latency = {name: {"p50": percentile_ms(s, 50), "p99": percentile_ms(s, 99)} for name, s in samples.items()}
    truth = np.load(ann / "truth.npy")
    asked = min(len(truth), len(query_vectors))
    recall = float(np.mean([len(set(own.search(query_vectors[i], RECALL_AT)[1].tolist()) & set(truth[i].tolist())) / RECALL_AT
                            for i in range(asked)]))
    after = {field: rss_mb(field) for field in baseline}
    return {"incidents": len(engine._incident_ids), "chunks": len(engine.chunks), "dense_index": own.describe(),
            "bm25_build_s": built["build_s"], "ready_s": ready, "latency_ms": latency, "recall_at_10": recall,
            "recall_queries": asked, "rss_baseline_mb": baseline, "rss_added_at_ready_mb": after_ready,
            "rss_after_queries_mb": after, "queries": len(texts)}


def render(report: dict) -> str:
    lines = [f"{report['incidents']:,} incidents, {report['chunks']:,} chunks; {report['dense_index']}; "
             f"{report['queries']} queries of eval/queries.jsonl", "",
             "| operation | p50 (ms) | p99 (ms) |", "|---|---|---|"]
    lines += [f"| {name} | {v['p50']:.1f} | {v['p99']:.1f} |" for name, v in report["latency_ms"].items()]
    lines += ["", "| the engine until it answers | seconds |", "|---|---|"]
    lines += [f"| {name} | {value:.2f} |" for name, value in report["ready_s"].items()]
    base, added, after = report["rss_baseline_mb"], report["rss_added_at_ready_mb"], report["rss_after_queries_mb"]
    lines += ["", "| resident memory (MB) | VmRSS | of it anonymous | of it mapped files |", "|---|---|---|---|",
              f"| before the engine (library code, the bundled library, use-m3) | {base['VmRSS']:,.0f} | {base['RssAnon']:,.0f} | {base['RssFile']:,.0f} |",
              f"| added when the engine is ready | {added['VmRSS']:,.0f} | {added['RssAnon']:,.0f} | {added['RssFile']:,.0f} |",
              f"| after the timed queries, in all | {after['VmRSS']:,.0f} | {after['RssAnon']:,.0f} | {after['RssFile']:,.0f} |",
              "", f"Recall@10 of the dense index against exact search: {report['recall_at_10']:.3f} "
                  f"({report['recall_queries']} real queries). BM25 build in segments: {report['bm25_build_s']:.1f} s."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ann-work", type=Path, help="bench_ann.py's --work folder (prepared vectors, an ivf folder)")
    parser.add_argument("--postings", type=Path, help="folder of the BM25 postings (built there when missing)")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--postings-only", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.postings_only:
        postings_only(int(args.postings_only[0]), Path(args.postings_only[1]))
        return
    if args.ann_work is None or args.postings is None:
        parser.error("--ann-work and --postings are required")
    report = measure(args.ann_work, args.postings, args.queries)
    sys.stderr.write(json.dumps(report) + "\n")
    sys.stdout.write(render(report) + "\n")


if __name__ == "__main__":
    main()
