"""Similar by incident at the size of 1M incidents, from indexes on disk: the first request, then warm latency and memory.

    python bench/bench_ann.py --copies 3110 --kinds ivf --mapped --work W          # the vectors and the inverted file
    python bench/bench_search_1m.py --postings-only 3110 P                         # the BM25 postings (or let the next build them)
    python bench/bench_similar_1m.py --ann-work W --postings P --cache C --queries 30 --passes 3

The engine is the one ``bench_search_1m.py`` serves (``--copies`` copies of the bundled library, the inverted file and
the BM25 postings mapped from disk, the chunks as a table whose columns make each row when read).  Its records are
the bundled records copied under the synthetic ids (``model_copy``, fields shared), as ``bench_similar.py`` gives
them at 100k.  Then, with :class:`~incidentlib.search.similarity.SimilarityIndex` at its defaults (the candidate
path, what ``Library.similar`` uses at this size):

1. the first request, which builds the similarity artefact (boilerplate model, the incidents × terms BM25 matrix, the
   kept passages) over every record, saves it in ``--cache`` and serves it mapped; the artefact step and the rest
   are timed apart, and the process's own memory and its mapped file pages are sampled meanwhile (their peaks);
2. the first request of a new index over the same engine (a restart: the artefact is loaded, not built); then a
   new index warmed as ``serve`` warms it after a start (``warm``, ``warm_query``) and its first request;
3. ``--queries`` query incidents spread over the library: one untimed pass, then ``--passes`` timed passes, p50/p99;
4. resident memory after the queries (the process's own, and pages of mapped files).

``--search N`` serves a hybrid search (the query embedding included) after each ``similar`` of a pass in the same
process, as a server answering both does, its text cycling through the first ``N`` questions of
``eval/queries.jsonl``; their p50/p99 are reported per pass.

``--memory-limit GB`` runs all of it inside a memory cgroup of that size (v1 ``memory.limit_in_bytes`` or v2
``memory.max``), created under this process's own and removed at the end: the index files are first dropped from
the page cache (``POSIX_FADV_DONTNEED``) so that every page read from them is charged to the cgroup, and the kernel
must then keep the process's own memory *and* its mapped index pages under the limit, reclaiming pages to do so.
The latency under the limit is what a service confined to that memory gets.  The artefact must already be saved
(a first run without the limit builds it; its build needs more).  Reported beside the latency: the cgroup's peak
usage, and per request the major page faults (mapped pages read from disk again) and the bytes read from storage
(those faults with their read-ahead, and the vector rows read with ``pread``).  cgroup v2 needs the memory controller
delegated to this process's cgroup (see :class:`MemoryCgroup`).

Sanity check printed beside the latency: every copy of a record has the same text and a near copy of its vectors, so
most of a query's top 10 should be copies of the record it was copied from; the mean share is reported.

A second run with the same ``--cache`` loads the artefact (step 1 then says "loaded").
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import ctypes
import gc
import io
import json
import math
import os
import pstats
import resource
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_ann import rss_mb  # noqa: E402
from bench_index_update import PeakSampler  # noqa: E402
from bench_search import percentile_ms, queries, stage  # noqa: E402
from bench_search_1m import ready_engine, real_library  # noqa: E402
from bench_start import evict  # noqa: E402

from incidentlib.search.engine import SearchMode  # noqa: E402
from incidentlib.search.similarity import SimilarityIndex  # noqa: E402

#: The cgroup this benchmark makes under its own (removed at the end).
CGROUP_NAME = "incidentlib-bench-similar-1m"


class MemoryCgroup:
    """A memory cgroup of ``limit`` bytes under this process's own, this process moved into it (v1 or v2).

    Only pages charged *after* the move count against the limit; callers drop the files they will read from the page
    cache first.  On exit the process moves back and the cgroup is removed."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        v1 = [line.split(":", 2)[2] for line in lines if "memory" in line.split(":", 2)[1].split(",")]
        mounts = [line.split() for line in Path("/proc/self/mounts").read_text().splitlines()]
        if v1:  # the memory hierarchy's mount point (it may be co-mounted with other controllers)
            points = [m[1] for m in mounts if m[2] == "cgroup" and "memory" in m[3].split(",")]
            if not points:
                raise SystemExit("--memory-limit: the memory cgroup hierarchy is not mounted")
            self.parent = Path(points[0]) / v1[0].lstrip("/")
            self.limit_file, self.peak_file = "memory.limit_in_bytes", "memory.max_usage_in_bytes"
            self.usage_file = "memory.usage_in_bytes"
        else:
            unified = [line.split(":", 2)[2] for line in lines if line.startswith("0::")]
            points = [m[1] for m in mounts if m[2] == "cgroup2"]
            if not unified or not points:
                raise SystemExit("--memory-limit: no memory cgroup found in /proc/self/cgroup")
            # the child gets memory.max only if the memory controller is delegated to it (cgroup.subtree_control of
            # this process's cgroup), which the kernel allows only for a cgroup holding no process: run the
            # benchmark from a cgroup prepared so, or as root from the root cgroup
            self.parent = Path(points[0]) / unified[0].lstrip("/")
            self.limit_file, self.peak_file, self.usage_file = "memory.max", "memory.peak", "memory.current"
        self.path = self.parent / CGROUP_NAME

    def __enter__(self) -> MemoryCgroup:
        try:
            self.path.mkdir(exist_ok=True)
            if not (self.path / self.limit_file).exists():
                raise OSError(f"no {self.limit_file}: the memory controller is not enabled for it")
            (self.path / self.limit_file).write_text(str(self.limit))
            (self.path / "cgroup.procs").write_text(str(os.getpid()))
        except OSError as error:
            with contextlib.suppress(OSError):
                self.path.rmdir()
            raise SystemExit(f"--memory-limit: cannot make or enter the cgroup {self.path}: {error}") from error
        return self

    def read_mb(self, name: str) -> float:
        try:
            return int((self.path / name).read_text().split()[0]) / 2**20
        except (OSError, ValueError):
            return float("nan")

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):
            (self.parent / "cgroup.procs").write_text(str(os.getpid()))
            self.path.rmdir()


