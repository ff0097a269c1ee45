"""A NetworkX projection of the library for graph algorithms.

Nodes are ``"<type>:<id>"`` strings (``incident:IL-0025``, ``component:nccl``,
``organization:imbue``) with a ``type`` attribute; edges carry a ``type``
attribute naming the relation (``has_component``, ``broader``, ``curated`` …).
Inferred links (not curated) are ``inferred_component`` / ``inferred_cause`` /
``inferred_symptom`` edges with ``inferred=True`` and their ``confidence``.

The projection is read-only once built: the edges of one kind share one read-only attribute
mapping (:class:`Projection`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import networkx as nx

from ..loader import LibraryData, each_record

if TYPE_CHECKING:
    from ..models import Incident
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


class Projection(nx.Graph):  # type: ignore[misc]  # networkx ships no type information
    """An ``nx.Graph`` whose edges of one kind share one read-only attribute mapping.

    At 100k incidents the projection has 1.26M edges; as ``nx.Graph.add_edge`` makes them, each
    holds its own one-key ``{"type": …}`` dict (about 200 bytes with its collector header: 0.24 GB
    in all). Here :meth:`link` gives every edge of one type (and, for an inferred link, one
    confidence) the same ``MappingProxyType``: the attributes cost nothing per edge, and code that
    tried to change one edge's attributes in place would fail loudly instead of changing them all.
    Reading is unchanged (``graph.edges[a, b]["type"]``, ``.get("confidence", 1.0)``), and a copy
    (``subgraph(…).copy()``, ``ego_graph``) gets ordinary dicts, so copies stay editable.
    """

    def link(self, u: str, v: str, attributes: Mapping[str, Any]) -> None:
        """Add the edge ``u``–``v`` (and its nodes) with ``attributes``, which replace any the edge had.

        Replacing equals ``add_edge``'s merging for every edge a projection makes: an incident's
        links of the same pair come in the order curated then inferred, and the inferred link's
        attributes hold every key of the curated one's.
        """
        adjacency, nodes = self._adj, self._node
        for node in (u, v):
            if node not in nodes:
                adjacency[node] = self.adjlist_inner_dict_factory()
                nodes[node] = self.node_attr_dict_factory()
        adjacency[u][v] = attributes
        adjacency[v][u] = attributes

    def finish(self) -> Projection:
        """Drop what NetworkX may have cached about the graph before :meth:`link` changed it under it."""
        nx._clear_cache(self)
        return self


class EdgeKinds:
    """One read-only attribute mapping per edge type, and per (kind, confidence) for inferred links."""

    def __init__(self) -> None:
        self._shared: dict[tuple[str, float | None], Mapping[str, Any]] = {}

    def of(self, edge_type: str) -> Mapping[str, Any]:
        key = (edge_type, None)
        shared = self._shared.get(key)
        if shared is None:
            shared = self._shared[key] = MappingProxyType({"type": edge_type})
        return shared

    def inferred(self, kind: str, confidence: float) -> Mapping[str, Any]:
        key = (kind, confidence)
        shared = self._shared.get(key)
        if shared is None:
            shared = self._shared[key] = MappingProxyType({"type": f"inferred_{kind}", "inferred": True, "confidence": confidence})
        return shared


def build_projection(data: LibraryData) -> Projection:
    graph, kinds = Projection(), EdgeKinds()
    for concept in data.vocab:
        graph.add_node(node_id(concept.kind.value, concept.id), type=concept.kind.value, key=concept.id)
    for concept in data.vocab:
        if concept.broader:
            parent = data.vocab.get(concept.broader)
            if parent is not None:
                graph.link(node_id(concept.kind.value, concept.id), node_id(parent.kind.value, parent.id), kinds.of("broader"))
    curated: list[tuple[str, str]] = []  # added once every incident is: the same insertion order as a second pass
    for incident in each_record(data.incidents):
        curated.extend(link_incident(graph, kinds, incident))
    for a, b in curated:
        graph.link(a, b, kinds.of("curated"))
    return graph.finish()


def link_incident(graph: Projection, kinds: EdgeKinds, incident: Incident) -> list[tuple[str, str]]:
    """Add an incident's node and its links to its organisation and concepts; its curated links to other incidents
    are returned (node pairs), for the caller to add once every incident's node is in."""
    inode = node_id("incident", incident.id)
    graph.add_node(inode, type="incident", key=incident.id)
    if incident.year is not None:
        graph.nodes[inode]["year"] = incident.year
    graph.link(inode, node_id("organization", incident.org), kinds.of("organization"))
    for field, (kind, edge_type) in CONCEPT_FIELDS.items():
        for concept_id in getattr(incident, field):
            graph.link(inode, node_id(kind, concept_id), kinds.of(edge_type))
    # inferred links are edges too, marked as such and weighted by their confidence
    for inferred in incident.proposed():
        kind = inferred.kind.value
        graph.link(inode, node_id(kind, inferred.concept), kinds.inferred(kind, inferred.confidence))
    return [(inode, node_id("incident", link.id)) for link in incident.related]


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


