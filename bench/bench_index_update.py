"""What keeping a large library's dense index current costs the store: seconds and peak memory of ``ensure_index``.

    python bench/bench_index_update.py --library L --cache C [--cases reused,extended,edited] [--work W] [--before B]

``L`` is a library whose index is built in ``C`` (e.g. the 100k library of ``bench_start.py``).  Each case runs
in a child process of its own, which opens the library, takes its chunks (a :class:`ChunkTable`, as a server holds
them), then times one call of :func:`incidentlib.search.store.ensure_index` on a scratch cache under ``W`` holding
a hard-linked copy of the built index (the original is never written):

- **reused**: the same chunks; the build is found by its rows digest and nothing is read row by row;
- **extended**: one incident's chunks added under a new id (a new record); the donor's rows are kept and the new
  ones embedded and appended (an inverted file is extended with its trained lists);
- **edited**: the text of one chunk changed (an edited record): the index is rebuilt, or (an HNSW graph or an
  inverted file) the old row is left dead and the new one appended.

With ``--before B`` (another checkout of the project, e.g. ``git worktree add B <commit>``) each case also runs with
``B``'s package, the two trees taking turns (which goes first alternates from case to case).

A thread samples ``/proc/self/status`` every few milliseconds during the call; the table gives the peak growth of
the process's own memory (``RssAnon``, what competes with everything else) and of mapped file pages (``RssFile``,
which the kernel can drop), over the values just before the call.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

CASES = ("reused", "extended", "edited")
#: Between two samples of the process's memory: short against the seconds a case takes, long enough not to slow it.
SAMPLE_S = 0.005


def status_mb() -> dict[str, float]:
    """``RssAnon`` and ``RssFile`` of this process now, in MB."""
    values = {}
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            name, _, rest = line.partition(":")
            if name in ("RssAnon", "RssFile"):
                values[name] = int(rest.split()[0]) / 1024
    return values


class PeakSampler:
    """The highest ``RssAnon`` and ``RssFile`` seen while the ``with`` block runs."""

    def __enter__(self) -> PeakSampler:
        self.peak = status_mb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            for name, value in status_mb().items():
                self.peak[name] = max(self.peak[name], value)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        for name, value in status_mb().items():
            self.peak[name] = max(self.peak[name], value)


def run_case(case: str, library_dir: Path, cache: Path) -> dict[str, object]:
    """One case, in this process: open the library, build the case's chunks, time ``ensure_index`` on ``cache``."""
    from incidentlib import Library
    from incidentlib.search.chunks import ChunkTable, chunk_digests, chunk_ids, chunk_incident_ids, chunk_kinds
    from incidentlib.search.store import ensure_index, store_dir

    library = Library.open(library_dir, cache_dir=cache)
    engine = library._search_service.engine
    table = engine.chunks
    assert isinstance(table, ChunkTable)
    content_hash = engine.data.content_hash
    if case != "reused":
        ids, incidents, kinds = list(chunk_ids(table)), list(chunk_incident_ids(table)), list(chunk_kinds(table))
        langs, digests, texts = list(table.langs), list(chunk_digests(table)), list(table.texts)
        if case == "extended":
            first = incidents[0]
            rows = [row for row in range(len(ids)) if incidents[row] == first]
            for row in rows:
                new_id = ids[row].replace(first, "IL-BENCH-NEW", 1)
                ids.append(new_id)
                incidents.append("IL-BENCH-NEW")
                kinds.append(kinds[row])
                langs.append(langs[row])
                texts.append(texts[row] + " (a new record)")
                digests.append(hashlib.sha256(f"{new_id}\0{texts[-1]}".encode()).hexdigest()[:16])
        else:
            texts[0] = texts[0] + " (edited)"
            digests[0] = hashlib.sha256(f"{ids[0]}\0{texts[0]}".encode()).hexdigest()[:16]
        table = ChunkTable(ids, incidents, kinds, langs, digests, texts)
        content_hash = hashlib.sha256(f"{content_hash}/{case}".encode()).hexdigest()
    folder = store_dir(cache, content_hash, engine.embedder)
    embedder = engine.embedder
    embedder.encode_documents(["warm up the model"])  # its load is not the store's cost
    gc.collect()
    started = time.perf_counter()
    with PeakSampler() as sampler:
        before = status_mb()
        loaded, report = ensure_index(table, content_hash, embedder, folder, library="")
    seconds = time.perf_counter() - started
    row_chunks = getattr(loaded, "row_chunks", None)  # None in a tree from before the row map
    dead = 0 if row_chunks is None else int((row_chunks < 0).sum())
    assert len(loaded.chunk_ids) - dead == len(table), "the index must hold a live row for every chunk"
    return {"case": case, "chunks": len(table), "action": report.action, "kind": report.index_kind,
            "embedded": report.embedded, "dead_rows": dead, "seconds": seconds,
            "anon_peak_mb": sampler.peak["RssAnon"] - before["RssAnon"],
            "file_peak_mb": sampler.peak["RssFile"] - before["RssFile"]}


def scratch_cache(cache: Path, work: Path) -> Path:
    """A cache under ``work`` with the built dense indexes of ``cache`` hard-linked (never written in place: builds
    are new folders renamed into place) and its other artefacts linked, so the library opens as it does there."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    for entry in cache.iterdir():
        target = work / entry.name
        if entry.is_dir():
            subprocess.run(["cp", "-al", str(entry), str(target)], check=True)
        else:
            os.link(entry, target)
    return work


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--library", type=Path, required=True)
    parser.add_argument("--cache", type=Path, required=True, help="The cache the library's index is built in.")
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-index-update"),
                        help="Scratch cache (removed and made again for each case).")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--before", type=Path, help="Another checkout whose package runs each case too.")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--tree", type=Path, default=REPO, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        sys.path.insert(0, str(args.tree.resolve()))  # the package of the tree asked for, not this file's
        sys.stdout.write(json.dumps(run_case(args.child, args.library, args.cache)) + "\n")
        return
    trees = {"this tree": REPO} if args.before is None else {"this tree": REPO, "before": args.before}
    rows = []
    for number, case in enumerate(args.cases.split(",")):
        if case not in CASES:
            raise SystemExit(f"--cases: unknown case {case!r} (known: {', '.join(CASES)})")
        names = list(trees) if number % 2 == 0 else list(reversed(trees))
        for name in names:
            cache = scratch_cache(args.cache, args.work)
            out = subprocess.run([sys.executable, __file__, "--library", str(args.library), "--cache", str(cache),
                                  "--tree", str(trees[name]), "--child", case], check=False, capture_output=True,
                                 text=True)
            if out.returncode:
                raise SystemExit(f"case {case} ({name}) failed:\n{out.stderr[-3000:]}")
            rows.append({"tree": name, **json.loads(out.stdout.strip().splitlines()[-1])})
            shutil.rmtree(args.work)
            sys.stderr.write(json.dumps(rows[-1]) + "\n")
    sys.stdout.write("| tree | case | chunks | action | index | embedded | dead rows | seconds | peak anon growth (MB) | peak file pages growth (MB) |\n")
    sys.stdout.write("|---|---|---|---|---|---|---|---|---|---|\n")
    for row in rows:
        sys.stdout.write(f"| {row['tree']} | {row['case']} | {row['chunks']:,} | {row['action']} | {row['kind']} | {row['embedded']:,} | "
                         f"{row.get('dead_rows', 0):,} | "
                         f"{row['seconds']:.1f} | {row['anon_peak_mb']:,.0f} | {row['file_peak_mb']:,.0f} |\n")


if __name__ == "__main__":
    main()
