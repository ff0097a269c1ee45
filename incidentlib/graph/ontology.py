"""The small ontology incidentlib adds on top of SKOS, schema.org and DCTERMS.

Standard vocabularies carry what they can: SKOS for the controlled vocabulary,
DCTERMS for identifiers, titles, dates, subjects and sources, schema.org for
organizations.  The terms below cover what those do not (has-component,
has-cause, has-symptom, signals, curated relations with a reason).  Each term is
declared with a label and a comment, so the ontology documents itself in every
export; ``docs/graph.md`` renders the same table.
"""

from __future__ import annotations

from dataclasses import dataclass

from rdflib import OWL, RDF, RDFS, Graph, Literal, Namespace, URIRef
from rdflib.namespace import DCTERMS, SDO, SKOS, XSD, DefinedNamespace

IL = Namespace("https://w3id.org/incidentlib/ontology#")
ID = Namespace("https://w3id.org/incidentlib/id/")

PREFIXES: dict[str, Namespace | type[DefinedNamespace]] = {
    "il": IL,
    "ilid": ID,
    "skos": SKOS,
    "dcterms": DCTERMS,
    "schema": SDO,
    "xsd": XSD,
}


@dataclass(frozen=True)
class Term:
    uri: URIRef
    kind: URIRef  # owl:Class, owl:ObjectProperty or owl:DatatypeProperty
    label: str
    comment: str
    domain: URIRef | None = None
    range: URIRef | None = None