def projection_from_store(store: GraphStore, data: LibraryData) -> Projection:
    """The projection :func:`build_projection` gives, read from the store's triples (five SELECTs).

    Nodes and edges are added in the library's file order (vocabulary order, incidents by id,
    each incident's links in its list order) so that ties NetworkX breaks by insertion order
    (shortest paths, communities) fall the same way whatever the store returned first.
    """
    rows = {name: _select(store, query) for name, query in PROJECTION_QUERIES.items()}
    concept_rank = {concept.id: index for index, concept in enumerate(data.vocab)}
    incident_rank = {incident_id: index for index, incident_id in enumerate(data.incidents)}
    last = len(concept_rank) + len(incident_rank)
    predicates = list(LINK_PROPERTIES)

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

    graph, kinds = Projection(), EdgeKinds()
    concepts = sorted(rows["concepts"], key=lambda r: (concept_rank.get(r[0] or "", last), r[0] or ""))
    for concept_id, kind, _, _ in concepts:
        graph.add_node(node_id(str(kind), str(concept_id)), type=kind, key=concept_id)
    for concept_id, kind, parent, parent_kind in concepts:
        if parent is not None:
            graph.link(node_id(str(kind), str(concept_id)), node_id(str(parent_kind), parent), kinds.of("broader"))
    links = sorted(rows["links"], key=lambda r: (predicates.index(str(r[1])), link_rank(str(r[0]), _field(str(r[1])), str(r[2])),
                                                 str(r[2])))
    inferred = sorted(rows["inferred"], key=lambda r: (link_rank(str(r[0]), "inferred", str(r[2])), str(r[2])))
    by_incident: dict[str, list[tuple[str | None, ...]]] = {}
    for row in [*links, *inferred]:
        by_incident.setdefault(str(row[0]), []).append(row)
    del links, inferred
    for incident_id, date, org in sorted(rows["incidents"], key=lambda r: (incident_rank.get(r[0] or "", last), r[0] or "")):
        inode = node_id("incident", str(incident_id))
        graph.add_node(inode, type="incident", key=incident_id)
        if date:
            graph.nodes[inode]["year"] = int(date[:4])
        graph.link(inode, node_id("organization", str(org)), kinds.of("organization"))
        for link in by_incident.get(str(incident_id), []):
            predicate, concept = str(link[1]), str(link[2])
            if predicate in LINK_PROPERTIES:
                kind, edge_type = LINK_PROPERTIES[predicate]
                graph.link(inode, node_id(kind, concept), kinds.of(edge_type))
            else:
                kind = INFERRED_KINDS[predicate]
                graph.link(inode, node_id(kind, concept), kinds.inferred(kind, float(str(link[3]))))
    for incident_id, other in sorted(rows["curated"], key=lambda r: (incident_rank.get(r[0] or "", last),
                                                                      link_rank(str(r[0]), "related", str(r[1])), str(r[1]))):
        graph.link(node_id("incident", str(incident_id)), node_id("incident", str(other)), kinds.of("curated"))
    return graph.finish()


def _field(predicate: str) -> str:
    edge_type = LINK_PROPERTIES[predicate][1]
    return next(field for field, (_, kind) in CONCEPT_FIELDS.items() if kind == edge_type)


# The keys of a SPARQL JSON term object (``{"type": "literal", "value": …}``, W3C SPARQL 1.1 Query Results JSON).
_TERM_KEYS = frozenset({"type", "value", "datatype", "xml:lang"})
_TERM_TYPES = frozenset({"uri", "literal", "bnode", "typed-literal"})


def _select(store: GraphStore, query: str) -> list[tuple[str | None, ...]]:
    """The rows of a SELECT, one tuple of values (``None`` when unbound) in the order the query's text selects them.

    At 100k incidents the link query answers 1.06M rows. Parsed as plain JSON, each row is four
    dicts and three new strings (1.5 GB for the five queries, released afterwards but leaving the
    allocator's arenas scattered under the graph built meanwhile). Here each term object becomes
    its value string as it is parsed (``object_hook``), one string shared by every row with the
    same value (an incident id, a predicate IRI, a concept id), so only a row's own dict is made.
    Only the projection's queries are read so: none of their variables is named like a term key.
    """
    shared: dict[str, str] = {}

    def term_value(obj: dict[str, Any]) -> Any:
        value, kind = obj.get("value"), obj.get("type")
        if isinstance(value, str) and kind in _TERM_TYPES and obj.keys() <= _TERM_KEYS:
            return shared.setdefault(value, value)
        return obj

    variables = re.findall(r"\?(\w+)", query[: query.index("WHERE")])
    payload = json.loads(store.query(query, "SELECT").body, object_hook=term_value)
    return [tuple(binding.get(name) for name in variables) for binding in payload["results"]["bindings"]]
