"""The knowledge graph: RDF (rdflib) for standards and SPARQL, NetworkX for algorithms."""

from .export import ExportFormat
from .knowledge import KnowledgeGraph, UnknownNodeError
from .rdf import build_graph
from .sparql import ReadOnlyError, SparqlError, SparqlResult, run_sparql

__all__ = [
    "ExportFormat",
    "KnowledgeGraph",
    "ReadOnlyError",
    "SparqlError",
    "SparqlResult",
    "UnknownNodeError",
    "build_graph",
    "run_sparql",
]
