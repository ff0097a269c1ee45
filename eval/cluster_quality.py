"""Compare graph and embedding clusters against the library's cause annotations.

    python eval/cluster_quality.py            # prints the Markdown table used in docs/clusters.md

For each Louvain resolution, the embedding method is run with the same number of
clusters, so both are compared at the same granularity.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from incidentlib import Library
from incidentlib.analysis.clusters import embedding_clusters, graph_clusters, quality, read_rows


def main() -> None:
    library = Library.open()
    engine = library._search_engine
    ids = [i.id for i in library.incidents()]
    rows = read_rows(library.data)
    causes = {row.id: row.causes for row in rows}
    vectors = np.vstack([engine.incident_vector(i) for i in ids])
    print(f"{len(ids)} incidents, embedder {library.embedder}\n")
    print("| Louvain resolution | clusters | graph purity | graph NMI | embedding purity | embedding NMI | graph singletons | embedding singletons |")
    print("|---|---|---|---|---|---|---|---|")
    for resolution in (1.0, 1.5, 2.0, 2.5, 3.0):
        graph = graph_clusters(rows, resolution=resolution)
        embedded = embedding_clusters(ids, vectors, len(graph))
        g, e = quality(causes, graph), quality(causes, embedded)
        print(f"| {resolution:.1f} | {g.clusters} | {g.purity:.3f} | {g.nmi:.3f} | {e.purity:.3f} | {e.nmi:.3f} | {g.singletons} | {e.singletons} |")


if __name__ == "__main__":
    main()
