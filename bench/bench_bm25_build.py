"""BM25 build time and memory of this tree next to another version's ``lexical.py`` (and ``tokenize.py``).

    git show <rev>:incidentlib/search/lexical.py > /tmp/lexical_before.py
    git show <rev>:incidentlib/search/tokenize.py > /tmp/tokenize_before.py
    python bench/bench_bm25_build.py --copies 30 --before /tmp/lexical_before.py \\
        --before-tokenize /tmp/tokenize_before.py

The corpus is the bundled library's chunks (or those of ``--library``, e.g. the 100k library ``bench_start.py``
builds, with ``--copies 1``) copied ``--copies`` times with `` #<copy>`` appended to
every text of a copy after the first (the recipe of ``bench_search.py``).  Two builds are timed:

- ``postings``: :func:`postings_from_tokens` over the chunks tokenized once beforehand (each copy's
  tokens are the original's plus the copy number), so only numbering, sorting and weighing count;
- ``from texts``: :func:`build_postings` over the texts, tokenization included, which is the whole
  BM25 build of a library apart from cutting the incidents into chunks (no embedding is involved).
  Every text is tokenized: no text is looked up from an earlier copy; the tokenizer's memos (per word,
  and per white-space-free piece in the bulk path) do apply, as they do on any archive (its vocabulary
  repeats).

The versions run in turn, ``--rounds`` times each, and must produce identical postings.  ``--versions after``
times this tree alone (for a size at which both versions' memory would not fit at once; nothing is
compared).  Memory is the peak resident set during a build above the resident set before it (sampled
every 5 ms by another process); the resident sets of the processes a build starts (its tokenizing workers) are
summed and reported apart.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from incidentlib import Library  # noqa: E402
from incidentlib.search import lexical, lexical_segments, tokenize  # noqa: E402

FIELDS = ("vocabulary", "indptr", "indices", "data", "tf", "lengths")
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE / 2**20


def anonymous_mb() -> float:
    """The resident set less its file-backed and shared pages (statm's resident − shared)."""
    with open("/proc/self/statm") as statm:
        fields = statm.read().split()
    return (int(fields[1]) - int(fields[2])) * PAGE / 2**20


# The resident set is sampled by a separate process: a sampling thread here would take the GIL from the build
# every few milliseconds and slow the two versions unequally.
SAMPLER = """
import os, sys, time
page, me, peak, helpers, anonymous = os.sysconf("SC_PAGE_SIZE"), os.getpid(), 0, 0, 0
def rss(pid, anonymous_only=False):
    try:
        with open(f"/proc/{pid}/statm") as statm:
            fields = statm.read().split()
        return (int(fields[1]) - (int(fields[2]) if anonymous_only else 0)) * page
    except OSError:  # ended between the listing and the read
        return 0
def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as listed:
            return [int(x) for x in listed.read().split()]
    except OSError:
        return []
def command(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as line:
            return line.read()
    except OSError:
        return b""
# A child between its fork (vfork) and its exec still runs the build's own image: its resident set is the build's,
# not a worker's, so it is not counted until it has become the worker program.
build = command(int(sys.argv[1]))
print("ready", flush=True)
while not os.path.exists(sys.argv[2]):
    peak = max(peak, rss(int(sys.argv[1])))
    anonymous = max(anonymous, rss(int(sys.argv[1]), anonymous_only=True))
    found, todo = 0, [c for c in children(int(sys.argv[1])) if c != me]
    while todo:
        pid = todo.pop()
        if command(pid) != build:
            found += rss(pid)
        todo.extend(children(pid))
    helpers = max(helpers, found)
    time.sleep(0.005)
print(peak / 2**20, helpers / 2**20, anonymous / 2**20, flush=True)
"""


def measured(build: Callable[[], Any]) -> tuple[Any, float, float, float, float]:
    """``build()``'s result, its wall time (s), the peak resident set it added (MB), the peak of the summed
    resident sets of the processes it started (the tokenizing workers; 0 without them), and the peak anonymous
    memory it added (MB: the resident set less file-backed pages, such as those of arrays written to mapped files)."""
    gc.collect()
    base, base_anonymous = rss_mb(), anonymous_mb()
    with tempfile.TemporaryDirectory() as folder:
        stop = Path(folder) / "stop"
        sampler = subprocess.Popen([sys.executable, "-c", SAMPLER, str(os.getpid()), str(stop)],
                                   stdout=subprocess.PIPE, text=True)
        assert sampler.stdout is not None
        sampler.stdout.readline()
        started = time.perf_counter()
        result = build()
        elapsed = time.perf_counter() - started
        stop.touch()
        peak, helpers, anonymous = map(float, sampler.stdout.readline().split())
        sampler.wait()
    return result, elapsed, max(peak, rss_mb()) - base, helpers, max(anonymous, anonymous_mb()) - base_anonymous


def load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"incidentlib.search.{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", type=Path, help="another version's incidentlib/search/lexical.py (needed unless --versions after)")
    parser.add_argument("--before-tokenize", type=Path, help="that version's tokenize.py (default: this tree's)")
    parser.add_argument("--before-workers", type=Path, help="that version's token_workers.py (default: this tree's)")
    parser.add_argument("--mode", choices=("postings", "texts", "both", "segments"), default="both",
                        help="segments: this tree's build in segments into files (lexical_segments), as a library over "
                             "SEGMENT_CHUNKS chunks gets it; only --versions after")
    parser.add_argument("--segment-chunks", type=int, default=None, help="chunks a segment (default: SEGMENT_CHUNKS)")
    parser.add_argument("--versions", choices=("both", "after"), default="both")
    parser.add_argument("--library", type=Path,
                        help="take the chunks of this library instead of the bundled one (e.g. bench_start.py's WORK/library)")
    parser.add_argument("--cache", type=Path, help="the cache folder of --library (e.g. WORK/cache)")
    args = parser.parse_args()
    if args.versions == "both" and args.before is None:
        parser.error("--before is required unless --versions after")
    if args.mode == "segments" and args.versions != "after":
        parser.error("--mode segments measures this tree alone: add --versions after")
    versions: list[tuple[str, ModuleType]] = [("after", lexical)]
    if args.versions == "both":
        before = load(args.before, "_lexical_before")
        if args.before_tokenize:
            before.tokenize = load(args.before_tokenize, "_tokenize_before").tokenize  # type: ignore[attr-defined]
        if args.before_workers:
            before.token_workers = load(args.before_workers, "_token_workers_before")  # type: ignore[attr-defined]
        versions.insert(0, ("before", before))
    source = Library.open(args.library, cache_dir=args.cache) if args.library else Library.open()
    real_texts = [c.text for c in source._search_engine.chunks]
    del source
    texts = [f"{text} #{copy}" if copy else text for copy in range(args.copies) for text in real_texts]
    print(f"{len(texts):,} chunks ({args.copies} copies of {len(real_texts):,}), "
          f"load average before: {os.getloadavg()[0]:.2f}")
    builds: dict[str, dict[str, Callable[[], Any]]] = {}
    if args.mode in ("postings", "both"):
        real = [tokenize.tokenize(text) for text in real_texts]
        tokens = [[*t, str(copy)] if copy else t for copy in range(args.copies) for t in real]
        print(f"{sum(map(len, tokens)):,} tokens")
        builds["postings"] = {name: (lambda m=module: m.postings_from_tokens(iter(tokens), len(tokens)))
                              for name, module in versions}
    if args.mode in ("texts", "both"):
        builds["from texts"] = {name: (lambda m=module: m.build_postings(texts))
                                for name, module in versions}
    if args.mode == "segments":
        scratch = Path(tempfile.mkdtemp(prefix="bench-segments-"))
        segment = args.segment_chunks or lexical_segments.SEGMENT_CHUNKS
        rounds = iter(range(args.rounds))

        def segmented() -> Any:
            folder = scratch / f"round-{next(rounds)}"
            try:
                return lexical_segments.build_postings_in_segments(texts, folder, segment_chunks=segment)
            finally:
                shutil.rmtree(folder, ignore_errors=True)  # the mapped arrays stay readable until dropped

        builds[f"in segments of {segment:,}"] = {"after": segmented}
    print("\n| build | version | median (s) | min (s) | max (s) | µs a chunk (median) | peak RSS added (MB) | "
          "peak anonymous added (MB) | workers' peak RSS (MB) |\n|---|---|---|---|---|---|---|---|---|")
    for kind, versions in builds.items():
        times: dict[str, list[float]] = {name: [] for name in versions}
        memory: dict[str, float] = dict.fromkeys(versions, 0.0)
        helpers: dict[str, float] = dict.fromkeys(versions, 0.0)
        private: dict[str, float] = dict.fromkeys(versions, 0.0)
        built: dict[str, Any] = {}
        for _ in range(args.rounds):
            for name, build in versions.items():
                built[name] = None
                built[name], elapsed, added, workers, anonymous = measured(build)
                times[name].append(elapsed)
                memory[name] = max(memory[name], added)
                private[name] = max(private[name], anonymous)
                helpers[name] = max(helpers[name], workers)
        for field in FIELDS if "before" in built else ():
            a, b = getattr(built["before"], field), getattr(built["after"], field)
            assert (a == b) if isinstance(a, list) else np.array_equal(a, b), f"{kind}: {field} differs"
        for name, samples in times.items():
            median = float(np.median(samples))
            print(f"| {kind} | {name} | {median:.2f} | {min(samples):.2f} | {max(samples):.2f} | "
                  f"{median / len(texts) * 1e6:.1f} | {memory[name]:,.0f} | {private[name]:,.0f} | {helpers[name]:,.0f} |")
        del built
    compared = "postings identical" if args.versions == "both" else "one version, nothing compared"
    print(f"\n{compared}; load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
