"""The knowledge graph: RDF (rdflib) for standards and SPARQL, NetworkX for algorithms.

The names below load their module on first use (PEP 562): importing a light submodule such as
``graph.store`` or ``graph.knowledge`` must not pull in rdflib's SPARQL parser or NetworkX, which
take most of a short command's start (a search needs neither).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from ..errors import ReadOnlyError, SparqlError, UnknownNodeError

if TYPE_CHECKING:
    from .export import ExportFormat
    from .knowledge import KnowledgeGraph
    from .rdf import build_graph
    from .sparql import SparqlResult, run_sparql

#: Public name -> the submodule that defines it.
_LAZY = {
    "ExportFormat": ".export",
    "KnowledgeGraph": ".knowledge",
    "build_graph": ".rdf",
    "SparqlResult": ".sparql",
    "run_sparql": ".sparql",
}

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


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value
