"""The graph clusters' incident graph at 2k-100k incidents whose concept sets differ: the pairwise loop it replaced,
every link kept, and the nearest-neighbour graph, side by side in one run.

    python bench/bench_clusters_graph.py --sizes 2000 5000 20000 100000 --pairwise-up-to 5000 --exact-up-to 5000

A library of copies (``bench_start.py``) repeats 160 concept sets, which the graph merges into 160 nodes; a team's
archive tagged by the classifier does not repeat its sets, so this benchmark makes one that does not.  Incident
``n`` copies a bundled published incident's curated concepts, drops each with probability ``DROP``, and adds
``ADDED`` inferred links of concepts drawn from the library's own of the same field, each with a confidence drawn
in [0.5, 1) to two decimals (as the tagger writes them).  Its label is the copied incident's first cause, so
purity and NMI say how well each graph recovers where the copies came from.

Each (size, method) runs in a fresh interpreter (its peak RSS its own): ``pairwise`` is the loop of the code before
(networkx edge by edge, for every pair holding each concept), ``exact`` is :func:`incident_graph.build` with every
link kept (``EXACT_NODES`` raised past the size), ``default`` is ``build`` as shipped (the nearest-neighbour graph past
``EXACT_NODES`` nodes).  Reported: seconds to make the graph, seconds of Louvain (seed and resolution as
``Library.clusters``), links, peak RSS, clusters, purity and NMI against the labels.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: Share of a copy's curated links dropped, and inferred links added per copy: enough that almost no two copies of
#: one incident share a concept set, few enough that a copy still looks like its original.
DROP = 0.2
ADDED = 2
SEED = 7


def synthetic(size: int) -> tuple[list[tuple[str, dict[tuple[str, str], float]]], dict[str, tuple[str, ...]]]:
    from incidentlib import Library
    from incidentlib.analysis.clusters import CONCEPT_FIELDS

    library = Library.open()
    originals = [i for i in library.incidents() if not i.is_draft and i.causes]
    pools = {field: sorted({c for i in originals for c in getattr(i, field)}) for field in CONCEPT_FIELDS}
    rng = random.Random(SEED)
    incidents, labels = [], {}
    for n in range(size):
        original = originals[n % len(originals)]
        weights = {(field, c): 1.0 for field in CONCEPT_FIELDS for c in getattr(original, field) if rng.random() >= DROP}
        for _ in range(ADDED):
            field = rng.choice(CONCEPT_FIELDS)
            weights.setdefault((field, rng.choice(pools[field])), round(rng.uniform(0.5, 1.0), 2))
        incident_id = f"S-{n:06d}"
        incidents.append((incident_id, weights))
        labels[incident_id] = (original.causes[0],)
    return incidents, labels


def pairwise(incidents: list[tuple[str, dict[tuple[str, str], float]]]):  # type: ignore[no-untyped-def]
    """The incident graph as the code before made it (kept here as the reference)."""
    import networkx as nx

    from incidentlib.analysis.incident_graph import FIELD_WEIGHT

    holders: dict[tuple[str, str], dict[str, float]] = {}
    for incident_id, weights in incidents:
        for key, confidence in weights.items():
            holders.setdefault(key, {})[incident_id] = confidence
    graph = nx.Graph()
    graph.add_nodes_from(i for i, _ in incidents)
    for (field, _), held in holders.items():
        weight = FIELD_WEIGHT[field] * math.log(1 + len(incidents) / len(held))
        ids = list(held)
        for a_index, a in enumerate(ids):
            for b in ids[a_index + 1:]:
                previous = graph.get_edge_data(a, b, {"weight": 0.0})["weight"]
                graph.add_edge(a, b, weight=previous + weight * held[a] * held[b])
    return graph, {n: [n] for n in graph.nodes}


def child(size: int, method: str) -> dict[str, object]:
    import networkx as nx

    from incidentlib.analysis import DEFAULT_RESOLUTION, incident_graph
    from incidentlib.analysis.clusters import SEED as LOUVAIN_SEED
    from incidentlib.analysis.clusters import RawCluster, quality

    incidents, labels = synthetic(size)
    start = time.perf_counter()
    if method == "pairwise":
        graph, members = pairwise(incidents)
    else:
        if method == "exact":
            incident_graph.EXACT_NODES = size + 1
        built = incident_graph.build(incidents)
        graph, members = built.graph, built.members
    made_s = time.perf_counter() - start
    start = time.perf_counter()
    communities = nx.community.louvain_communities(graph, weight="weight", seed=LOUVAIN_SEED, resolution=DEFAULT_RESOLUTION)
    louvain_s = time.perf_counter() - start
    clusters = [RawCluster(sorted(m for node in c for m in members[node]), "") for c in communities]
    found = quality(labels, clusters)
    return {"made_s": made_s, "louvain_s": louvain_s, "nodes": graph.number_of_nodes(), "links": graph.number_of_edges(),
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024, "clusters": found.clusters,
            "purity": found.purity, "nmi": found.nmi}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 5000, 20000, 100000])
    parser.add_argument("--pairwise-up-to", type=int, default=5000)
    parser.add_argument("--exact-up-to", type=int, default=5000)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--child", nargs=2, metavar=("SIZE", "METHOD"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(int(args.child[0]), args.child[1])))
        return
    print("| incidents | graph | made (s) | Louvain (s) | nodes | links | peak RSS (MB) | clusters | purity | NMI |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for size in args.sizes:
        methods = [m for m, up_to in (("pairwise", args.pairwise_up_to), ("exact", args.exact_up_to), ("default", size))
                   if size <= up_to]
        for method in methods:
            try:
                done = subprocess.run([sys.executable, __file__, "--child", str(size), method], capture_output=True,
                                      text=True, timeout=args.timeout, check=True)
            except subprocess.TimeoutExpired:
                print(f"| {size:,} | {method} | unfinished after {args.timeout:.0f} s | | | | | | | |", flush=True)
                continue
            row = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"| {size:,} | {method} | {row['made_s']:.1f} | {row['louvain_s']:.1f} | {row['nodes']:,} | {row['links']:,} | "
                  f"{row['peak_mb']:,} | {row['clusters']} | {row['purity']:.3f} | {row['nmi']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