def disk_reads() -> tuple[int, int]:
    """Major page faults (mapped pages read from disk) and bytes this process caused to be read from storage (faults,
    their read-ahead and ``pread`` alike; ``/proc/self/io``, 0 where it is missing)."""
    read = 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("read_bytes:"):
                read = int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_majflt, read


def settle() -> dict[str, float]:
    """Resident memory (MB) once garbage is collected and freed heap pages are handed back."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    return {field: rss_mb(field) for field in ("VmRSS", "RssAnon", "RssFile")}


def synthetic_library(ann: Path, postings: Path, cache: Path,
                      memory: dict[str, dict[str, float]]) -> tuple[Any, dict[str, Any], dict[str, str]]:
    """The 1M engine with the bundled records copied in under its synthetic ids (fields shared), its similarity
    artefact kept in ``cache``; also which real record each id copies.  ``memory`` gets the RSS at each step."""
    shape = json.loads((ann / "prepared.json").read_text())
    copies = int(shape["copies"])
    real, incident_ids, counts = real_library()
    if not (postings / "vocabulary.json").exists():
        raise SystemExit(f"{postings}: no postings; build them with bench_search_1m.py --postings-only {copies} {postings}")
    memory["before the engine"] = settle()
    stage("opening the 1M engine")
    engine, _ = ready_engine(real, incident_ids, counts, copies, ann, postings)
    memory["engine ready"] = settle()
    real_records = real.data.incidents
    source = {}  # synthetic id -> the real record it copies
    records = {}
    for incident_id in engine._incident_ids:
        real_id = incident_id if incident_id in real_records else incident_id.rsplit("-", 1)[0]
        source[incident_id] = real_id
        original = real_records[real_id]
        records[incident_id] = original if real_id == incident_id else original.model_copy(update={"id": incident_id})
    engine.data = SimpleNamespace(incidents=records, vocab=real.data.vocab, root=REPO, content_hash="synthetic")
    engine.config = engine.config.model_copy(update={"cache_dir": cache})
    memory["records copied in"] = settle()
    stage(f"{len(records):,} records attached")
    return engine, records, source


def measure(ann: Path, postings: Path, cache: Path, query_count: int, passes: int, search_count: int = 0,
            confined: MemoryCgroup | None = None, profile_top: int = 0) -> dict:
    memory: dict[str, dict[str, float]] = {}
    engine, records, source = synthetic_library(ann, postings, cache, memory)

    ids = engine._incident_ids
    picked = [records[ids[round(i * (len(ids) - 1) / max(query_count - 1, 1))]] for i in range(query_count)]
    index = SimilarityIndex(engine)
    first: dict[str, float | str] = {}
    if confined is not None:  # never build under the limit (the build needs more): load, and time the load
        started = time.perf_counter()
        if index.prepare(build=False) == "absent":
            raise SystemExit(f"--memory-limit: no saved similarity artefact in {cache}; run once without the limit")
        first["artefact loaded before the limit's first request (s)"] = time.perf_counter() - started
    with PeakSampler() as peak:
        started = time.perf_counter()
        index._artefact  # noqa: B018  # the artefact alone: built (or loaded), saved, mapped
        first["artefact (s)"] = time.perf_counter() - started
        first["artefact"] = index.artefact_source
        stage(f"artefact {index.artefact_source} in {first['artefact (s)']:.0f} s")
        started = time.perf_counter()
        index.rank(index.incident_query(picked[0]), 10)
        first["the rest of the first request (s)"] = time.perf_counter() - started
    memory["peak during the first request"] = peak.peak
    memory["after the first request"] = settle()
    restarted = SimilarityIndex(engine)
    started = time.perf_counter()
    restarted.rank(restarted.incident_query(picked[1 % len(picked)]), 10)
    first["first request of a new index over the same engine (s)"] = time.perf_counter() - started
    first["its artefact"] = restarted.artefact_source
    del restarted
    warmed = SimilarityIndex(engine)  # what `serve` does after a start (Library.warm_similar), then a first request
    profiler = cProfile.Profile() if profile_top else None
    if profiler is not None:
        profiler.enable()
    started = time.perf_counter()
    first["a new index warmed as serve does: warm()"] = warmed.warm()
    first["warm() (s)"] = time.perf_counter() - started
    started = time.perf_counter()
    warmed.warm_query()
    first["then warm_query() (s)"] = time.perf_counter() - started
    warm_profile = ""
    if profiler is not None:
        profiler.disable()
        buffer = io.StringIO()
        pstats.Stats(profiler, stream=buffer).strip_dirs().sort_stats("cumulative").print_stats(profile_top)
        warm_profile = buffer.getvalue()
    started = time.perf_counter()
    warmed.rank(warmed.incident_query(picked[1 % len(picked)]), 10)
    first["then its first request (s)"] = time.perf_counter() - started
    del warmed
    stage("first requests done")

    texts = queries(search_count) if search_count else []
    searches = [texts[i % len(texts)] for i in range(len(picked))] if texts else []
    for n, incident in enumerate(picked):  # warm: the pages the queries read
        index.rank(index.incident_query(incident), 10)
        if searches:
            engine.search(searches[n], k=10, mode=SearchMode.hybrid)
    latency = []
    search_latency = []
    faults = []
    read_kb = []
    own_copies = []
    for _ in range(passes):
        samples, search_samples = [], []
        faults_before, read_before = disk_reads()
        for n, incident in enumerate(picked):
            started = time.perf_counter()
            ranked = index.rank(index.incident_query(incident), 10)
            samples.append(time.perf_counter() - started)
            own_copies.append(sum(source[e.incident_id] == source[incident.id] for e in ranked) / max(len(ranked), 1))
            if searches:  # a search between two similar requests, as a server answering both sees them
                started = time.perf_counter()
                engine.search(searches[n], k=10, mode=SearchMode.hybrid)
                search_samples.append(time.perf_counter() - started)
        faults_after, read_after = disk_reads()
        requests = len(picked) + len(search_samples)
        faults.append((faults_after - faults_before) / requests)
        read_kb.append((read_after - read_before) / 1024 / requests)
        latency.append({"p50": percentile_ms(samples, 50), "p99": percentile_ms(samples, 99)})
        if search_samples:
            search_latency.append({"p50": percentile_ms(search_samples, 50), "p99": percentile_ms(search_samples, 99)})
    memory["after the queries"] = settle()
    limit = {}
    if confined is not None:
        limit = {"limit_mb": confined.limit / 2**20, "peak_mb": confined.read_mb(confined.peak_file),
                 "usage_after_mb": confined.read_mb(confined.usage_file)}
    return {"incidents": len(ids), "chunks": len(engine.chunks), "kept_passages": len(index._layout[0]),
            "entries": int(index._artefact.matrix.nnz), "terms": len(index._artefact.vocabulary),
            "candidate_path": index.uses_candidates, "dense_index": engine.dense.index.describe(),
            "first": first, "warm_profile": warm_profile, "latency_ms": latency, "search_latency_ms": search_latency,
            "major_faults_per_request": faults, "read_kb_per_request": read_kb, "own_copies_in_top10": sum(own_copies) / max(len(own_copies), 1),
            "memory_mb": memory, "queries": query_count, "searches": len(set(searches)), "cgroup": limit}


def render(report: dict) -> str:
    lines = [f"{report['incidents']:,} incidents, {report['chunks']:,} chunks ({report['kept_passages']:,} kept passages); "
             f"BM25 matrix {report['entries']:,} entries over {report['terms']:,} terms; {report['dense_index']}; "
             f"candidate path: {report['candidate_path']}", "",
             "| first requests | |", "|---|---|"]
    lines += [f"| {name} | {value:.1f} |" if isinstance(value, float) else f"| {name} | {value} |"
              for name, value in report["first"].items()]
    if report.get("warm_profile"):
        lines += ["", "Profile of warm() and warm_query() (cumulative):", "", "```", report["warm_profile"].strip(), "```"]
    searched = report.get("search_latency_ms") or []
    header = f"| {report['queries']} query incidents | similar p50 (ms) | p99 (ms) |"
    rule = "|---|---|---|"
    if searched:
        header += f" hybrid search ({report['searches']} queries, one after each similar) p50 (ms) | p99 (ms) |"
        rule += "---|---|"
    header += " major faults a request | KB read from storage a request |"
    rule += "---|---|"
    lines += ["", header, rule]
    for n, v in enumerate(report["latency_ms"]):
        row = f"| pass {n + 1} | {v['p50']:.1f} | {v['p99']:.1f} |"
        if searched:
            row += f" {searched[n]['p50']:.1f} | {searched[n]['p99']:.1f} |"
        lines.append(row + f" {report['major_faults_per_request'][n]:.0f} | {report['read_kb_per_request'][n]:,.0f} |")
    lines += ["", f"Copies of the query's own record in its top 10: {report['own_copies_in_top10']:.2f} on average.", "",
              "| resident memory (MB) | VmRSS | of it anonymous | of it mapped files |", "|---|---|---|---|"]
    for name, values in report["memory_mb"].items():  # a peak is sampled per field: no VmRSS of one moment
        in_all = f"{values['VmRSS']:,.0f}" if "VmRSS" in values else "–"
        lines.append(f"| {name} | {in_all} | {values['RssAnon']:,.0f} | {values['RssFile']:,.0f} |")
    if report.get("cgroup"):
        limit = report["cgroup"]
        peak = "not kept by this kernel (cgroup v2 before Linux 5.19)" if math.isnan(limit["peak_mb"]) else f"{limit['peak_mb']:,.0f} MB"
        lines += ["", f"Memory cgroup: limit {limit['limit_mb']:,.0f} MB, peak charged {peak}, "
                      f"charged after the queries {limit['usage_after_mb']:,.0f} MB (the process's own memory, its "
                      "page-cache pages and kernel memory charged to it; `VmRSS` also counts mapped pages charged "
                      "elsewhere before the move, such as the libraries and the model files)."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ann-work", type=Path, required=True, help="bench_ann.py's --work folder (vectors, an ivf folder)")
    parser.add_argument("--postings", type=Path, required=True, help="folder of the BM25 postings (bench_search_1m.py)")
    parser.add_argument("--cache", type=Path, required=True, help="folder the similarity artefact is saved in and read from")
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--search", type=int, default=0, metavar="N",
                        help="after each similar request also serve a hybrid search, the texts cycling through the "
                             "first N questions of eval/queries.jsonl (at most --queries of them are used)")
    parser.add_argument("--profile-warm", type=int, default=0, metavar="N",
                        help="profile warm() and warm_query() (cProfile; their times then include its overhead) and "
                             "print the N functions of most cumulative time")
    parser.add_argument("--memory-limit", type=float, metavar="GB",
                        help="run inside a memory cgroup of GB gibibytes (page cache included); needs a saved artefact")
    args = parser.parse_args()
    if args.memory_limit is None:
        report = measure(args.ann_work, args.postings, args.cache, args.queries, args.passes, args.search,
                         profile_top=args.profile_warm)
    else:
        if args.memory_limit <= 0:
            parser.error("--memory-limit: must be a positive number of GB")
        with MemoryCgroup(int(args.memory_limit * 2**30)) as confined:
            stage(f"dropped {evict([args.ann_work, args.postings, args.cache]):,} index files from the page cache")
            report = measure(args.ann_work, args.postings, args.cache, args.queries, args.passes, args.search, confined,
                             args.profile_warm)
    sys.stderr.write(json.dumps(report) + "\n")
    sys.stdout.write(render(report) + "\n")


if __name__ == "__main__":
    main()
