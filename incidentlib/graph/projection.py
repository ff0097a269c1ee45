"""A NetworkX projection of the library for graph algorithms.

Nodes are ``"<type>:<id>"`` strings (``incident:IL-0025``, ``component:nccl``,
``organization:imbue``) with a ``type`` attribute; edges carry a ``type``
attribute naming the relation (``has_component``, ``broader``, ``curated`` …).
Inferred links (not curated) are ``inferred_component`` / ``inferred_cause`` /
``inferred_symptom`` edges with ``inferred=True`` and their ``confidence``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import networkx as nx

from ..loader import LibraryData, each_record

if TYPE_CHECKING:
    from .store import GraphStore

# Incident field -> (node type of the concept, edge type).
CONCEPT_FIELDS: dict[str, tuple[str, str]] = {
    "components": ("component", "has_component"),
    "causes": ("cause", "has_cause"),
    "symptoms": ("symptom", "has_symptom"),
    "tags": ("tag", "has_tag"),
}


def node_id(kind: str, identifier: str) -> str:
    return f"{kind}:{identifier}"


def split_node(node: str) -> tuple[str, str]:
    kind, _, identifier = node.partition(":")
    return kind, identifier


def build_projection(data: LibraryData) -> nx.Graph:
    graph = nx.Graph()
    for concept in data.vocab:
        graph.add_node(node_id(concept.kind.value, concept.id), type=concept.kind.value, key=concept.id)
    for concept in data.vocab:
        if concept.broader:
            parent = data.vocab.get(concept.broader)
            if parent is not None:
                graph.add_edge(
                    node_id(concept.kind.value, concept.id), node_id(parent.kind.value, parent.id), type="broader"
                )
    curated: list[tuple[str, str]] = []  # added once every incident is: the same insertion order as a second pass
    for incident in each_record(data.incidents):
        inode = node_id("incident", incident.id)
        graph.add_node(inode, type="incident", key=incident.id)
        if incident.year is not None:
            graph.nodes[inode]["year"] = incident.year
        graph.add_edge(inode, node_id("organization", incident.org), type="organization")
        for field, (kind, edge_type) in CONCEPT_FIELDS.items():
            for concept_id in getattr(incident, field):
                graph.add_edge(inode, node_id(kind, concept_id), type=edge_type)
        # inferred links are edges too, marked as such and weighted by their confidence
        for inferred in incident.proposed():
            kind = inferred.kind.value
            graph.add_edge(inode, node_id(kind, inferred.concept), type=f"inferred_{kind}", inferred=True,
                           confidence=inferred.confidence)
        curated.extend((inode, node_id("incident", link.id)) for link in incident.related)
    graph.add_edges_from(curated, type="curated")
    return graph


# ---- the projection read from a graph store ------------------------------------------------
# Incident property -> (node type of the concept, edge type); the same links as CONCEPT_FIELDS.
LINK_PROPERTIES: dict[str, tuple[str, str]] = {
    "https://w3id.org/incidentlib/ontology#hasComponent": CONCEPT_FIELDS["components"],
    "https://w3id.org/incidentlib/ontology#hasCause": CONCEPT_FIELDS["causes"],
    "https://w3id.org/incidentlib/ontology#hasSymptom": CONCEPT_FIELDS["symptoms"],
    "http://purl.org/dc/terms/subject": CONCEPT_FIELDS["tags"],
}
INFERRED_KINDS: dict[str, str] = {
    "https://w3id.org/incidentlib/ontology#inferredComponent": "component",
    "https://w3id.org/incidentlib/ontology#inferredCause": "cause",
    "https://w3id.org/incidentlib/ontology#inferredSymptom": "symptom",
}
PROJECTION_QUERIES: dict[str, str] = {
    "concepts": """SELECT ?id ?kind ?parent ?parentKind WHERE {
        ?c a skos:Concept ; skos:notation ?id ; il:conceptKind ?kind .
        OPTIONAL { ?c skos:broader ?b . ?b skos:notation ?parent ; il:conceptKind ?parentKind } }""",
    "incidents": """SELECT ?id ?date ?org WHERE {
        ?i a il:Incident ; dcterms:identifier ?id ; il:organization ?o . ?o skos:notation ?org .
        OPTIONAL { ?i dcterms:date ?date } }""",
    "links": """SELECT ?id ?p ?concept WHERE {
        VALUES ?p { il:hasComponent il:hasCause il:hasSymptom dcterms:subject }
        ?i a il:Incident ; dcterms:identifier ?id ; ?p ?c . ?c skos:notation ?concept }""",
    "inferred": """SELECT ?id ?p ?concept ?confidence WHERE {
        VALUES ?p { il:inferredComponent il:inferredCause il:inferredSymptom }
        ?i a il:Incident ; dcterms:identifier ?id ; ?p ?c ; il:inference ?n .
        ?n il:concept ?c ; il:confidence ?confidence ; il:inferenceStatus "proposed" . ?c skos:notation ?concept }""",
    "curated": """SELECT ?id ?other WHERE {
        ?i a il:Incident ; dcterms:identifier ?id ; dcterms:relation ?j . ?j dcterms:identifier ?other }""",
}


def projection_from_store(store: GraphStore, data: LibraryData) -> nx.Graph:
    """The projection :func:`build_projection` gives, read from the store's triples (five SELECTs).

    Nodes and edges are added in the library's file order (vocabulary order, incidents by id,
    each incident's links in its list order) so that ties NetworkX breaks by insertion order
    (shortest paths, communities) fall the same way whatever the store returned first.
    """
    rows = {name: _select(store, query) for name, query in PROJECTION_QUERIES.items()}
    concept_rank = {concept.id: index for index, concept in enumerate(data.vocab)}
    incident_rank = {incident_id: index for index, incident_id in enumerate(data.incidents)}
    last = len(concept_rank) + len(incident_rank)

    # each incident's links in its list order, read in one pass over the records (none of them kept)
    orders: dict[str, dict[str, list[str]]] = {}
    for incident in each_record(data.incidents):
        order = {field: list(getattr(incident, field)) for field in CONCEPT_FIELDS}
        order["inferred"] = [link.concept for link in incident.proposed()]
        order["related"] = [link.id for link in incident.related]
        orders[incident.id] = order

    def link_rank(incident_id: str, field: str, concept: str) -> int:
        order = orders.get(incident_id)
        values = order[field] if order is not None else []
        return values.index(concept) if concept in values else last

    graph = nx.Graph()
    concepts = sorted(rows["concepts"], key=lambda r: (concept_rank.get(r["id"] or "", last), r["id"] or ""))
    for row in concepts:
        graph.add_node(node_id(str(row["kind"]), str(row["id"])), type=row["kind"], key=row["id"])
    for row in concepts:
        if row["parent"] is not None:
            graph.add_edge(node_id(str(row["kind"]), str(row["id"])), node_id(str(row["parentKind"]), row["parent"]),
                           type="broader")
    links = sorted(rows["links"], key=lambda r: (list(LINK_PROPERTIES).index(str(r["p"])),
                                                 link_rank(str(r["id"]), _field(str(r["p"])), str(r["concept"])),
                                                 str(r["concept"])))
    inferred = sorted(rows["inferred"], key=lambda r: (link_rank(str(r["id"]), "inferred", str(r["concept"])), str(r["concept"])))
    by_incident: dict[str, list[dict[str, str | None]]] = {}
    for row in [*links, *inferred]:
        by_incident.setdefault(str(row["id"]), []).append(row)
    for row in sorted(rows["incidents"], key=lambda r: (incident_rank.get(r["id"] or "", last), r["id"] or "")):
        inode = node_id("incident", str(row["id"]))
        graph.add_node(inode, type="incident", key=row["id"])
        if row["date"]:
            graph.nodes[inode]["year"] = int(row["date"][:4])
        graph.add_edge(inode, node_id("organization", str(row["org"])), type="organization")
        for link in by_incident.get(str(row["id"]), []):
            predicate = str(link["p"])
            if predicate in LINK_PROPERTIES:
                kind, edge_type = LINK_PROPERTIES[predicate]
                graph.add_edge(inode, node_id(kind, str(link["concept"])), type=edge_type)
            else:
                kind = INFERRED_KINDS[predicate]
                graph.add_edge(inode, node_id(kind, str(link["concept"])), type=f"inferred_{kind}", inferred=True,
                               confidence=float(str(link["confidence"])))
    for row in sorted(rows["curated"], key=lambda r: (incident_rank.get(r["id"] or "", last),
                                                     link_rank(str(r["id"]), "related", str(r["other"])), str(r["other"]))):
        graph.add_edge(node_id("incident", str(row["id"])), node_id("incident", str(row["other"])), type="curated")
    return graph


def _field(predicate: str) -> str:
    edge_type = LINK_PROPERTIES[predicate][1]
    return next(field for field, (_, kind) in CONCEPT_FIELDS.items() if kind == edge_type)


def _select(store: GraphStore, query: str) -> list[dict[str, str | None]]:
    payload = json.loads(store.query(query, "SELECT").body)
    variables = payload["head"]["vars"]
    return [{name: binding[name]["value"] if name in binding else None for name in variables}
            for binding in payload["results"]["bindings"]]
