"""Search benchmarks: build throughput, query latency at 1k/10k/100k incidents, memory.

    python bench/bench_search.py                      # full run, writes docs/benchmarks.md
    python bench/bench_search.py --sizes 1000 --quick # a smoke run

What is measured, side by side in one run on one machine:

1. Embedding throughput (chunks/s) of each built-in backend on real library chunks.
2. For libraries of N incidents (synthetic copies of the real ones: each copy keeps the
   real chunk texts, with the copy number appended, and a vector that is the real chunk
   vector plus small Gaussian noise, renormalised): query latency p50/p99 of
   lexical (BM25), dense (FAISS flat, including the query embedding), hybrid, the FAISS
   flat and HNSW vector searches alone, and a brute-force numpy baseline; index build
   times; HNSW recall@10 against exact search; and the process's peak RSS.

Each size runs in its own subprocess so peak memory is per size.  Latencies are
wall-clock on a shared machine: compare numbers within a table, not across runs.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from incidentlib import Library  # noqa: E402
from incidentlib.embeddings import create_embedder  # noqa: E402
from incidentlib.search.chunks import Chunk  # noqa: E402
from incidentlib.search.dense import FaissIndex  # noqa: E402
from incidentlib.search.engine import SearchConfig, SearchEngine  # noqa: E402
from incidentlib.search.lexical import LexicalIndex  # noqa: E402
from incidentlib.search.store import IndexMeta, LoadedIndex  # noqa: E402


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


def synthetic_engine(copies: int, noise: float, hnsw: bool, seed: int = 0):
    """A SearchEngine over ``copies`` copies of the real library, with perturbed real vectors."""
    library = Library.open(search_config=SearchConfig())
    real_engine = library._search_engine
    real_engine.build()
    real_chunks = real_engine.chunks
    _, chunk_to_row = real_engine._row_maps
    real_vectors = real_engine.dense.vectors[chunk_to_row]
    rng = np.random.default_rng(seed)

    chunks: list[Chunk] = []
    blocks = []
    incidents: dict[str, None] = {}
    for copy in range(copies):
        suffix = "" if copy == 0 else f" #{copy}"
        for chunk in real_chunks:
            incident_id = chunk.incident_id if copy == 0 else f"{chunk.incident_id}-{copy}"
            incidents[incident_id] = None
            chunks.append(Chunk(id=f"{incident_id}/{chunk.id.split('/', 1)[1]}", incident_id=incident_id,
                                kind=chunk.kind, lang=chunk.lang, text=chunk.text + suffix))
        block = real_vectors if copy == 0 else real_vectors + rng.normal(scale=noise, size=real_vectors.shape).astype(np.float32)
        blocks.append(block / np.linalg.norm(block, axis=1, keepdims=True))
    vectors = np.ascontiguousarray(np.vstack(blocks), dtype=np.float32)

    timings = {}
    started = time.perf_counter()
    lexical = LexicalIndex([c.text for c in chunks])
    timings["bm25_build_s"] = time.perf_counter() - started
    started = time.perf_counter()
    flat = FaissIndex.create(vectors.shape[1], len(vectors), hnsw_threshold=len(vectors) + 1)
    flat.add(vectors)
    timings["flat_build_s"] = time.perf_counter() - started
    hnsw_index = None
    if hnsw:
        started = time.perf_counter()
        hnsw_index = FaissIndex.create(vectors.shape[1], len(vectors), hnsw_threshold=1)
        hnsw_index.add(vectors)
        timings["hnsw_build_s"] = time.perf_counter() - started

    engine = SearchEngine(SimpleNamespace(incidents=incidents, root=REPO, content_hash="synthetic"), SearchConfig())
    meta = IndexMeta(format_version=1, embedder="use-m3", dim=vectors.shape[1], content_hash="synthetic",
                     chunks=len(chunks), index_kind="flat", build="synthetic", built_at=0.0)
    engine.__dict__.update(chunks=chunks, lexical=lexical, embedder=real_engine.embedder,
                           dense=LoadedIndex(flat, [c.id for c in chunks], vectors, meta))
    return engine, vectors, flat, hnsw_index, timings, len(incidents)


def run_size(copies: int, query_count: int, hnsw: bool) -> dict:
    engine, vectors, flat, hnsw_index, timings, incident_count = synthetic_engine(copies, noise=0.05, hnsw=hnsw)
    texts = queries(query_count)
    query_vectors = engine.embedder.encode_queries(texts)
    for text in texts[:3]:  # warm caches
        engine.search(text, k=10)

    def timed(fn) -> list[float]:  # noqa: ANN001
        samples = []
        for i, text in enumerate(texts):
            started = time.perf_counter()
            fn(i, text)
            samples.append(time.perf_counter() - started)
        return samples

    from incidentlib.search.engine import SearchMode

    results = {
        "lexical": timed(lambda i, t: engine.search(t, k=10, mode=SearchMode.lexical)),
        "dense (incl. query embedding)": timed(lambda i, t: engine.search(t, k=10, mode=SearchMode.dense)),
        "hybrid": timed(lambda i, t: engine.search(t, k=10, mode=SearchMode.hybrid)),
        "vector search: FAISS flat": timed(lambda i, t: flat.search(query_vectors[i], 100)),
        "vector search: numpy brute force": timed(lambda i, t: np.argpartition(-(vectors @ query_vectors[i]), 100)[:100]),
    }
    recall = None
    if hnsw_index is not None:
        results["vector search: FAISS HNSW"] = timed(lambda i, t: hnsw_index.search(query_vectors[i], 100))
        hits = []
        for i in range(len(texts)):
            exact = set(flat.search(query_vectors[i], 10)[1].tolist())
            approx = set(hnsw_index.search(query_vectors[i], 10)[1].tolist())
            hits.append(len(exact & approx) / 10)
        recall = float(np.mean(hits))
    return {
        "incidents": incident_count,
        "chunks": len(vectors),
        "latency_ms": {name: {"p50": percentile_ms(s, 50), "p99": percentile_ms(s, 99)} for name, s in results.items()},
        "build_s": timings,
        "hnsw_recall_at_10": recall,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


NOTES = """
## Notes

