"""Concept recognition cost (``ConceptRecognizer.spans``) over the bundled library's texts, two trees side by side.

    python bench/bench_recognise.py --tree OTHER_TREE [--rounds 5] [--repeat 20]

Each round runs one fresh interpreter per tree, in alternating order (the machine's speed moves between runs): it
builds the recogniser from the bundled vocabulary once (timed apart), then calls ``spans`` on every title, summary
and body of the bundled records in both languages, ``--repeat`` times over, and reports the microseconds per text
and the number of concepts found (the second tree may find more or fewer: the count says whether it matched
differently).  Prints a Markdown table: the median per tree and the ratio of this tree to ``--tree``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tree_child import run_in_tree

REPO = Path(__file__).resolve().parent.parent

_CHILD = r"""
from incidentlib import Library
from incidentlib.search.concepts import ConceptRecognizer

repeat = int(sys.argv[2])
library = Library.open()
texts = [value for incident in library.data.incidents.values()
         for field in (incident.title, incident.summary, incident.body) for value in (field.en, field.ko) if value]
started = time.perf_counter()
recognizer = ConceptRecognizer(library.vocab)
built = time.perf_counter() - started
found = sum(len(recognizer.spans(text)) for text in texts)  # also the warm-up: patterns compile on first use
started = time.perf_counter()
for _ in range(repeat):
    for text in texts:
        recognizer.spans(text)
seconds = time.perf_counter() - started
print(json.dumps({"texts": len(texts), "found": found, "build_ms": built * 1e3,
                  "us_per_text": seconds / (repeat * len(texts)) * 1e6}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", type=Path, required=True, help="the other source tree (e.g. a worktree of the parent)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    trees = {"this": REPO, "other": args.tree.resolve()}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for round_ in range(args.rounds):
        order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
        for name in order:
            runs[name].append(run_in_tree(trees[name], _CHILD, str(args.repeat))[-1])  # type: ignore[arg-type]
    medians = {name: statistics.median(r["us_per_text"] for r in rows) for name, rows in runs.items()}
    print(f"{runs['this'][0]['texts']:.0f} texts, {args.repeat} passes a run, {args.rounds} runs a tree, alternating\n")
    print("| tree | µs per text (median) | runs | concepts found | recogniser built (ms, median) |")
    print("|---|---|---|---|---|")
    for name, rows in runs.items():
        spread = ", ".join(f"{r['us_per_text']:.1f}" for r in rows)
        build = statistics.median(r["build_ms"] for r in rows)
        print(f"| {name} ({trees[name]}) | {medians[name]:.1f} | {spread} | {rows[0]['found']:.0f} | {build:.1f} |")
    print(f"\nthis / other: {medians['this'] / medians['other']:.2f}×")


if __name__ == "__main__":
    main()
