"""The change log as PROV-O: each change is a ``prov:Activity`` by a ``prov:Agent`` (the token name).

For change n on incident X the graph holds::

    id:change/n     a prov:Activity ; prov:wasAssociatedWith id:agent/<actor> ;
                    prov:endedAtTime "<at>"^^xsd:dateTime ; il:action "update" ; prov:used id:incident/X/v<m> .
    id:incident/X/vn a prov:Entity ; prov:specializationOf id:incident/X ; prov:wasGeneratedBy id:change/n ;
                    prov:generatedAtTime "<at>"^^xsd:dateTime ; prov:wasRevisionOf id:incident/X/v<m> .

where m is the incident's previous change (absent for the first).
"""

from __future__ import annotations

from urllib.parse import quote

from rdflib import RDF, RDFS, Graph, Literal, URIRef
from rdflib.namespace import PROV, XSD

from ..graph.ontology import ID, IL, bind_prefixes, incident_uri
from .overlay import Change


def agent_uri(actor: str) -> URIRef:
    return ID[f"agent/{quote(actor, safe='')}"]


def provenance_graph(changes: list[Change]) -> Graph:
    """PROV-O triples for ``changes`` (any order; versions chain per incident by seq)."""
    graph = Graph()
    bind_prefixes(graph)
    graph.bind("prov", PROV)
    previous: dict[str, URIRef] = {}
    for change in sorted(changes, key=lambda c: c.seq):
        activity = ID[f"change/{change.seq}"]
        agent = agent_uri(change.actor)
        when = Literal(change.at, datatype=XSD.dateTime)
        graph.add((activity, RDF.type, PROV.Activity))
        graph.add((activity, PROV.wasAssociatedWith, agent))
        graph.add((activity, PROV.endedAtTime, when))
        graph.add((activity, IL.action, Literal(change.action)))
        graph.add((agent, RDF.type, PROV.Agent))
        graph.add((agent, RDFS.label, Literal(change.actor)))
        version = URIRef(f"{incident_uri(change.incident_id)}/v{change.seq}")
        graph.add((version, RDF.type, PROV.Entity))
        graph.add((version, PROV.specializationOf, incident_uri(change.incident_id)))
        graph.add((version, PROV.wasGeneratedBy, activity))
        graph.add((version, PROV.generatedAtTime, when))
        if change.incident_id in previous:
            graph.add((activity, PROV.used, previous[change.incident_id]))
            graph.add((version, PROV.wasRevisionOf, previous[change.incident_id]))
        previous[change.incident_id] = version
    return graph


__all__ = ["agent_uri", "provenance_graph"]
