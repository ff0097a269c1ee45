"""Server start with a built index: ``incidentlib serve`` from launch to its first search answer, and the parts.

    python bench/bench_start.py --incidents 10000             # build once, then 3 starts; prints Markdown
    python bench/bench_start.py --incidents 10000 --cold      # also starts with the library's files evicted
    python bench/bench_start.py --incidents 1000 --runs 1     # a smoke run
    python bench/bench_start.py --incidents 100000 --runs 0   # only the library and its index, for other benchmarks
    python bench/bench_start.py --incidents 100000 --runs 2 --reuse --graph oxigraph --touch   # serving RSS

What it does, each step in its own process (so memory and imports are per step):

1. **Library.** Writes a library directory of N incidents: the bundled records and copies of
   them under new ids (``IL-0001`` of copy 3 is ``IL-003001``; copies past 999 take the prefix
   ``ILA``, ``ILB``, …), every incident id in a copy, ``related`` links included, renamed the same
   way, so each file is valid YAML the loader accepts with no problem.  The texts are the real ones.
2. **Index.** Builds and persists the dense and BM25 indexes of that library with the library's
   own code (``Library.build_index`` and ``Library.warm``), without embedding every chunk: the
   engine's embedder is :class:`LookupEmbedder`, named ``use-m3`` with its width, whose document
   vectors are the *real* use-m3 vectors of the bundled chunks (looked up by chunk text, incident
   ids masked) plus seeded Gaussian noise (σ = ``NOISE``, the value ``bench_search.synthetic_engine``
   uses), renormalised; queries are embedded by the real use-m3.  The persisted store is therefore
   exactly what a real build writes (same files, same ``meta.json``, the same verification on load,
   the same content key), only its vectors are perturbed copies; a server started on it verifies and
   loads it like any other.
3. **Start.** ``incidentlib serve --data DIR --cache CACHE`` (a real uvicorn process) is launched and
   ``GET /search?q=…`` polled every ``POLL_SECONDS`` until it answers 200; reported: seconds from
   launch to that answer and the server's peak RSS.  ``--runs`` starts, median reported.
   Then ``GET /health`` is polled until ``graph_ready`` (the graph is built after the server listens)
   and ``tagger_ready``, then until the server is idle (under ``IDLE_CPU_SECONDS`` of CPU in
   ``IDLE_SECONDS``): its RSS then, and the anonymous part.  With ``--touch`` it then asks
   ``POST /similar``, ``GET /incidents/IL-0025/related`` and a list filtered by component once, waits for idle
   again and reports the RSS,
   anonymous and of mapped files (what a serving process holds once those have read across the library).
4. **Parts.** In a fresh process, the steps of that start timed one by one, in the order serve
   takes them: imports, YAML load (cold parse vs the parsed cache), the library's records and chunks
   (from the start snapshot when one is current), the dense store (checksums, then the whole verified
   load), the BM25 index (loaded from its cache), the concept recognizer, the query embedder, the
   first search; then what is built after listening: the graph store and the NetworkX projection.

Page cache: the runs are **warm** (every file read just before).  With ``--cold`` the library's and
the cache's files are evicted from the page cache first (``posix_fadvise(DONTNEED)`` per file: no
machine-wide cache drop, other jobs keep theirs); Python packages and model weights stay warm.
Latencies are wall-clock on a shared 2-core machine: compare numbers within one run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

#: σ of the Gaussian noise added to each real vector of a copy: the value bench_search.synthetic_engine is run with.
NOISE = 0.05
#: Seconds between two polls of the starting server: short against a start of seconds, long enough not to load it.
POLL_SECONDS = 0.05
#: A server is idle (its background work over: graph, tagger, start snapshot) once it used less than IDLE_CPU_SECONDS
#: of CPU in IDLE_SECONDS: an idle uvicorn uses a few milliseconds a second; any background step uses a core.
IDLE_SECONDS = 5.0
#: The incident the requests after start ask about (``touch``): a bundled record, in every library this writes.
TOUCH_ID = "IL-0025"
#: The component of the filtered list the requests after start ask for: one of TOUCH_ID's.
TOUCH_COMPONENT = "nccl"
IDLE_CPU_SECONDS = 0.25
#: A start slower than this is reported as failed rather than waited for.
START_TIMEOUT_SECONDS = 1800.0
QUERY = "NCCL watchdog timeout"
#: Lines of serve's log and the phase they end (seen by polling the log: ± POLL_SECONDS).
SERVE_MARKERS = {"library opened, index verified, warmed (s)": "serving ", "app up (s)": "Application startup complete"}
#: Incident ids inside texts (related links mentioned in prose) are masked before the lookup of a chunk's vector.
_ID_IN_TEXT = re.compile(r"\b[A-Z]{2,8}-\d{4,6}\b")
_ID = re.compile(r"\bIL-(\d{4})\b")


def copy_prefix(copy: int) -> str:
    """``IL`` for copies 0-999, then ``ILA``, ``ILB``, … (each 1,000 copies)."""
    return "IL" if copy < 1000 else "IL" + "".join(chr(ord("A") + int(d)) for d in str(copy // 1000 - 1))


def copy_id(number: int, copy: int) -> str:
    """The id of bundled incident ``IL-<number>`` in ``copy`` (copy 0 keeps the bundled id)."""
    if copy == 0:
        return f"IL-{number:04d}"
    return f"{copy_prefix(copy)}-{(copy % 1000) * 1000 + number:06d}" if copy % 1000 else f"{copy_prefix(copy)}-{number:04d}"


def write_library(target: Path, incidents: int) -> int:
    """Write a library of ``incidents`` incidents to ``target`` (see the module docstring); returns the count."""
    source = REPO / "data"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("incidents"))
    folder = target / "incidents"
    folder.mkdir()
    real = sorted((source / "incidents").glob("IL-*.yaml"))
    texts = [(int(path.stem[3:]), path.read_text(encoding="utf-8")) for path in real]
    if max(number for number, _ in texts) >= 1000:
        raise SystemExit("bundled ids above IL-0999: extend copy_id")
    written = 0
    for copy in range(math.ceil(incidents / len(texts))):
        # a link to an incident the last, partial copy does not hold points at the bundled one
        present = {number for number, _ in texts[:incidents - written]}

        def rename(match: re.Match[str], copy: int = copy, present: set[int] = present) -> str:
            number = int(match[1])
            return copy_id(number, copy if number in present else 0)

        for number, text in texts:
            if written == incidents:
                return written
            new = text if copy == 0 else _ID.sub(rename, text)
            (folder / f"{copy_id(number, copy)}.yaml").write_text(new, encoding="utf-8")
            written += 1
    return written


class LookupEmbedder:
    """Documents: the real use-m3 vector of the bundled chunk with the same text (incident ids masked), plus
    seeded Gaussian noise, renormalised.  Queries: the real use-m3.  Named like use-m3 so the store it fills is
    the one a server with the default embedder loads (benchmarks only: see the module docstring)."""

    def __init__(self, real_texts: Sequence[str], real_vectors: np.ndarray, query_embedder: object, seed: int = 0) -> None:
        self.real = query_embedder
        self.name: str = query_embedder.name  # type: ignore[attr-defined]
        self.dim: int = query_embedder.dim  # type: ignore[attr-defined]
        self.row = {_ID_IN_TEXT.sub("ID", text): i for i, text in enumerate(real_texts)}
        self.vectors = real_vectors
        self.rng = np.random.default_rng(seed)
        self.looked_up = 0

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.real.encode_queries(texts)  # type: ignore[attr-defined,no-any-return]

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        rows = [self.row.get(_ID_IN_TEXT.sub("ID", text)) for text in texts]
        missing = [text[:60] for text, row in zip(texts, rows, strict=True) if row is None]
        if missing:
            raise RuntimeError(f"no real vector for chunk text {missing[0]!r}")
        block = self.vectors[rows] + self.rng.normal(scale=NOISE, size=(len(rows), self.dim)).astype(np.float32)
        self.looked_up += len(rows)
        return (block / np.linalg.norm(block, axis=1, keepdims=True)).astype(np.float32)


def peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def build(library_dir: Path, cache: Path, graph_store: str | None = None) -> dict[str, float]:
    """Step 2: persist the dense and BM25 indexes (and the parsed-YAML cache) of the written library; with
    ``graph_store`` (``oxigraph:PATH``) also load that store."""
    from incidentlib import Library

    real = Library.open()  # the bundled library, its real use-m3 vectors from its own cache
    engine = real._search_engine
    vectors = engine.chunk_vectors()
    texts = [chunk.text for chunk in engine.chunks]
    started = time.perf_counter()
    library = Library.open(library_dir, cache_dir=cache)
    timings = {"load_s": time.perf_counter() - started, "incidents": len(library)}
    target = library._search_engine
    lookup = LookupEmbedder(texts, np.ascontiguousarray(vectors), engine.embedder)
    target.__dict__["embedder"] = lookup  # the cached_property, set before anything asks for it
    started = time.perf_counter()
    report = library.build_index()
    timings.update(dense_build_s=time.perf_counter() - started, chunks=report.chunks, looked_up=lookup.looked_up)
    timings["index_kind"] = report.index_kind  # type: ignore[assignment]
    started = time.perf_counter()
    _ = target.lexical
    timings["bm25_build_s"] = time.perf_counter() - started
    if graph_store:
        started = time.perf_counter()
        _ = Library.open(library_dir, cache_dir=cache, graph_store=graph_store)._graph_store
        timings["graph_store_load_s"] = time.perf_counter() - started
    timings["peak_rss_mb"] = peak_rss_mb()
    return timings


def evict(paths: Sequence[Path]) -> int:
    """Drop the page-cache pages of every file under ``paths`` (``POSIX_FADV_DONTNEED``); returns the files."""
    count = 0
    for root in paths:
        for path in [root] if root.is_file() else root.rglob("*"):
            if not path.is_file():
                continue
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd) if os.access(path, os.W_OK) else None
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
            count += 1
    return count


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def vm_hwm_mb(pid: int, field: str = "VmHWM") -> float:
    """Peak RSS of process ``pid`` in MB (``VmHWM``; ``field="VmRSS"``: the current RSS), NaN when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return math.nan


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (all its threads), NaN when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def serve_once(library_dir: Path, cache: Path, extra: Sequence[str] = (), touch: bool = False) -> dict[str, float]:
    """Step 3: launch ``incidentlib serve`` and poll until the first search answer; kill it; the seconds and peak RSS."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "incidentlib", "serve", "--data", str(library_dir), "--cache", str(cache),
               "--port", str(port), *extra]
    url = f"http://127.0.0.1:{port}/search?q={urllib.request.quote(QUERY)}&k=10"
    log = (cache.parent / "serve.log").open("w")
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    answered = math.nan
    hits = 0
    peak = math.nan
    seen: dict[str, float] = {}
    try:
        while time.perf_counter() - started < START_TIMEOUT_SECONDS and process.poll() is None:
            text = (cache.parent / "serve.log").read_text(errors="replace")
            for name, marker in SERVE_MARKERS.items():
                if name not in seen and marker in text:
                    seen[name] = time.perf_counter() - started
            try:
                with urllib.request.urlopen(url, timeout=60) as response:
                    body = json.loads(response.read())
                answered = time.perf_counter() - started
                hits = len(body.get("results", body.get("hits", [])))
                seen["server RSS at the first answer (MB)"] = vm_hwm_mb(process.pid, "VmRSS")
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(POLL_SECONDS)
        # the graph is built after the server listens: when does /health say it is ready (a server without the
        # field built it before it listened)
        health = f"http://127.0.0.1:{port}/health"
        while not math.isnan(answered) and time.perf_counter() - started < START_TIMEOUT_SECONDS:
            with urllib.request.urlopen(health, timeout=60) as response:
                status = json.loads(response.read())
            if status.get("graph_ready", True) and "graph ready (s)" not in seen:
                seen["graph ready (s)"] = time.perf_counter() - started
                seen["server RSS once the graph is ready (MB)"] = vm_hwm_mb(process.pid, "VmRSS")
            if status.get("graph_ready", True) and status.get("tagger_ready", True):
                seen["graph and tagger ready (s)"] = time.perf_counter() - started
                break
            time.sleep(POLL_SECONDS)
        seen["server RSS once the graph and tagger are ready (MB)"] = vm_hwm_mb(process.pid, "VmRSS")
        # what the server holds while it serves: once its background work is over (no CPU for IDLE_SECONDS; a
        # server whose /health does not say when the tagger is ready is measured the same way)
        while not math.isnan(answered) and time.perf_counter() - started < START_TIMEOUT_SECONDS:
            before = cpu_seconds(process.pid)
            time.sleep(IDLE_SECONDS)
            if cpu_seconds(process.pid) - before < IDLE_CPU_SECONDS:
                seen["idle (s)"] = time.perf_counter() - started - IDLE_SECONDS
                seen["server RSS once idle (MB)"] = vm_hwm_mb(process.pid, "VmRSS")
                seen["  of which anonymous, once idle (MB)"] = vm_hwm_mb(process.pid, "RssAnon")
                break
        if touch and "idle (s)" in seen:
            # what a serving process holds once it has answered the requests that read across the library: the first
            # `similar` builds (or loads) its artefact over every record, `related` scores through the graph
            base = f"http://127.0.0.1:{port}"
            request = urllib.request.Request(f"{base}/similar", data=json.dumps({"incident_id": TOUCH_ID, "k": 10}).encode(),
                                             headers={"content-type": "application/json"})
            for target in (request, f"{base}/incidents/{TOUCH_ID}/related", f"{base}/incidents/{TOUCH_ID}",
                           f"{base}/incidents?component={TOUCH_COMPONENT}&limit=20"):
                with urllib.request.urlopen(target, timeout=START_TIMEOUT_SECONDS) as response:
                    response.read()
            while time.perf_counter() - started < START_TIMEOUT_SECONDS:
                before = cpu_seconds(process.pid)
                time.sleep(IDLE_SECONDS)
                if cpu_seconds(process.pid) - before < IDLE_CPU_SECONDS:
                    seen["server RSS after similar, related and a filtered list, idle (MB)"] = vm_hwm_mb(process.pid, "VmRSS")
                    # of which the process's own memory, and pages of mapped files (the page cache's, shared, which
                    # the kernel may take back)
                    seen["  of which anonymous (MB)"] = vm_hwm_mb(process.pid, "RssAnon")
                    seen["  of which mapped files (MB)"] = vm_hwm_mb(process.pid, "RssFile")
                    break
        peak = vm_hwm_mb(process.pid)
        # the SPARQL graph process (a fork of the server) and its hosts hold the in-memory RDF graph
        forks = [vm_hwm_mb(pid) for pid in children(process.pid)]
        if forks:
            seen["graph process peak RSS (MB)"] = max(forks)
            seen["graph process RSS then (MB)"] = max(vm_hwm_mb(pid, "VmRSS") for pid in children(process.pid))
    finally:
        process.terminate()
        process.wait(timeout=60)
        log.close()
    if math.isnan(answered):
        raise SystemExit(f"the server did not answer; see {cache.parent / 'serve.log'}")
    return {"first_answer_s": answered, "peak_rss_mb": peak, "results": hits, **seen}


def parts(library_dir: Path, cache: Path, graph_store: str | None = None) -> dict[str, float]:
    """Step 4: the steps of a start, timed one by one in this (fresh) process."""
    timings: dict[str, float] = {}

    def timed(name: str, started: float) -> float:
        timings[name] = time.perf_counter() - started
        return time.perf_counter()

    t = time.perf_counter()
    import incidentlib.api  # noqa: F401  (what serve imports before it opens the library)
    from incidentlib import Library
    from incidentlib.loader import load_library
    from incidentlib.search import dense
    from incidentlib.search import store as dense_store

    t = timed("imports", t)
    data = load_library(library_dir, None)
    t = timed("YAML load, parsed (no parsed cache)", t)
    from incidentlib import start_snapshot

    keep, start_snapshot.load = start_snapshot.load, lambda *_: None  # type: ignore[assignment]  # as without one
    data = load_library(library_dir, cache)
    start_snapshot.load = keep  # type: ignore[assignment]
    t = timed("YAML load, from the parsed cache (start snapshot not used)", t)
    library = Library.open(library_dir, cache_dir=cache, graph_store=graph_store)
    from_snapshot = library.data.chunks is not None
    t = timed("Library.open: records and chunks from the start snapshot" if from_snapshot else
              "Library.open (load with the parsed cache; no start snapshot)", t)
    del data
    engine = library._search_engine
    _ = engine.chunks
    t = timed("chunks taken from the snapshot" if from_snapshot else "chunking", t)
    folder = dense_store.store_dir(cache, library.data.content_hash, engine.embedder)
    t = timed("content key", t)
    meta = dense_store._read_meta(folder)
    assert meta is not None
    size = 0
    for name in (dense_store.ROWS_FILE, *dense.files_for(meta.index_kind)):
        size += (folder / meta.build / name).stat().st_size
        assert dense_store._matches(folder / meta.build / name, meta.checksums.get(name))
    t = timed(f"dense store checksums ({size / 1e9:.2f} GB, part of the next line)", t)
    library.build_index()
    t = timed("dense store verified load (Library.build_index: reuse)", t)
    _ = engine.lexical
    t = timed("BM25 index load (from its cache)", t)
    _ = library._search_service.recognizer
    t = timed("concept recognizer", t)
    engine.embedder.encode_queries(["warm-up"])
    t = timed("first query embedding", t)
    library.search(QUERY, k=10)
    t = timed("first search", t)
    # after listening (a background thread, and the SPARQL graph process), in the order serve takes them
    _ = library._graph_store
    t = timed("after listen: graph store (Oxigraph on disk, checked current)" if graph_store else
              "after listen: graph store (in-memory RDF built from the records; SPARQL graph process)", t)
    _ = library._knowledge.nx
    timed("after listen: NetworkX projection", t)
    timings["peak_rss_mb"] = peak_rss_mb()
    return timings


def compare(library_dir: Path, cache: Path, rounds: int = 5) -> dict[str, float]:
    """The pieces of a start this version changed, next to what they were, interleaved in one process
    (``rounds`` rounds, median): the dense and BM25 checksums (SHA-256, the previous format, against XXH3-128)
    and the index rows' decoding (one ``json.loads`` per row against one for all rows)."""
    import hashlib

    from incidentlib import Library, checksum
    from incidentlib.search import dense
    from incidentlib.search import store as dense_store
    from incidentlib.search.lexical_store import ARRAYS, LEXICAL_DIR

    library = Library.open(library_dir, cache_dir=cache)
    folder = dense_store.store_dir(cache, library.data.content_hash, library._search_engine.embedder)
    meta = dense_store._read_meta(folder)
    assert meta is not None
    files = [folder / meta.build / name for name in (dense_store.ROWS_FILE, *dense.files_for(meta.index_kind))]
    lexical = max((cache / LEXICAL_DIR).iterdir(), key=lambda p: p.stat().st_mtime)
    files += [lexical / "vocabulary.json", *(lexical / f"{name}.npy" for name in ARRAYS)]
    size = sum(path.stat().st_size for path in files)
    lines = (folder / meta.build / dense_store.ROWS_FILE).read_text(encoding="utf-8").splitlines()

    def sha256_all() -> None:
        for path in files:
            hashlib.sha256(path.read_bytes()).hexdigest()

    def xxh3_all() -> None:
        for path in files:
            checksum.checksum_file(path)

    def rows_per_line() -> None:
        [dense_store._parse_row(line) for line in lines]

    def rows_at_once() -> None:
        dense_store._row_columns(lines)

    pairs = {f"checksums of the dense + BM25 files ({size / 1e6:.0f} MB)": (sha256_all, xxh3_all),
             f"index rows decoded ({len(lines):,} rows)": (rows_per_line, rows_at_once)}
    result: dict[str, float] = {}
    for name, (before, after) in pairs.items():
        times: dict[str, list[float]] = {"before": [], "after": []}
        for _ in range(rounds):
            for label, function in (("before", before), ("after", after)):
                started = time.perf_counter()
                function()
                times[label].append(time.perf_counter() - started)
        result[f"{name}: before"] = statistics.median(times["before"])
        result[f"{name}: after"] = statistics.median(times["after"])
    return result