TERMS: list[Term] = [
    Term(IL.Incident, OWL.Class, "Incident", "A publicly documented infrastructure incident or failure study."),
    Term(IL.Signal, OWL.Class, "Signal", "A verbatim error string or log line that appeared in the incident."),
    Term(IL.Lesson, OWL.Class, "Lesson", "A lesson drawn from the incident, in one or both languages."),
    Term(IL.CuratedRelation, OWL.Class, "Curated relation", "A hand-made link from one incident to another, with its reason."),
    Term(IL.Source, OWL.Class, "Source", "A public document the incident's facts come from."),
    Term(IL.ConceptInference, OWL.Class, "Concept inference", "A component, cause or symptom recognised in an incident's text, not asserted by a curator; a qualified relation with its provenance (evidence, method, confidence)."),
    Term(IL.inferredComponent, OWL.ObjectProperty, "inferred component", "A component recognised in the text, not curated (see il:inference for its provenance).", IL.Incident, SKOS.Concept),
    Term(IL.inferredCause, OWL.ObjectProperty, "inferred cause", "A cause recognised in the text, not curated.", IL.Incident, SKOS.Concept),
    Term(IL.inferredSymptom, OWL.ObjectProperty, "inferred symptom", "A symptom recognised in the text, not curated.", IL.Incident, SKOS.Concept),
    Term(IL.inference, OWL.ObjectProperty, "inference", "The qualified form of an inferred link, with its provenance.", IL.Incident, IL.ConceptInference),
    Term(IL.concept, OWL.ObjectProperty, "concept", "The concept an inference proposes.", IL.ConceptInference, SKOS.Concept),
    Term(IL.inferenceMethod, OWL.DatatypeProperty, "inference method", "'alias' (a name written in the text), 'loose-alias' (a name written with a word inside it), 'signal' (an error message the signal table maps to the concept) or 'classifier' (a model learnt from curated links).", IL.ConceptInference, XSD.string),
    Term(IL.confidence, OWL.DatatypeProperty, "confidence", "Confidence of an inference, 0 to 1.", IL.ConceptInference, XSD.decimal),
    Term(IL.evidence, OWL.DatatypeProperty, "evidence", "The words of the incident's text that support an inference.", IL.ConceptInference, XSD.string),
    Term(IL.inferenceStatus, OWL.DatatypeProperty, "inference status", "'proposed' or 'rejected' (by a reviewer; rejected links are kept so they are not proposed again).", IL.ConceptInference, XSD.string),
    Term(IL.organization, OWL.ObjectProperty, "organization", "The organization whose system failed or that published the study.", IL.Incident, SDO.Organization),
    Term(IL.hasComponent, OWL.ObjectProperty, "has component", "A system component the incident involved.", IL.Incident, SKOS.Concept),
    Term(IL.hasCause, OWL.ObjectProperty, "has cause", "A cause or contributing cause of the incident.", IL.Incident, SKOS.Concept),
    Term(IL.hasSymptom, OWL.ObjectProperty, "has symptom", "Something operators or users observed.", IL.Incident, SKOS.Concept),
    Term(IL.hasSignal, OWL.ObjectProperty, "has signal", "A verbatim error string or log line of the incident.", IL.Incident, IL.Signal),
    Term(IL.hasLesson, OWL.ObjectProperty, "has lesson", "A lesson drawn from the incident.", IL.Incident, IL.Lesson),
    Term(IL.curatedRelation, OWL.ObjectProperty, "curated relation", "A hand-made relation to another incident.", IL.Incident, IL.CuratedRelation),
    Term(IL.target, OWL.ObjectProperty, "target", "The incident a curated relation points to.", IL.CuratedRelation, IL.Incident),
    Term(IL.reason, OWL.DatatypeProperty, "reason", "Why two incidents are related (language-tagged).", IL.CuratedRelation, RDF.langString),
    Term(IL.narrative, OWL.DatatypeProperty, "narrative", "The long narrative of the incident (language-tagged).", IL.Incident, RDF.langString),
    Term(IL.detection, OWL.DatatypeProperty, "detection", "How the problem was noticed (language-tagged).", IL.Incident, RDF.langString),
    Term(IL.mitigation, OWL.DatatypeProperty, "mitigation", "What was done to stop or repair it (language-tagged).", IL.Incident, RDF.langString),
    Term(IL.severity, OWL.DatatypeProperty, "severity", "sev1 (worst) to sev4, when the source makes it clear.", IL.Incident, XSD.string),
    Term(IL.status, OWL.DatatypeProperty, "status", "'draft' for imported records awaiting review (absent when published).", IL.Incident, XSD.string),
    Term(IL.dateKind, OWL.DatatypeProperty, "date kind", "Whether dcterms:date is when it occurred or when it was published.", IL.Incident, XSD.string),
    Term(IL.sourceKind, OWL.DatatypeProperty, "source kind", "postmortem, paper, status-page, blog, …", IL.Source, XSD.string),
    Term(IL.text, OWL.DatatypeProperty, "text", "The verbatim text of a signal.", IL.Signal, XSD.string),
    Term(IL.conceptKind, OWL.DatatypeProperty, "concept kind", "component, cause, symptom, tag or organization.", SKOS.Concept, XSD.string),
]


def ontology_graph() -> Graph:
    """The ontology's own declarations as RDF."""
    graph = Graph()
    bind_prefixes(graph)
    for term in TERMS:
        graph.add((term.uri, RDF.type, term.kind))
        graph.add((term.uri, RDFS.label, Literal(term.label, lang="en")))
        graph.add((term.uri, RDFS.comment, Literal(term.comment, lang="en")))
        graph.add((term.uri, RDFS.isDefinedBy, URIRef(str(IL).rstrip("#"))))
        if term.domain is not None:
            graph.add((term.uri, RDFS.domain, term.domain))
        if term.range is not None:
            graph.add((term.uri, RDFS.range, term.range))
    return graph


def bind_prefixes(graph: Graph) -> None:
    for prefix, namespace in PREFIXES.items():
        graph.bind(prefix, namespace, override=True)


def incident_uri(incident_id: str) -> URIRef:
    return ID[f"incident/{incident_id}"]


def concept_uri(concept_id: str) -> URIRef:
    return ID[f"concept/{concept_id}"]


def scheme_uri(kind: str) -> URIRef:
    return ID[f"scheme/{kind}"]
