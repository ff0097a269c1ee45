"""The dense indexes side by side at one size: build time, recall@10 against exact search, latency, start and memory.

    python bench/bench_ann.py --copies 311            # ≈ 100k incidents, 1.34M vectors of use-m3
    python bench/bench_ann.py --copies 31 --kinds ivf # a smoke run

The vectors are the bundled library's use-m3 chunk vectors, copied ``--copies`` times with Gaussian
noise (σ = 0.05, renormalised), the recipe of ``bench_search.py``.  The queries are the first
``--queries`` questions of eval/queries.jsonl embedded with use-m3, so they are real queries, not
rows of the index.  Exact top-10 answers are computed once (numpy, blockwise).

Each index kind is built in its own process (build seconds, peak memory of the build), saved with
incidentlib's own ``save``, then loaded in a *fresh* process as a server would: load seconds, query
latency p50/p99 (the index alone, query vector given), recall@10 and resident memory after the
queries.  Run one size per invocation; latencies are wall-clock, so compare rows of one run.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from incidentlib.search import dense  # noqa: E402

#: Noise added to each copy of a real vector: enough to make every copy a distinct neighbour, small enough that
#: copies of one chunk stay each other's nearest neighbours (what near-duplicate incidents look like).
NOISE = 0.05
#: Exact answers per query used for recall.
RECALL_AT = 10
KINDS = {"flat": "ExactIndex", "hnsw": "HnswIndex", "ivf": "IvfIndex"}


def rss_mb(field: str = "VmRSS") -> float:
    """Resident memory now: ``VmRSS`` in all, ``RssAnon`` (the process's own) or ``RssFile`` (mapped file pages)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def prepared(work: Path, copies: int, query_count: int) -> dict[str, int] | None:
    """The shape of an earlier :func:`prepare` in ``work`` with the same copies and queries, else None."""
    try:
        shape: dict[str, int] = json.loads((work / "prepared.json").read_text())
        vectors = np.load(work / "vectors.npy", mmap_mode="r")
        truth = np.load(work / "truth.npy")
    except (OSError, ValueError):
        return None
    if (shape.get("copies"), shape.get("queries")) != (copies, query_count) or len(vectors) != shape["vectors"] \
            or truth.shape != (query_count, RECALL_AT):
        return None
    return shape


def prepare(work: Path, copies: int, query_count: int) -> dict[str, int]:
    """Write vectors.npy, queries.npy and truth.npy (exact top-10 row ids per query) into ``work``."""
    from incidentlib import Library

    library = Library.open()
    engine = library._search_engine
    engine.build()
    _, chunk_to_row = engine._row_maps
    real = np.ascontiguousarray(engine.dense.vectors[chunk_to_row], dtype=np.float32)
    lines = (REPO / "eval" / "queries.jsonl").read_text(encoding="utf-8").splitlines()[:query_count]
    queries = engine.embedder.encode_queries([json.loads(line)["query"] for line in lines]).astype(np.float32)
    rng = np.random.default_rng(0)
    vectors = np.lib.format.open_memmap(work / "vectors.npy", mode="w+", dtype=np.float32, shape=(copies * len(real), real.shape[1]))
    for copy in range(copies):
        block = real if copy == 0 else real + rng.normal(scale=NOISE, size=real.shape).astype(np.float32)
        vectors[copy * len(real):(copy + 1) * len(real)] = block / np.linalg.norm(block, axis=1, keepdims=True)
    vectors.flush()
    truth = np.zeros((len(queries), RECALL_AT), dtype=np.int64)
    best = np.full((len(queries), 0), -np.inf, dtype=np.float32)
    ids = np.zeros((len(queries), 0), dtype=np.int64)
    block_rows = 262_144
    for start in range(0, len(vectors), block_rows):
        scores = queries @ np.asarray(vectors[start:start + block_rows]).T
        part = np.argpartition(-scores, RECALL_AT - 1, axis=1)[:, :RECALL_AT]
        best = np.hstack([best, np.take_along_axis(scores, part, axis=1)])
        ids = np.hstack([ids, part + start])
        keep = np.argsort(-best, axis=1, kind="stable")[:, :RECALL_AT]
        best, ids = np.take_along_axis(best, keep, axis=1), np.take_along_axis(ids, keep, axis=1)
    truth[:] = ids
    np.save(work / "queries.npy", queries)
    np.save(work / "truth.npy", truth)
    shape = {"vectors": len(vectors), "dim": int(vectors.shape[1]), "real_chunks": len(real), "queries": len(queries),
             "copies": copies}
    (work / "prepared.json").write_text(json.dumps(shape))  # last: its presence says the three files are complete
    return shape


def build_one(work: Path, kind: str, mapped: bool = False) -> dict[str, float]:
    """In its own process: build ``kind`` over the vectors and save it under ``work/kind``.

    ``mapped`` (the inverted file only): the vectors file is linked into ``work/kind`` and the index built over it
    memory-mapped, as a build of more rows than memory holds must be; saving then writes the codes alone."""
    folder = work / kind
    folder.mkdir(exist_ok=True)
    if mapped:
        linked = folder / "vectors.npy"
        linked.unlink(missing_ok=True)
        linked.hardlink_to(work / "vectors.npy")  # the same file: nothing is copied, and the index saves beside it
        vectors = np.load(linked, mmap_mode="r")
    else:
        vectors = np.load(work / "vectors.npy")
    before = rss_mb()
    started = time.perf_counter()
    adding = [started, started]  # when adding began (after training), when progress was last shown

    def progress(done: int, total: int) -> None:
        now = time.perf_counter()
        if not done:
            adding[:] = [now, now]
            print(f"    lists trained in {now - started:.0f} s", file=sys.stderr, flush=True)
        elif now - adding[1] >= 30 or done == total:
            rate = done / (now - adding[0])
            print(f"    added {done:,} of {total:,} rows in {now - adding[0]:.0f} s, "
                  f"about {(total - done) / rate:.0f} s of adding left", file=sys.stderr, flush=True)
            adding[1] = now

    index = dense.create(vectors, hnsw_threshold=1 if kind != "flat" else len(vectors) + 1,
                         ivf_threshold=1 if kind == "ivf" else len(vectors) + 1, progress=progress)
    seconds = time.perf_counter() - started
    if kind == "ivf":
        trained, added = adding[0] - started, adding[1] - adding[0]
        print(f"    built in {seconds:.0f} s: lists trained {trained:.0f} s, rows added {added:.0f} s, nprobe calibrated "
              f"{seconds - trained - added:.0f} s", file=sys.stderr, flush=True)
    assert index.kind == kind, (index.kind, kind)
    files = index.save(folder)
    described = index.describe()
    return {"build_s": seconds, "build_peak_mb": peak_mb(), "input_mb": before,
            "files_mb": sum((folder / f).stat().st_size for f in files) / 2**20, "describe": described}  # type: ignore[dict-item]


def serve_one(work: Path, kind: str) -> dict[str, float]:
    """In a fresh process: load the saved index, answer every query, measure latency, recall and memory."""
    import faiss  # noqa: F401  (imported before timing: a server has its modules loaded)

    queries = np.load(work / "queries.npy")
    truth = np.load(work / "truth.npy")
    baseline = rss_mb()
    started = time.perf_counter()
    index = dense.load(work / kind, kind)
    load_s = time.perf_counter() - started
    for query in queries[:5]:  # warm-up, not timed
        index.search(query, RECALL_AT)
    times, found = [], 0
    for query, wanted in zip(queries, truth, strict=True):
        started = time.perf_counter()
        _, ids = index.search(query, RECALL_AT)
        times.append(time.perf_counter() - started)
        found += len(set(ids.tolist()) & set(wanted.tolist()))
    samples = np.array(times) * 1000
    return {"load_s": load_s, "p50_ms": float(np.percentile(samples, 50)), "p99_ms": float(np.percentile(samples, 99)),
            "recall": found / truth.size, "rss_delta_mb": rss_mb() - baseline, "rss_mb": rss_mb(),
            "rss_anon_mb": rss_mb("RssAnon"), "rss_file_mb": rss_mb("RssFile")}


def sweep(work: Path, steps: list[int]) -> None:
    """Recall@10 of the saved inverted file at each ``nprobe``: real queries next to the calibration's mixtures."""
    from incidentlib.search.ivf import CALIBRATION_QUERIES, CALIBRATION_SEED, IvfIndex, _exact_top

    index = dense.load(work / "ivf", "ivf")
    assert isinstance(index, IvfIndex)
    queries, truth = np.load(work / "queries.npy"), np.load(work / "truth.npy")
    vectors = index.vectors
    rng = np.random.default_rng(CALIBRATION_SEED)
    rows = len(vectors)
    mixed = np.asarray(vectors[rng.choice(rows, CALIBRATION_QUERIES)]) + np.asarray(vectors[rng.choice(rows, CALIBRATION_QUERIES)])
    mixed = (mixed / np.linalg.norm(mixed, axis=1, keepdims=True)).astype(np.float32)
    mixed_truth = _exact_top(vectors, mixed, RECALL_AT)
    print(f"| nprobe | real queries | mixtures of two rows |  (calibrated: {index.nprobe})")
    print("|---|---|---|")
    for nprobe in steps:
        index._index.nprobe = nprobe
        recalls = [sum(len(set(index.search(q, RECALL_AT)[1].tolist()) & set(t.tolist())) for q, t in zip(qs, ts, strict=True)) / ts.size
                   for qs, ts in ((queries, truth), (mixed, mixed_truth))]
        print(f"| {nprobe} | {recalls[0]:.3f} | {recalls[1]:.3f} |", flush=True)


def child(args: list[str]) -> dict[str, float]:
    output = subprocess.run([sys.executable, __file__, *args], stdout=subprocess.PIPE, text=True, check=True).stdout
    result: dict[str, float] = json.loads(output.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", type=int, default=311, help="copies of the bundled library's vectors (311 ≈ 100k incidents)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--kinds", nargs="+", default=["ivf", "hnsw", "flat"], choices=sorted(KINDS))
    parser.add_argument("--work", type=Path, help="keep the vectors and indexes here (default: a temporary folder)")
    parser.add_argument("--sweep", type=int, nargs="*", metavar="NPROBE",
                        help="after the table, recall of the inverted file at these nprobe values (real queries and "
                             "the calibration's mixtures of two rows)")
    parser.add_argument("--mapped", action="store_true",
                        help="build the inverted file over the vectors file memory-mapped (needed when the vectors "
                             "outgrow memory: 1M incidents are 27.5 GB of float32 rows)")
    parser.add_argument("--child", nargs=3, metavar=("STEP", "WORK", "KIND"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        step, work, kind = args.child
        result = build_one(Path(work), kind, args.mapped) if step == "build" else serve_one(Path(work), kind)
        print(json.dumps(result))
        return
    with tempfile.TemporaryDirectory(prefix="bench-ann-") as scratch:
        work = args.work or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        shape = prepared(work, args.copies, args.queries)
        verb = "reused from an earlier run"
        if shape is None:
            shape, verb = prepare(work, args.copies, args.queries), f"prepared in {time.perf_counter() - started:.0f} s"
        print(f"{shape['vectors']:,} vectors × {shape['dim']} ({args.copies} copies of {shape['real_chunks']:,} real chunks), "
              f"{shape['queries']} real queries; {verb}", flush=True)
        rows = {}
        for kind in args.kinds:
            built = child(["--child", "build", str(work), kind, *(["--mapped"] if args.mapped and kind == "ivf" else [])])
            print(f"  {kind}: built in {built['build_s']:.1f} s", flush=True)
            served = child(["--child", "serve", str(work), kind])
            rows[kind] = {**built, **served}
            print(f"  {kind}: {json.dumps(rows[kind])}", flush=True)
        print()
        print(f"| {shape['vectors']:,} vectors | " + " | ".join(rows) + " |")
        print("|---|" + "---|" * len(rows))
        for label, key, fmt in [("index", "describe", "{}"), ("build (s)", "build_s", "{:.1f}"),
                                ("build peak RSS (MB)", "build_peak_mb", "{:.0f}"), ("files (MB)", "files_mb", "{:.0f}"),
                                ("load at start (s)", "load_s", "{:.2f}"), ("query p50 / p99 (ms)", None, ""),
                                ("recall@10 vs exact", "recall", "{:.3f}"), ("serving RSS after queries (MB)", "rss_mb", "{:.0f}"),
                                ("of which the process's own (MB)", "rss_anon_mb", "{:.0f}"),
                                ("of which mapped file pages (MB)", "rss_file_mb", "{:.0f}")]:
            if key is None:
                cells = [f"{r['p50_ms']:.2f} / {r['p99_ms']:.2f}" for r in rows.values()]
            else:
                cells = [fmt.format(r[key]) for r in rows.values()]
            print(f"| {label} | " + " | ".join(cells) + " |")
        if args.sweep and "ivf" in rows:
            print()
            sweep(work, args.sweep)


if __name__ == "__main__":
    main()