def child(step: str, library_dir: Path, cache: Path, graph_store: str | None, touch: bool = False) -> dict[str, float]:
    """Run ``step`` in a fresh interpreter and return its JSON result."""
    out = subprocess.run([sys.executable, __file__, "--step", step, "--library", str(library_dir), "--cache", str(cache),
                          *(["--graph-store", graph_store] if graph_store else []), *(["--touch"] if touch else [])],
                         check=True, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--incidents", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3, help="starts measured (median reported); 0 only writes the library and builds its index")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench-start"))
    parser.add_argument("--cold", action="store_true", help="also measure starts with the library's files evicted")
    parser.add_argument("--reuse", action="store_true", help="keep the library and cache in --workdir if present")
    parser.add_argument("--compare", action="store_true",
                        help="only time the changed pieces next to what they were (needs a built --workdir)")
    parser.add_argument("--step", choices=("build", "serve", "parts"), help=argparse.SUPPRESS)
    parser.add_argument("--library", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--cache", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--graph", choices=("memory", "oxigraph"), default="memory",
                        help="the server's graph store: in memory (the default, built at every start) or Oxigraph on disk")
    parser.add_argument("--graph-store", help=argparse.SUPPRESS)
    parser.add_argument("--touch", action="store_true",
                        help="after each warm start, ask `similar` and `related` once and measure the RSS again")
    args = parser.parse_args()
    if args.step:
        graph = args.graph_store
        result = {"build": lambda: build(args.library, args.cache, graph), "parts": lambda: parts(args.library, args.cache, graph),
                  "serve": lambda: serve_once(args.library, args.cache, ["--graph-store", graph] if graph else [], args.touch)}[args.step]()
        print(json.dumps(result))
        return

    work = args.workdir / f"n{args.incidents}"
    library_dir, cache = work / "library", work / "cache"
    if args.compare:
        print("| piece (one process, interleaved, median of 5) | before | after | ratio |\n|---|---|---|---|")
        result = compare(library_dir, cache)
        for name in [key[: -len(": before")] for key in result if key.endswith(": before")]:
            before, after = result[f"{name}: before"], result[f"{name}: after"]
            print(f"| {name} | {before:.3f} s | {after:.3f} s | {before / after:.1f}× |")
        print(f"\nload average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return
    graph = f"oxigraph:{work / 'graph'}" if args.graph == "oxigraph" else None
    built_file = cache / f"built-{args.graph}.json"
    if not (args.reuse and built_file.exists()):
        if not (args.reuse and library_dir.exists()):
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            started = time.perf_counter()
            count = write_library(library_dir, args.incidents)
            print(f"wrote {count} incidents in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        built = child("build", library_dir, cache, graph)
        built_file.write_text(json.dumps(built))
    built = json.loads(built_file.read_text())
    print(f"build: {built}", file=sys.stderr)
    if args.runs == 0:  # a library to measure other things on (bench_write_large.py, bench_analysis_large.py)
        print(build_line(built))
        return
    starts = []
    for run in range(args.runs):
        starts.append(child("serve", library_dir, cache, graph, args.touch))
        print(f"warm start {run + 1}: {starts[-1]}", file=sys.stderr)
    cold = []
    if args.cold:
        for run in range(args.runs):
            evict([library_dir, cache])
            cold.append(child("serve", library_dir, cache, graph))
            print(f"cold start {run + 1}: {cold[-1]}", file=sys.stderr)
    part_runs = [child("parts", library_dir, cache, graph) for _ in range(args.runs)]
    print(f"parts: {part_runs}", file=sys.stderr)
    report(args, built, starts, cold, part_runs)


def report(args: argparse.Namespace, built: dict, starts: list[dict], cold: list[dict], part_runs: list[dict]) -> None:
    med = statistics.median
    print(f"### Server start at {built['incidents']:,} incidents ({built['chunks']:,} chunks, dense index {built['index_kind']}, "
          f"graph store {args.graph})\n")
    print(f"`python bench/bench_start.py --incidents {args.incidents} --runs {args.runs} --graph {args.graph}"
          f"{' --cold' if args.cold else ''}{' --touch' if args.touch else ''}`; "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end; median of {args.runs} runs.\n")
    print("| start | launch → first search answer | peak RSS of the server |")
    print("|---|---|---|")
    print(f"| page cache warm | {med(s['first_answer_s'] for s in starts):.2f} s | {med(s['peak_rss_mb'] for s in starts):,.0f} MB |")
    for name in SERVE_MARKERS:
        if all(name in s for s in starts):
            print(f"| (warm) of which: {name} | {med(s[name] for s in starts):.2f} s | |")
    if all("graph ready (s)" in s for s in starts):
        print(f"| (warm) graph ready, after the first answer | {med(s['graph ready (s)'] for s in starts):.2f} s | |")
    for name, label in (("server RSS once idle (MB)", "server once idle after start"),
                        ("  of which anonymous, once idle (MB)", "… of which anonymous"),
                        ("server RSS after similar, related and a filtered list, idle (MB)", "server after `similar`, `related`, a filtered list"),
                        ("  of which anonymous (MB)", "… of which anonymous"),
                        ("  of which mapped files (MB)", "… of which mapped files")):
        if all(name in s for s in starts):
            print(f"| (warm) {label} | | {med(s[name] for s in starts):,.0f} MB |")
    if all("graph process peak RSS (MB)" in s for s in starts):
        print(f"| (warm) SPARQL graph process | | {med(s['graph process peak RSS (MB)'] for s in starts):,.0f} MB |")
    if cold:
        print(f"| library + cache files evicted | {med(s['first_answer_s'] for s in cold):.2f} s | "
              f"{med(s['peak_rss_mb'] for s in cold):,.0f} MB |")
    print("\n| part (fresh process, warm page cache) | seconds |")
    print("|---|---|")
    for name in part_runs[0]:
        if name != "peak_rss_mb":
            print(f"| {name} | {med(run[name] for run in part_runs):.3f} |")
    print(f"\n{build_line(built)}")


def build_line(built: dict) -> str:
    graph = f", Oxigraph load {built['graph_store_load_s']:.1f} s" if "graph_store_load_s" in built else ""
    return (f"Build (once, not part of the start): dense {built['dense_build_s']:.1f} s (no embedding: looked-up vectors), "
            f"BM25 {built['bm25_build_s']:.1f} s{graph}, peak RSS {built['peak_rss_mb']:,.0f} MB.")


if __name__ == "__main__":
    main()