- Libraries above the real one are synthetic: copies of the real incidents whose chunk
  texts carry the copy number and whose vectors are the real vectors plus Gaussian noise
  (σ = 0.05), renormalised. Near-duplicate copies make approximate search harder than
  real data, so the HNSW recall here is a conservative figure.
- Query latency includes the whole ranking path of `SearchEngine` (BM25 scoring of every
  chunk, FAISS search, per-incident aggregation, fusion); "dense" includes embedding the
  query with use-m3. The vector-search rows time the index alone against numpy.
- Peak RSS is per size (each runs in its own process) and includes the benchmark's own
  copies of the synthetic vectors, so it overstates what a served library of that size needs.
- Embedding throughput is what building an index costs: 1,768 chunks (the bundled
  library) take about 8 s with use-m3 and about 2 minutes with e5-small on this machine.
"""


def render(report: dict, command: str) -> str:
    lines = ["# Benchmarks", "", f"Produced by `{command}` on {report['machine']}, in one run.",
             "Latencies are wall-clock milliseconds over the evaluation queries; compare within a table.", "",
             "## Embedding throughput (real library chunks)", "", "| backend | chunks/s |", "|---|---|"]
    for backend, rate in report["throughput"].items():
        lines.append(f"| {backend} | {rate:.1f} |")
    sizes = report["sizes"]
    lines += ["", "## Query latency, p50 / p99 (ms)", "",
              "| operation | " + " | ".join(f"{s['incidents']:,} incidents ({s['chunks']:,} chunks)" for s in sizes) + " |",
              "|---|" + "---|" * len(sizes)]
    operations = list(dict.fromkeys(op for s in sizes for op in s["latency_ms"]))
    for op in operations:
        cells = [f"{s['latency_ms'][op]['p50']:.1f} / {s['latency_ms'][op]['p99']:.1f}" if op in s["latency_ms"] else "–" for s in sizes]
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    lines += ["", "## Index build time (s), HNSW recall and memory", "",
              "| | " + " | ".join(f"{s['incidents']:,}" for s in sizes) + " |", "|---|" + "---|" * len(sizes)]
    for key, label in (("bm25_build_s", "BM25 build"), ("flat_build_s", "FAISS flat build"), ("hnsw_build_s", "FAISS HNSW build")):
        lines.append(f"| {label} | " + " | ".join(f"{s['build_s'][key]:.2f}" if key in s["build_s"] else "–" for s in sizes) + " |")
    lines.append("| HNSW recall@10 vs exact | " + " | ".join(f"{s['hnsw_recall_at_10']:.3f}" if s["hnsw_recall_at_10"] is not None else "–" for s in sizes) + " |")
    lines.append("| peak RSS (MB) | " + " | ".join(f"{s['peak_rss_mb']:.0f}" for s in sizes) + " |")
    return "\n".join(lines) + "\n" + NOTES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000], help="library sizes in incidents")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--throughput-sample", type=int, default=256)
    parser.add_argument("--hnsw-up-to", type=int, default=100000, help="also build HNSW for sizes up to this")
    parser.add_argument("--output", type=Path, default=REPO / "docs" / "benchmarks.md")
    parser.add_argument("--quick", action="store_true", help="fewer queries and a small throughput sample")
    parser.add_argument("--one-size", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.queries, args.throughput_sample = 20, 32

    real = len(Library.open())
    if args.one_size:
        copies = max(1, round(args.one_size / real))
        print(json.dumps(run_size(copies, args.queries, hnsw=args.one_size <= args.hnsw_up_to)))
        return

    report = {"machine": f"{platform.machine()}, {platform.python_implementation()} {platform.python_version()}",
              "throughput": throughput(args.throughput_sample), "sizes": []}
    for size in args.sizes:
        print(f"size {size} …", file=sys.stderr)
        proc = subprocess.run([sys.executable, __file__, "--one-size", str(size), "--queries", str(args.queries),
                               "--hnsw-up-to", str(args.hnsw_up_to)], capture_output=True, text=True, check=True)
        report["sizes"].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    command = "python bench/bench_search.py " + " ".join(sys.argv[1:])
    text = render(report, command.strip())
    args.output.write_text(text, encoding="utf-8")
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
