"""One record whose narrative is a single paragraph with no sentence end (a pasted log, a table, a transcript):
the memory and time of indexing the library with it, and where a term only it holds ranks.

    python bench/bench_long_paragraph.py --tree . --tree /tmp/before --words 60000

For each tree (a checkout of incidentlib, run as its own package with ``PYTHONPATH``), in a fresh library copy of
that tree's bundled data and a fresh cache: ``incidentlib add`` the record, ``incidentlib index`` (its peak RSS
and wall time, measured as the child's ``ru_maxrss``), then ``incidentlib search TERM --mode lexical`` for a word
only the record holds (its rank and score).  The record's body is ``--words`` words drawn with a fixed seed from
3,000 made-up tokens, then the rare term: about 7.6 characters a word, so 60,000 words are about 460 KB.
Prints a Markdown table, one row per tree.  The trees are run one after the other: compare them in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: Distinct made-up words the body is drawn from (a vocabulary of a few thousand, as a long log has).
DISTINCT_WORDS = 3000
#: The word only the long record holds.
RARE_TERM = "zebrafish"
SEED = 5


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def long_record(words: int) -> dict[str, object]:
    rng = random.Random(SEED)
    body = " ".join(f"tok{rng.randrange(DISTINCT_WORDS)}" for _ in range(words)) + f" {RARE_TERM}"
    return {"org": "meta", "title": {"en": "Storage tier stalls"}, "summary": {"en": "Jobs stalled."},
            "body": {"en": body}, "sources": [{"url": "https://example.com/pm", "title": "Postmortem"}]}


def run(tree: Path, args: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """The command, its wall seconds and the peak RSS (GB) of this child (``ru_maxrss`` of the children so far is
    a running maximum, so each measured command runs in its own short-lived wrapper process)."""
    wrapper = ("import resource, subprocess, sys, json; p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
               "print(json.dumps({'rc': p.returncode, 'out': p.stdout, 'err': p.stderr, "
               "'rss': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", wrapper, sys.executable, "-m", "incidentlib", *args],
                          capture_output=True, text=True, env=env, cwd=tree, check=True)
    seconds = time.perf_counter() - start
    result = json.loads(done.stdout)
    completed = subprocess.CompletedProcess(args, result["rc"], result["out"], result["err"])
    return completed, seconds, result["rss"] / 1024 / 1024


def measure(tree: Path, record: dict[str, object], workdir: Path) -> dict[str, object]:
    library, cache = workdir / "lib", workdir / "cache"
    shutil.copytree(tree / "data", library)
    env = {**os.environ, "PYTHONPATH": str(tree), "INCIDENTLIB_CACHE": str(cache)}
    source = workdir / "long.json"
    source.write_text(json.dumps(record), encoding="utf-8")
    added, _, _ = run(tree, ["add", str(source), "--data", str(library), "--json"], env)
    if added.returncode != 0:
        raise SystemExit(f"{tree}: add failed: {added.stderr.strip()}")
    record_id = json.loads(added.stdout)["id"]
    indexed, index_seconds, index_rss = run(tree, ["index", "--data", str(library)], env)
    if indexed.returncode != 0:
        raise SystemExit(f"{tree}: index failed: {indexed.stderr.strip()[-400:]}")
    searched, _, search_rss = run(tree, ["search", RARE_TERM, "--data", str(library), "--mode", "lexical", "-k", "10",
                                         "--json"], env)
    results = json.loads(searched.stdout)["results"] if searched.returncode == 0 else []
    rank = next((i for i, r in enumerate(results, 1) if r["id"] == record_id), None)
    score = next((r["score"] for r in results if r["id"] == record_id), None)
    return {"tree": str(tree), "index_s": index_seconds, "index_gb": index_rss, "search_gb": search_rss,
            "rank": rank, "score": score}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", type=Path, required=True, help="A checkout to measure (repeat).")
    parser.add_argument("--words", type=int, default=60_000, help="Words in the one-paragraph body.")
    args = parser.parse_args()
    record = long_record(args.words)
    say(f"one record, body of {args.words:,} words in one paragraph ({len(record['body']['en']):,} characters); "  # type: ignore[index]
          f"load {os.getloadavg()[0]:.1f}")
    say("")
    say("| tree | index: peak RSS (GB) | index: wall (s) | search: peak RSS (GB) | rank of the record for its own term | score |")
    say("|---|---|---|---|---|---|")
    for tree in args.tree:
        with tempfile.TemporaryDirectory(prefix="bench-long-") as scratch:
            row = measure(tree.resolve(), record, Path(scratch))
        say(f"| {row['tree']} | {row['index_gb']:.2f} | {row['index_s']:.1f} | {row['search_gb']:.2f} | "
              f"{row['rank'] or 'not in the top 10'} | {row['score']} |")


if __name__ == "__main__":
    main()
