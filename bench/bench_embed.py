"""Embedding throughput per backend, batch size and thread count, on the bundled library's own chunks.

    python bench/bench_embed.py                                  # every backend, batches 8/32/128, 1 and 2 threads
    python bench/bench_embed.py --backends use-m3 --sample 512   # one backend

Each configuration embeds the same ``--sample`` chunk texts (documents) after a warm-up call that
loads the weights; the rows of one run are interleaved by configuration, so compare them with each
other, not with another run.  The index build embeds ``EMBED_BATCH`` texts per call
(incidentlib/search/store.py); the embedder's own batch size splits each call further.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from incidentlib import Library  # noqa: E402
from incidentlib.embeddings import EmbedderConfig, create_embedder  # noqa: E402
from incidentlib.search.store import EMBED_BATCH, embed_texts  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", nargs="+", default=["use-m3", "e5-small"])
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 32, 128])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--sample", type=int, default=256, help="chunk texts embedded per configuration")
    args = parser.parse_args()
    texts = [c.text for c in Library.open()._search_engine.chunks][: args.sample]
    characters = sum(len(t) for t in texts)
    print(f"{len(texts)} chunks of the bundled library ({characters / len(texts):.0f} characters on average), "
          f"{os.cpu_count()} CPUs; calls of {EMBED_BATCH} texts as in an index build\n")
    print("| backend | batch size | threads | chunks/s |")
    print("|---|---|---|---|")
    for backend in args.backends:
        for batch in args.batches:
            for threads in args.threads:
                embedder = create_embedder(EmbedderConfig(backend=backend, batch_size=batch, threads=threads))
                embedder.encode_documents(texts[:8])  # load the weights before timing
                started = time.perf_counter()
                embed_texts(texts, embedder, EMBED_BATCH, None)
                rate = len(texts) / (time.perf_counter() - started)
                print(f"| {backend} | {batch} | {threads} | {rate:.1f} |", flush=True)


if __name__ == "__main__":
    main()
