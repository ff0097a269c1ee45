"""A NetworkX projection of the library for graph algorithms.

Nodes are ``"<type>:<id>"`` strings (``incident:IL-0025``, ``component:nccl``,
``organization:imbue``) with a ``type`` attribute; edges carry a ``type``
attribute naming the relation (``has_component``, ``broader``, ``curated`` …).
Inferred links (not curated) are ``inferred_component`` / ``inferred_cause`` /
``inferred_symptom`` edges with ``inferred=True`` and their ``confidence``.
"""

from __future__ import annotations

import networkx as nx

from ..loader import LibraryData

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
    for incident in data.incidents.values():
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
    for incident in data.incidents.values():
        for link in incident.related:
            graph.add_edge(node_id("incident", incident.id), node_id("incident", link.id), type="curated")
    return graph
