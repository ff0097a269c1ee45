"""Read-only SPARQL over the library graph."""

from __future__ import annotations

import json
from typing import Any
from typing import Literal as TypingLiteral

from pydantic import BaseModel
from pyparsing import ParseException
from rdflib import Graph
from rdflib.plugins.sparql import prepareQuery
from rdflib.plugins.sparql.parser import parseUpdate

from ..errors import ReadOnlyError, SparqlError
from .ontology import PREFIXES


class SparqlResult(BaseModel):
    """The outcome of a query: rows for SELECT, a boolean for ASK, a graph for CONSTRUCT/DESCRIBE."""

    type: TypingLiteral["SELECT", "ASK", "CONSTRUCT", "DESCRIBE"]
    variables: list[str] = []
    rows: list[dict[str, str | None]] = []
    boolean: bool | None = None
    turtle: str | None = None
    json_results: dict[str, Any] | None = None


_INIT_NS = dict(PREFIXES.items())


def run_sparql(graph: Graph, query: str) -> SparqlResult:
    """Run a SELECT, ASK, CONSTRUCT or DESCRIBE query; refuse updates with :class:`ReadOnlyError`."""
    if not query or not query.strip():
        raise SparqlError("empty query")
    try:
        prepared = prepareQuery(query, initNs=_INIT_NS)
    except ParseException as exc:
        if _is_update(query):
            raise ReadOnlyError(
                "SPARQL UPDATE is not allowed: the library graph is read-only "
                "(edit the YAML files under data/ instead)"
            ) from None
        raise SparqlError(f"SPARQL syntax error at line {exc.lineno}, column {exc.col}: {exc.msg}") from None
    except Exception as exc:  # noqa: BLE001 - rdflib raises plain Exception for unknown prefixes and the like
        raise SparqlError(f"cannot prepare query: {exc}") from None

    result = graph.query(prepared)
    if result.type == "SELECT":
        variables = [str(v) for v in result.vars or []]
        rows: list[dict[str, str | None]] = [
            {name: (None if value is None else str(value)) for name, value in zip(variables, row, strict=False)}  # type: ignore[arg-type]  # SELECT rows are ResultRow
            for row in result
        ]
        payload = json.loads(result.serialize(format="json") or b"{}")
        return SparqlResult(type="SELECT", variables=variables, rows=rows, json_results=payload)
    if result.type == "ASK":
        return SparqlResult(type="ASK", boolean=bool(result.askAnswer), json_results={"head": {}, "boolean": bool(result.askAnswer)})
    out = Graph()
    for prefix, namespace in PREFIXES.items():
        out.bind(prefix, namespace)
    for triple in result:
        out.add(triple)  # type: ignore[arg-type]  # CONSTRUCT/DESCRIBE results are triples
    kind: TypingLiteral["CONSTRUCT", "DESCRIBE"] = "DESCRIBE" if result.type == "DESCRIBE" else "CONSTRUCT"
    return SparqlResult(type=kind, turtle=out.serialize(format="turtle"))


def _is_update(query: str) -> bool:
    try:
        parseUpdate(query)
    except ParseException:  # not an update (a query, or a syntax error that parseQuery reports)
        return False
    return True
