"""Serialise the library: RDF formats, GraphML and JSON Lines."""

from __future__ import annotations

import io
import json
from enum import Enum
from typing import TYPE_CHECKING

from ..loader import LibraryData

if TYPE_CHECKING:
    import networkx as nx
    from rdflib import Graph


class ExportFormat(str, Enum):
    turtle = "ttl"
    jsonld = "jsonld"
    ntriples = "nt"
    graphml = "graphml"
    jsonl = "jsonl"


MEDIA_TYPES: dict[ExportFormat, str] = {
    ExportFormat.turtle: "text/turtle",
    ExportFormat.jsonld: "application/ld+json",
    ExportFormat.ntriples: "application/n-triples",
    ExportFormat.graphml: "application/graphml+xml",
    ExportFormat.jsonl: "application/x-ndjson",
}

_RDFLIB_FORMATS = {ExportFormat.turtle: "turtle", ExportFormat.jsonld: "json-ld", ExportFormat.ntriples: "nt"}


def export_rdf(graph: Graph, fmt: ExportFormat) -> str:
    if fmt not in _RDFLIB_FORMATS:
        raise ValueError(f"{fmt.value} is not an RDF format")
    if fmt is ExportFormat.ntriples:
        # N-Triples has no prefixes; sorting makes the output stable across runs.
        lines = graph.serialize(format="nt").splitlines()
        return "\n".join(sorted(line for line in lines if line.strip())) + "\n"
    return graph.serialize(format=_RDFLIB_FORMATS[fmt])


def export_graphml(projection: nx.Graph) -> str:
    import networkx as nx  # only GraphML needs it here; most commands never export

    buffer = io.BytesIO()
    nx.write_graphml(projection, buffer, encoding="utf-8")
    return buffer.getvalue().decode("utf-8")


def export_jsonl(data: LibraryData) -> str:
    """One incident per line, exactly as stored (unset optional fields omitted)."""
    return "".join(
        json.dumps(incident.model_dump(mode="json", exclude_none=True), ensure_ascii=False) + "\n"
        for incident in data.incidents.values()
    )
