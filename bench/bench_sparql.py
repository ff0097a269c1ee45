"""SPARQL latency on the three graph stores: in-process rdflib, embedded Oxigraph, an Oxigraph server.

    nice python bench/bench_sparql.py                      # bundled graph + 100,000 synthetic incidents
    python bench/bench_sparql.py --synthetic 0             # the bundled graph only (a smoke run)

For each graph (the bundled library; then the bundled vocabulary with ``--synthetic`` made-up
incidents) it loads the same N-Triples into each store, the server being a real ``oxigraph
serve`` process started here on a free loopback port, and times each query of ``QUERIES``
as the store answers it (``GraphStore.query``: parse, evaluation, serialisation, HTTP for the
server; rdflib's parse cache is cleared before each run);
the guard and answer reading that ``Library.sparql`` adds cost the same on every store and
are reported once.  Each cell is the
median of ``--repeats`` runs after one warm-up run; a query whose warm-up takes longer than
``SLOW_SECONDS`` is run once more only.  Answers are checked to be identical across stores
(row counts shown).  Prints a Markdown table with ratios rdflib / Oxigraph.

Synthetic incidents copy the concept links of a bundled incident chosen at random (seeded), add
one random concept of each linked kind, and carry a short made-up title in both languages and a
date: about the shape of a curated record, without the long texts.  Wall-clock on a shared
machine; compare within one run.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import pyoxigraph
import rdflib

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from incidentlib.graph.ontology import concept_uri, incident_uri  # noqa: E402
from incidentlib.graph.rdf import build_graph  # noqa: E402
from incidentlib.graph.sparql import check_query, prepare, read_answer  # noqa: E402
from incidentlib.graph.store import GraphStore, GraphStoreConfig, StoreAnswer, StoreKind, parse_graph_store  # noqa: E402
from incidentlib.graph.store_memory import MemoryStore  # noqa: E402
from incidentlib.graph.store_oxigraph import OxigraphStore  # noqa: E402
from incidentlib.graph.store_remote import RemoteStore  # noqa: E402
from incidentlib.loader import LibraryData, load_library  # noqa: E402
from incidentlib.paths import resolve_data_dir  # noqa: E402

# A warm-up slower than this is repeated once only: rdflib on 100k incidents takes minutes per query.
SLOW_SECONDS = 20.0
SEED = 13
IL = "https://w3id.org/incidentlib/ontology#"
DCT = "http://purl.org/dc/terms/"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
XSD_DATE = "http://www.w3.org/2001/XMLSchema#date"

GUARD_SAMPLE = b'{"head":{"vars":["n"]},"results":{"bindings":[{"n":{"type":"literal","value":"1"}}]}}'
QUERIES: dict[str, str] = {
    "point ASK (one incident)": 'ASK { ?i dcterms:identifier "IL-0025" ; il:hasComponent ?c . ?c skos:notation "nccl" }',
    "incidents naming NCCL": """SELECT ?id WHERE { ?i a il:Incident ; dcterms:identifier ?id ; il:hasComponent ?c .
        ?c skos:prefLabel "NCCL"@en } ORDER BY ?id""",
    "count per component": """SELECT ?c (COUNT(?i) AS ?n) WHERE { ?i a il:Incident ; il:hasComponent ?c }
        GROUP BY ?c ORDER BY DESC(?n) ?c""",
    "shared concepts with IL-0025": """SELECT ?other (COUNT(?c) AS ?shared) WHERE {
        ?me dcterms:identifier "IL-0025" ; il:hasComponent|il:hasCause ?c .
        ?o il:hasComponent|il:hasCause ?c ; dcterms:identifier ?other FILTER(?o != ?me) }
        GROUP BY ?other ORDER BY DESC(?shared) ?other LIMIT 20""",
    "topic with narrower (skos:broader*)": """SELECT (COUNT(DISTINCT ?i) AS ?n) WHERE {
        ?c skos:broader* ?top . ?top skos:notation "gpu" . ?i il:hasComponent ?c }""",
    "title text scan (CONTAINS)": """SELECT (COUNT(?i) AS ?n) WHERE { ?i a il:Incident ; dcterms:title ?t .
        FILTER(CONTAINS(LCASE(STR(?t)), "nccl")) }""",
    "projection feed (all concept links)": """SELECT ?id ?p ?concept WHERE {
        VALUES ?p { il:hasComponent il:hasCause il:hasSymptom dcterms:subject }
        ?i a il:Incident ; dcterms:identifier ?id ; ?p ?c . ?c skos:notation ?concept }""",
}
STORES = ("rdflib (in-process)", "Oxigraph embedded", "Oxigraph server")


def _literal(text: str, lang: str | None = None) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"@{lang}' if lang else f'"{escaped}"'


def synthetic_ntriples(data: LibraryData, count: int) -> bytes:
    """The bundled vocabulary and incidents plus ``count`` synthetic incidents (see the module docstring)."""
    rng = random.Random(SEED)
    base = build_graph(data).serialize(format="nt", encoding="utf-8")
    templates = list(data.incidents.values())
    by_kind = {kind: [c.id for c in data.vocab if c.kind.value == kind] for kind in ("component", "cause", "symptom")}
    properties = {"components": ("component", IL + "hasComponent"), "causes": ("cause", IL + "hasCause"),
                  "symptoms": ("symptom", IL + "hasSymptom")}
    lines: list[str] = []
    for n in range(count):
        template = rng.choice(templates)
        node = f"<{incident_uri(f'SYN-{n:06d}')}>"
        year = rng.randint(2016, 2026)
        lines += [
            f"{node} <{RDF_TYPE}> <{IL}Incident> .",
            f"{node} <{DCT}identifier> {_literal(f'SYN-{n:06d}')} .",
            f'{node} <{DCT}date> "{year}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"^^<{XSD_DATE}> .',
            f"{node} <{IL}organization> <{concept_uri(template.org)}> .",
            f"{node} <{DCT}title> {_literal(f'Synthetic incident {n} like {template.id}', 'en')} .",
            f"{node} <{DCT}title> {_literal(f'합성 사고 {n} ({template.id}와 비슷함)', 'ko')} .",
        ]
        for field, (kind, predicate) in properties.items():
            chosen = set(getattr(template, field))
            if chosen:
                chosen.add(rng.choice(by_kind[kind]))
            lines += [f"{node} <{predicate}> <{concept_uri(c)}> ." for c in sorted(chosen)]
        lines += [f"{node} <{DCT}subject> <{concept_uri(t)}> ." for t in template.tags]
    return base + ("\n".join(lines) + "\n").encode()


def timed(action: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = action()
    return time.perf_counter() - start, result


def measure(store: GraphStore, query: str, repeats: int) -> tuple[float, list[tuple[tuple[str, str | None], ...]]]:
    """Median seconds the store takes to answer (evaluation, serialisation, HTTP for the server) over ``repeats``
    runs after a warm-up, and the answer read as ``Library.sparql`` reads it, as sorted rows (ASK: one row)."""
    kind = check_query(query)

    def fresh() -> StoreAnswer:
        prepare.cache_clear()  # every store parses the query in every run, as for a query not seen before
        return store.query(query, kind)

    start = time.perf_counter()
    answer = read_answer(fresh())
    warm = time.perf_counter() - start
    runs = [timed(fresh)[0] for _ in range(1 if warm > SLOW_SECONDS else repeats)]
    if answer.type == "ASK":
        return statistics.median(runs), [(("boolean", str(answer.boolean)),)]
    return statistics.median(runs), sorted(tuple(sorted(row.items())) for row in answer.rows)


def bench_graph(name: str, ntriples: bytes, repeats: int, workdir: Path) -> list[str]:
    from tests._oxigraph import oxigraph_server

    triples = ntriples.count(b"\n")
    out = [f"### {name}: {triples:,} triples, {len(ntriples) / 1e6:.0f} MB of N-Triples", ""]
    with ExitStack() as stack:
        loads: dict[str, float] = {}
        stores: dict[str, GraphStore] = {}
        memory = MemoryStore(rdflib.Graph())
        loads[STORES[0]], _ = timed(lambda: memory.replace(ntriples, "bench"))
        stores[STORES[0]] = memory
        embedded = OxigraphStore(GraphStoreConfig(kind=StoreKind.oxigraph, location=str(workdir / f"{name}-embedded")))
        loads[STORES[1]], _ = timed(lambda: embedded.replace(ntriples, "bench"))
        stores[STORES[1]] = embedded
        url = stack.enter_context(oxigraph_server(workdir / f"{name}-server"))
        remote = RemoteStore(parse_graph_store(url))
        loads[STORES[2]], _ = timed(lambda: remote.replace(ntriples, "bench"))
        stores[STORES[2]] = remote

        out += ["| query | rows | " + " | ".join(f"{s} (ms)" for s in STORES) + " | rdflib ÷ embedded | rdflib ÷ server |",
                "|---|---:|" + "---:|" * (len(STORES) + 2)]
        out.append("| load (bulk, s) | | " + " | ".join(f"{loads[s]:.1f} s" for s in STORES)
                   + f" | {loads[STORES[0]] / loads[STORES[1]]:.1f}× | {loads[STORES[0]] / loads[STORES[2]]:.1f}× |")
        for label, query in QUERIES.items():
            cells: dict[str, float] = {}
            answers = []
            for store_name, store in stores.items():
                seconds, rows = measure(store, query, repeats)
                cells[store_name] = seconds
                answers.append(rows)
                print(f"  {name} | {label} | {store_name}: {seconds * 1000:.1f} ms ({len(rows)} rows)", file=sys.stderr, flush=True)  # noqa: T201
            if any(rows != answers[0] for rows in answers):
                raise SystemExit(f"{label}: the stores' answers differ")
            out.append(f"| {label} | {len(answers[0]):,} | " + " | ".join(f"{cells[s] * 1000:,.1f}" for s in STORES)
                       + f" | {cells[STORES[0]] / cells[STORES[1]]:,.1f}× | {cells[STORES[0]] / cells[STORES[2]]:,.1f}× |")
        embedded.close()
    return [*out, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--synthetic", type=int, default=100_000, help="Synthetic incidents for the large graph (0: skip).")
    parser.add_argument("--repeats", type=int, default=5, help="Timed runs per query and store (median reported).")
    args = parser.parse_args()
    data = load_library(resolve_data_dir())
    for query in QUERIES.values():
        check_query(query)  # warm-up: pyparsing builds its caches on the first parse
    guard = statistics.median(timed(lambda q=q: (prepare.cache_clear(), check_query(q)))[0]
                              for q in QUERIES.values() for _ in range(args.repeats))
    answer_read = statistics.median(timed(lambda: read_answer(StoreAnswer("SELECT", GUARD_SAMPLE)))[0] for _ in range(args.repeats))
    lines = [f"Python {platform.python_version()}, {os.cpu_count()} CPUs, {platform.machine()}; "
             f"rdflib {rdflib.__version__}, pyoxigraph {pyoxigraph.__version__}; "
             f"median of {args.repeats} runs after a warm-up (one run when the warm-up took over {SLOW_SECONDS:.0f} s).",
             "",
             "Cells are the store's answer time for a query it has not seen: parse, evaluation and serialisation, "
             "plus HTTP for the server. "
             f"`Library.sparql` adds, on every store alike, the read-only guard (rdflib parses the query first: "
             f"median {guard * 1000:.1f} ms over these queries) and reading the answer "
             f"({answer_read * 1000:.2f} ms for a one-row SELECT, growing with the rows).", ""]
    with tempfile.TemporaryDirectory(prefix="bench-sparql-") as scratch:
        work = Path(scratch)
        lines += bench_graph("bundled", build_graph(data).serialize(format="nt", encoding="utf-8"), args.repeats, work)
        if args.synthetic:
            big = synthetic_ntriples(data, args.synthetic)
            del data
            lines += bench_graph(f"synthetic-{args.synthetic // 1000}k", big, args.repeats, work)
    print("\n".join(lines))  # noqa: T201


if __name__ == "__main__":
    main()
