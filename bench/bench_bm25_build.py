"""BM25 postings build time of this tree next to another version's ``lexical.py``, on the same tokens.

    git show <rev>:incidentlib/search/lexical.py > /tmp/lexical_before.py
    python bench/bench_bm25_build.py --copies 30 --before /tmp/lexical_before.py

The tokens are the bundled library's chunks tokenized once, copied ``--copies`` times with the copy
number appended (the recipe of ``bench_search.py``), so only the postings build is timed.  The two
versions run in turn, ``--rounds`` times each, and must produce identical postings.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from incidentlib import Library  # noqa: E402
from incidentlib.search import lexical  # noqa: E402
from incidentlib.search.tokenize import tokenize  # noqa: E402

FIELDS = ("vocabulary", "indptr", "indices", "data", "tf", "lengths")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", type=Path, required=True, help="another version's incidentlib/search/lexical.py")
    args = parser.parse_args()
    spec = importlib.util.spec_from_file_location("incidentlib.search._lexical_before", args.before)
    assert spec is not None and spec.loader is not None
    before = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = before  # dataclasses look their module up while the class is made
    spec.loader.exec_module(before)
    real = [tokenize(c.text) for c in Library.open()._search_engine.chunks]
    tokens = [[*t, str(copy)] if copy else t for copy in range(args.copies) for t in real]
    print(f"{len(tokens):,} chunks, {sum(map(len, tokens)):,} tokens")
    times: dict[str, list[float]] = {"before": [], "after": []}
    built = {}
    for _ in range(args.rounds):
        for name, module in (("before", before), ("after", lexical)):
            started = time.perf_counter()
            built[name] = module.postings_from_tokens(iter(tokens), len(tokens))
            times[name].append(time.perf_counter() - started)
    for field in FIELDS:
        a, b = getattr(built["before"], field), getattr(built["after"], field)
        assert (a == b) if isinstance(a, list) else np.array_equal(a, b), f"{field} differs"
    print("postings identical\n\n| version | median (s) | min (s) | max (s) |\n|---|---|---|---|")
    for name, samples in times.items():
        print(f"| {name} | {np.median(samples):.2f} | {min(samples):.2f} | {max(samples):.2f} |")


if __name__ == "__main__":
    main()
