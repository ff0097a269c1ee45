"""Where the seconds of a BM25 build in segments go, for one tree: tokenizing, counting pairs, merging, weighing.

    python bench/bench_bm25_phases.py --library LIB --cache CACHE --copies 10 [--tree OTHER_TREE]

The chunks of ``--library`` (e.g. the 100k library of ``bench_start.py``) are repeated ``--copies`` times, each copy's
texts made distinct by a suffix (``bench_bm25_build.py``'s corpus: ten copies of the 100k library are 13,450,070
chunks, the size of 1M incidents), and built with ``build_postings_in_segments`` of ``--tree`` (default: this one)
into a temporary folder, removed afterwards.  Timers wrap the module's steps: tokenizing (``Tokenizing.ids``, or
``token_ids`` in trees before it), ``_pairs`` and ``_bm25_weights``; the progress callback marks the end of each
segment's counting.  Run it for two trees in turn, alternating, to compare them: the machine's speed moves between
runs, and the first segment (the same work in every tree) is a yardstick for it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def timed(totals: dict[str, float], name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            totals[name] += time.perf_counter() - started
    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--library", type=Path, required=True)
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--copies", type=int, default=10)
    parser.add_argument("--tree", type=Path, default=REPO, help="the source tree whose build is timed")
    args = parser.parse_args()
    sys.path.insert(0, str(args.tree.resolve()))
    from incidentlib import Library
    from incidentlib.search import lexical, lexical_segments, token_workers

    source = Library.open(args.library, cache_dir=args.cache)
    real = [chunk.text for chunk in source._search_engine.chunks]
    del source
    texts = [f"{text} #{copy}" if copy else text for copy in range(args.copies) for text in real]
    del real
    totals = {"tokenizing": 0.0, "pairs": 0.0, "weights": 0.0}
    lexical._pairs = timed(totals, "pairs", lexical._pairs)  # type: ignore[attr-defined]
    if hasattr(token_workers, "Tokenizing"):
        token_workers.Tokenizing.ids = timed(totals, "tokenizing", token_workers.Tokenizing.ids)  # type: ignore[method-assign]
    else:
        token_workers.token_ids = timed(totals, "tokenizing", token_workers.token_ids)
    lexical_segments._bm25_weights = timed(totals, "weights", lexical_segments._bm25_weights)  # type: ignore[attr-defined]
    scratch = Path(tempfile.mkdtemp(prefix="bench-phases-"))
    marks: list[float] = []
    started = time.perf_counter()
    try:
        lexical_segments.build_postings_in_segments(texts, scratch / "postings",
                                                    progress=lambda done, total: marks.append(time.perf_counter() - started))
        total = time.perf_counter() - started
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps({"tree": str(args.tree), "chunks": len(texts), "total_s": round(total, 1),
                      "counting_done_s": round(marks[-1], 1), "first_segment_s": round(marks[0], 1),
                      "later_segments_s": round(marks[-1] - marks[0], 1), "merge_and_weights_s": round(total - marks[-1], 1),
                      "segments_done_at_s": [round(mark, 1) for mark in marks],
                      **{f"{name}_s": round(value, 1) for name, value in totals.items()}}))


if __name__ == "__main__":
    main()
