"""Near-duplicate detection: MinHash + LSH against all-pairs baselines.

    python bench/bench_dedupe.py              # sizes 250, 1000, 2000
    python bench/bench_dedupe.py --sizes 500  # one size

Texts are the real title + summary + body of every bundled incident in English; a
library of N texts is built by taking the real texts in turn and, for every copy after
the first, replacing one word in six with a copy marker, so copies are similar in topic
but well below the 0.9 threshold, while every 50th text is an exact near-copy (one word
changed) that must be found.  Side by side, one run, one machine:

- ``lsh``: :func:`incidentlib.dedupe.similar_texts` (MinHash signatures, LSH banding,
  exact Jaccard on candidates);
- ``jaccard all-pairs``: exact shingle Jaccard on every pair;
- ``difflib all-pairs``: ``SequenceMatcher.ratio`` on every pair (run up to
  ``--difflib-max`` texts; beyond that it is extrapolated from the pair rate).

Reported: seconds, pairs compared, pairs found, and whether the found pairs equal the
exact all-pairs result.  Compare numbers within a row, not across machines.
"""

from __future__ import annotations

import argparse
import difflib
import sys
import time
from itertools import combinations
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from incidentlib.dedupe import TEXT_SIMILARITY_THRESHOLD, jaccard, shingles, similar_texts
from incidentlib.loader import load_library

# One word in this many is changed in a topical copy: J of copies stays well under 0.9.
_COPY_EDIT_EVERY = 6
# Every this-many-th text is a planted near-duplicate (one word changed) that must be found.
_PLANT_EVERY = 50


def corpus(size: int) -> dict[str, str]:
    data = load_library(REPO / "data")
    real = [f"{i.title.en}\n{i.summary.en}\n{i.body.en or ''}" for i in data.incidents.values()]
    texts: dict[str, str] = {}
    for n in range(size):
        words = real[n % len(real)].split()
        copy = n // len(real)
        if copy:
            words = [f"copy{copy}" if k % _COPY_EDIT_EVERY == copy % _COPY_EDIT_EVERY else w for k, w in enumerate(words)]
        texts[f"T{n:05d}"] = " ".join(words)
        if n % _PLANT_EVERY == 0:
            planted = list(words)
            planted[len(planted) // 2] = "planted"
            texts[f"T{n:05d}-near"] = " ".join(planted)
    return texts


def run(size: int, difflib_max: int) -> dict[str, object]:
    texts = corpus(size)
    keys = sorted(texts)
    pairs = len(keys) * (len(keys) - 1) // 2

    start = time.perf_counter()
    found = {(p.a, p.b) for p in similar_texts(texts)}
    lsh_s = time.perf_counter() - start

    start = time.perf_counter()
    prints = {k: shingles(texts[k]) for k in keys}
    exact = {(a, b) for a, b in combinations(keys, 2) if jaccard(prints[a], prints[b]) >= TEXT_SIMILARITY_THRESHOLD}
    jaccard_s = time.perf_counter() - start

    sample = keys[:min(len(keys), difflib_max)]
    start = time.perf_counter()
    for a, b in combinations(sample, 2):
        difflib.SequenceMatcher(None, texts[a], texts[b], autojunk=False).ratio()
    sample_pairs = len(sample) * (len(sample) - 1) // 2
    difflib_s = (time.perf_counter() - start) / max(sample_pairs, 1) * pairs
    return {"texts": len(keys), "pairs": pairs, "lsh_s": lsh_s, "jaccard_s": jaccard_s,
            "difflib_s": difflib_s, "difflib_extrapolated": len(sample) < len(keys),
            "found": len(found), "exact": len(exact), "same": found == exact}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[250, 1000, 2000])
    parser.add_argument("--difflib-max", type=int, default=40, help="texts difflib really compares")
    args = parser.parse_args()
    print("| texts | pairs | LSH s | exact Jaccard all-pairs s | difflib all-pairs s | pairs found (LSH / exact) | same |")
    print("|---|---|---|---|---|---|---|")
    for size in args.sizes:
        r = run(size, args.difflib_max)
        mark = " (extrapolated)" if r["difflib_extrapolated"] else ""
        print(f"| {r['texts']} | {r['pairs']} | {r['lsh_s']:.2f} | {r['jaccard_s']:.2f} | "
              f"{r['difflib_s']:.1f}{mark} | {r['found']} / {r['exact']} | {r['same']} |", flush=True)


if __name__ == "__main__":
    main()
