"""Build the library's RDF graph: SKOS vocabulary, incidents, organizations, sources.

Every triple of an incident has the incident's node or one of its own sub-nodes (signals,
lessons, curated links, inferences) as subject, except the description of a cited source
document, which several incidents may share.  So a change to some incidents is a *delta*
(:func:`graph_delta`): the changed incidents' old triples out, their new ones in, keeping a
source's description while an unchanged incident still cites it.  Applying it to the graph
of the old data gives exactly the graph of the new data (tested against a full rebuild).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rdflib import RDF, RDFS, Graph, Literal, URIRef
from rdflib.namespace import DCTERMS, SDO, SKOS, XSD
from rdflib.term import Node

from ..gc_pause import collector_paused
from ..loader import LibraryData
from ..models import LANGS, Concept, ConceptKind, Incident, Source, Text
from .ontology import ID, IL, bind_prefixes, concept_uri, incident_uri, ontology_graph, scheme_uri

# Incident field -> ontology property linking the incident to a concept.
CONCEPT_PROPERTIES: dict[str, URIRef] = {
    "components": IL.hasComponent,
    "causes": IL.hasCause,
    "symptoms": IL.hasSymptom,
    "tags": DCTERMS.subject,
}


def build_graph(data: LibraryData, include_ontology: bool = True) -> Graph:
    """The whole library as one rdflib graph; made with the cyclic collector paused (millions of triples, none of
    them garbage: :mod:`incidentlib.gc_pause`)."""
    with collector_paused():
        return _build_graph(data, include_ontology)


def _build_graph(data: LibraryData, include_ontology: bool) -> Graph:
    graph = ontology_graph() if include_ontology else Graph()
    bind_prefixes(graph)
    for kind in ConceptKind:
        scheme = scheme_uri(kind.value)
        graph.add((scheme, RDF.type, SKOS.ConceptScheme))
        graph.add((scheme, DCTERMS.title, Literal(f"incidentlib {kind.value} vocabulary", lang="en")))
    for concept in data.vocab:
        _add_concept(graph, concept)
    for incident in data.incidents.values():
        _add_incident(graph, incident)
    return graph


def _add_text(graph: Graph, subject: URIRef, predicate: URIRef, text: Text | None) -> None:
    if text is None:
        return
    for lang in LANGS:
        value = getattr(text, lang)
        if value:
            graph.add((subject, predicate, Literal(value.strip(), lang=lang)))


def _add_concept(graph: Graph, concept: Concept) -> None:
    node = concept_uri(concept.id)
    scheme = scheme_uri(concept.kind.value)
    graph.add((node, RDF.type, SKOS.Concept))
    graph.add((node, SKOS.inScheme, scheme))
    graph.add((node, SKOS.notation, Literal(concept.id)))
    graph.add((node, IL.conceptKind, Literal(concept.kind.value)))
    _add_text(graph, node, SKOS.prefLabel, concept.label)
    for lang in LANGS:
        for alias in concept.alt.get(lang):
            graph.add((node, SKOS.altLabel, Literal(alias, lang=lang)))
    _add_text(graph, node, SKOS.definition, concept.definition)
    if concept.broader:
        parent = concept_uri(concept.broader)
        graph.add((node, SKOS.broader, parent))
        graph.add((parent, SKOS.narrower, node))
    else:
        graph.add((node, SKOS.topConceptOf, scheme))
    if concept.kind is ConceptKind.organization:
        graph.add((node, RDF.type, SDO.Organization))
        _add_text(graph, node, SDO.name, concept.label)
        if concept.url:
            graph.add((node, SDO.url, URIRef(str(concept.url))))


def _date_literal(value: str) -> Literal:
    datatype = {10: XSD.date, 7: XSD.gYearMonth, 4: XSD.gYear}[len(value)]
    return Literal(value, datatype=datatype)


def _add_incident(graph: Graph, incident: Incident) -> None:
    node = incident_uri(incident.id)
    graph.add((node, RDF.type, IL.Incident))
    graph.add((node, RDF.type, SDO.Event))
    graph.add((node, DCTERMS.identifier, Literal(incident.id)))
    if incident.date:
        graph.add((node, DCTERMS.date, _date_literal(incident.date)))
    if incident.is_draft:
        graph.add((node, IL.status, Literal(incident.status.value)))
    graph.add((node, IL.dateKind, Literal(incident.date_kind.value)))
    graph.add((node, IL.organization, concept_uri(incident.org)))
    if incident.severity:
        graph.add((node, IL.severity, Literal(incident.severity.value)))
    _add_text(graph, node, DCTERMS.title, incident.title)
    _add_text(graph, node, RDFS.label, incident.title)
    _add_text(graph, node, DCTERMS.abstract, incident.summary)
    _add_text(graph, node, IL.narrative, incident.body)
    _add_text(graph, node, IL.detection, incident.detection)
    _add_text(graph, node, IL.mitigation, incident.mitigation)
    for field, predicate in CONCEPT_PROPERTIES.items():
        for concept_id in getattr(incident, field):
            graph.add((node, predicate, concept_uri(concept_id)))
    for index, signal in enumerate(incident.signals, start=1):
        signal_node = ID[f"incident/{incident.id}/signal/{index}"]
        graph.add((node, IL.hasSignal, signal_node))
        graph.add((signal_node, RDF.type, IL.Signal))
        graph.add((signal_node, IL.text, Literal(signal.text)))
        _add_text(graph, signal_node, RDFS.comment, signal.note)
    for index, lesson in enumerate(incident.lessons, start=1):
        lesson_node = ID[f"incident/{incident.id}/lesson/{index}"]
        graph.add((node, IL.hasLesson, lesson_node))
        graph.add((lesson_node, RDF.type, IL.Lesson))
        _add_text(graph, lesson_node, RDFS.label, lesson)
    for source in incident.sources:
        _add_source(graph, node, source)
    for link in incident.related:
        link_node = ID[f"incident/{incident.id}/related/{link.id}"]
        graph.add((node, DCTERMS.relation, incident_uri(link.id)))
        graph.add((node, IL.curatedRelation, link_node))
        graph.add((link_node, RDF.type, IL.CuratedRelation))
        graph.add((link_node, IL.target, incident_uri(link.id)))
        _add_text(graph, link_node, IL.reason, link.reason)
    _add_inferred(graph, node, incident)


def _add_source(graph: Graph, node: URIRef, source: Source) -> None:
    source_node = URIRef(str(source.url))
    graph.add((node, DCTERMS.source, source_node))
    graph.add((source_node, RDF.type, IL.Source))
    graph.add((source_node, DCTERMS.title, Literal(source.title)))
    graph.add((source_node, IL.sourceKind, Literal(source.kind.value)))
    if source.publisher:
        graph.add((source_node, DCTERMS.publisher, Literal(source.publisher)))
    if source.published:
        graph.add((source_node, DCTERMS.issued, _date_literal(source.published)))


INFERRED_PROPERTIES: dict[str, URIRef] = {
    "component": IL.inferredComponent,
    "cause": IL.inferredCause,
    "symptom": IL.inferredSymptom,
}


def _add_inferred(graph: Graph, node: URIRef, incident: Incident) -> None:
    """Inferred links: a direct ``il:inferredX`` edge for proposed ones (never ``il:hasX``), and for
    every link a qualified ``il:ConceptInference`` node with method, confidence, evidence and status."""
    proposed = {link.concept for link in incident.proposed()}
    for index, link in enumerate(incident.inferred):
        if link.concept in proposed:
            graph.add((node, INFERRED_PROPERTIES[link.kind.value], concept_uri(link.concept)))
        inference = URIRef(f"{node}/inferred/{index}")
        graph.add((node, IL.inference, inference))
        graph.add((inference, RDF.type, IL.ConceptInference))
        graph.add((inference, IL.concept, concept_uri(link.concept)))
        graph.add((inference, IL.inferenceMethod, Literal(link.method.value)))
        graph.add((inference, IL.confidence, Literal(round(link.confidence, 4), datatype=XSD.decimal)))
        graph.add((inference, IL.evidence, Literal(link.evidence)))
        graph.add((inference, IL.inferenceStatus, Literal(link.status.value)))


Triple = tuple[Node, Node, Node]


@dataclass(frozen=True)
class GraphDelta:
    """The triples a change removes and adds; ``incidents`` counts the changed incidents."""

    removed: frozenset[Triple]
    added: frozenset[Triple]
    incidents: int

    def __len__(self) -> int:
        return len(self.removed) + len(self.added)


def incident_triples(incident: Incident) -> set[Triple]:
    """Every triple :func:`build_graph` writes for ``incident`` (source descriptions included)."""
    graph = Graph()
    _add_incident(graph, incident)
    return set(graph)


def graph_delta(before: LibraryData, after: LibraryData, changed: Iterable[str]) -> GraphDelta:
    """What turns ``build_graph(before)`` into ``build_graph(after)`` when only the ``changed`` incidents differ.

    ``removed = old − new − kept`` and ``added = new − old``, where old/new are the changed incidents'
    triples before/after and ``kept`` the descriptions of sources an unchanged incident still cites.
    """
    ids = set(changed)
    old: set[Triple] = set()
    new: set[Triple] = set()
    for incident_id in ids:
        if (previous := before.incidents.get(incident_id)) is not None:
            old |= incident_triples(previous)
        if (current := after.incidents.get(incident_id)) is not None:
            new |= incident_triples(current)
    dropped = old - new
    orphaned = {str(s) for s, _, _ in dropped if (s, RDF.type, IL.Source) in old}
    kept: set[Triple] = set()
    if orphaned:
        for incident in after.incidents.values():
            if incident.id in ids:
                continue
            for source in incident.sources:
                if str(source.url) in orphaned:
                    description = Graph()
                    _add_source(description, incident_uri(incident.id), source)
                    kept |= {t for t in description if str(t[0]) == str(source.url)}
    return GraphDelta(removed=frozenset(dropped - kept), added=frozenset(new - old), incidents=len(ids))


def delta_ntriples(triples: Iterable[Triple]) -> str:
    """``triples`` as N-Triples lines (also valid ground triples inside a SPARQL Update template)."""
    graph = Graph()
    for triple in triples:
        graph.add(triple)
    return graph.serialize(format="nt", encoding="utf-8").decode("utf-8")
