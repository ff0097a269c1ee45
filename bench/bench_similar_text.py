"""`similar` by text: a whole write-up as the query against its first MAX_QUERY_CHARS characters.

    python bench/bench_similar_text.py [--data DIR] [--queries 40]

Every n-th record of the library (sorted by id) is pasted twice, cut at MAX_QUERY_CHARS and at
MAX_SIMILAR_TEXT_CHARS, the two alternating, after one warm-up query; wall-clock per call of
``Library.similar(text=…, k=10)``. Compare the two rows of one run, not runs on different machines.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from incidentlib import Library  # noqa: E402
from incidentlib.requests import MAX_QUERY_CHARS, MAX_SIMILAR_TEXT_CHARS  # noqa: E402
from incidentlib.tagging.tagger import incident_text  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, help="the library (default: the bundled one)")
    parser.add_argument("--queries", type=int, default=40)
    args = parser.parse_args()
    library = Library.open(args.data) if args.data else Library.open()
    library.build_index()
    library.prepare_tagger()
    ids = sorted(library.data.incidents)
    ids = ids[:: max(1, len(ids) // args.queries)]
    texts = {i: incident_text(library.get(i)) for i in ids}
    library.similar(text=texts[ids[0]][:MAX_QUERY_CHARS], k=10)
    times: dict[int, list[float]] = {MAX_QUERY_CHARS: [], MAX_SIMILAR_TEXT_CHARS: []}
    for i in ids:
        for cut, out in times.items():
            start = time.perf_counter()
            library.similar(text=texts[i][:cut], k=10)
            out.append((time.perf_counter() - start) * 1000)
    lengths = [len(t) for t in texts.values()]
    print(f"{len(ids)} records; text length median {statistics.median(lengths):,.0f} characters, "
          f"{sum(n > MAX_QUERY_CHARS for n in lengths)} over {MAX_QUERY_CHARS:,}\n")
    print("| text given | p50 (ms) | p90 (ms) |\n|---|---|---|")
    for cut, values in times.items():
        ordered = sorted(values)
        print(f"| first {cut:,} characters | {statistics.median(ordered):.1f} | {ordered[int(0.9 * (len(ordered) - 1))]:.1f} |")


if __name__ == "__main__":
    main()
