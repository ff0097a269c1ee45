"""The concept tagger's first fit on a large curated library: time, CPU and memory, with the training records bounded
per concept (``incidentlib.tagging.training.MAX_RECORDS_PER_CONCEPT``) and without a bound.

    python bench/bench_tagger_fit.py LIBRARY --cache CACHE --per-concept 200 --per-concept all --timeout 600

Each setting runs in a fresh process (``Library.open`` from the cache, then the fit ``Library.tagger`` does, without
reading or writing the fitted model's cache file), in turn.  Reported per setting: the curated records, the records
and examples trained on, seconds of wall and CPU time, the RSS the fit added over the opened library, and the peak.
A fit still running after ``--timeout`` seconds is stopped and reported as unfinished, with its RSS at that moment.
The library is the one ``bench_start.py`` writes (copies of the bundled records under new ids), so its records are
curated, as those of an archive a team reviewed; ``--step build`` of that script gives it an index.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

#: Seconds between two readings of a child's RSS.
POLL_SECONDS = 0.5


def rss_mb(pid: int | str = "self", field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) // 1024
    return 0


def fit_once(library_dir: Path, cache: Path, per_concept: str) -> dict[str, float]:
    """In this (fresh) process: open the library and fit the tagger as ``Library.tagger`` does, uncached."""
    from incidentlib import Library
    from incidentlib.tagging.classifier import ConceptClassifier
    from incidentlib.tagging.training import examples_for

    library = Library.open(library_dir, cache_dir=cache)
    records = [incident for incident in library.data.incidents.values() if not incident.is_draft]
    opened = rss_mb()
    bound = len(records) if per_concept == "all" else int(per_concept)
    wall, cpu = time.perf_counter(), time.process_time()
    examples = examples_for(records, bound)
    ConceptClassifier(library._search_engine.embedder).fit(examples)
    return {"curated records": len(records), "records trained on": len({example.record for example in examples}), "examples": len(examples),
            "wall s": time.perf_counter() - wall, "cpu s": time.process_time() - cpu, "RSS added MB": rss_mb() - opened,
            "peak RSS MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}


def run(library_dir: Path, cache: Path, per_concept: str, timeout: float) -> dict[str, float | str]:
    command = [sys.executable, __file__, str(library_dir), "--cache", str(cache), "--child", per_concept]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    started, last_rss = time.perf_counter(), 0
    while child.poll() is None:
        if time.perf_counter() - started > timeout:
            ticks = Path(f"/proc/{child.pid}/stat").read_text().split()[13:15]  # utime, stime
            cpu = sum(map(float, ticks)) / os.sysconf("SC_CLK_TCK")
            child.kill()
            child.wait()
            return {"unfinished after s": timeout, "cpu s": cpu, "RSS MB then": last_rss}
        last_rss = rss_mb(child.pid)
        time.sleep(POLL_SECONDS)
    assert child.stdout is not None
    return json.loads(child.stdout.read().strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("library", type=Path)
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--per-concept", action="append", help="a bound (records per concept) or 'all'; repeatable")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds before a fit is stopped as unfinished")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(fit_once(args.library, args.cache, args.child)))
        return
    for setting in args.per_concept or ["200", "all"]:
        result = run(args.library, args.cache, setting, args.timeout)
        print(f"| {setting} | " + ", ".join(f"{name} {value:,.1f}" if isinstance(value, float) else f"{name} {value:,}"
                                             for name, value in result.items()) + " |", flush=True)
    print(f"\nload average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
