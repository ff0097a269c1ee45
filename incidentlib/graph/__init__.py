"""The knowledge graph: RDF (rdflib) for standards and SPARQL, NetworkX for algorithms."""

from ..errors import ReadOnlyError, SparqlError, UnknownNodeError
from .export import ExportFormat
from .knowledge import KnowledgeGraph
from .rdf import build_graph
from .sparql import SparqlResult, run_sparql

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
