"""The cost of looking for names with a word inside them (``LooseNames``), next to the exact recogniser, in one run.

    python bench/bench_loose_names.py [--rounds 5] [--repeat 5] [--skip-reference]

Texts: every record of the bundled library as the tagger reads it (``incident_text``, one per language), the
long texts the importer's and the tagger's alias view reads. Each round times, in turn and in alternating order:
``ConceptRecognizer.spans`` (the exact names), ``LooseNames.find`` (the fast path: a name is tried only where its
first word starts) and ``LooseNames.reference_find`` (every name's pattern searched over the whole text), each
``--repeat`` times over the texts. Prints the medians in µs per text and the ratios; the two ``LooseNames`` paths
must find the same links (checked). ``--skip-reference`` leaves ``reference_find`` out of the timed rounds (about 100×
the others) and still checks that both find the same links.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from incidentlib import Library
from incidentlib.search.concepts import ConceptRecognizer
from incidentlib.tagging.loose import LooseNames
from incidentlib.tagging.tagger import incident_text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--skip-reference", action="store_true", help="do not time reference_find (still compared)")
    args = parser.parse_args()
    library = Library.open()
    texts = [t for incident in library.incidents() for lang in ("en", "ko") if (t := incident_text(incident, lang))]
    recognizer, loose = ConceptRecognizer(library.vocab), LooseNames(library.vocab)
    assert all(loose.find(t) == loose.reference_find(t) for t in texts), "the fast path found other links"
    found = sum(len(loose.find(t)) for t in texts)
    ways: dict[str, Callable[[str], object]] = {
        "exact names (`ConceptRecognizer.spans`)": recognizer.spans,
        "names with a word inside (`LooseNames.find`)": loose.find,
        "the same, every pattern over the whole text (`reference_find`)": loose.reference_find,
    }
    if args.skip_reference:
        del ways["the same, every pattern over the whole text (`reference_find`)"]
    timings: dict[str, list[float]] = {name: [] for name in ways}
    for round_ in range(args.rounds):
        order = list(ways) if round_ % 2 == 0 else list(reversed(ways))
        for name in order:
            started = time.perf_counter()
            for _ in range(args.repeat):
                for text in texts:
                    ways[name](text)
            timings[name].append((time.perf_counter() - started) / (args.repeat * len(texts)) * 1e6)
    medians = {name: statistics.median(values) for name, values in timings.items()}
    exact = medians[next(iter(ways))]
    lines = [f"{len(texts)} texts (median {statistics.median(map(len, texts)):.0f} characters), {args.repeat} passes "
             f"a round, {args.rounds} rounds alternating; {found} names found with a word inside (concepts also "
             "written whole included)", "",
             "| way | µs per text (median) | rounds | vs exact names |", "|---|---|---|---|"]
    for name, values in timings.items():
        lines.append(f"| {name} | {medians[name]:.0f} | {', '.join(f'{v:.0f}' for v in values)} | {medians[name] / exact:.2f}× |")
    print("\n".join(lines))  # noqa: T201


if __name__ == "__main__":
    main()
