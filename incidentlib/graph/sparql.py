"""Read-only SPARQL over the library graph.

Nothing a query says can make this process dereference a URL: ``SERVICE``
(federation) and ``FROM``/``FROM NAMED`` (remote datasets) are refused in the
parsed algebra before evaluation, with one message whatever the target, and
rdflib's own SERVICE evaluation and graph loading are switched off as a second
line, so even a query that slipped past the check could not reach the network.
``LOAD`` is an update and is refused with every other update.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

import rdflib.plugins.sparql as rdflib_sparql
import rdflib.plugins.sparql.evaluate as rdflib_evaluate
from pyparsing import ParseException
from rdflib import Graph
from rdflib.plugins.sparql import prepareQuery
from rdflib.plugins.sparql.parser import parseUpdate
from rdflib.plugins.sparql.parserutils import CompValue
from rdflib.plugins.sparql.sparql import Query

from ..errors import ReadOnlyError, RemoteAccessError, SparqlError
from ..views import SparqlResult as SparqlResult  # defined with the other response shapes; re-exported
from .ontology import PREFIXES
from .store import GRAPH_KINDS, GraphStore, QueryKind, StoreAnswer

REMOTE_REFUSED = (
    "SERVICE and FROM/FROM NAMED are disabled: queries run only over the library graph "
    "and never fetch remote data"
)

# Second line of defence: rdflib must not load FROM graphs from the web, nor evaluate SERVICE.
rdflib_sparql.SPARQL_LOAD_GRAPHS = False


def _refuse_service(ctx: Any, part: CompValue) -> Any:
    """rdflib custom-eval hook: every SERVICE pattern fails before rdflib's HTTP client is reached."""
    if part.name == "ServiceGraphPattern":
        raise RemoteAccessError(REMOTE_REFUSED)
    raise NotImplementedError  # any other part: rdflib's normal evaluation


def _no_service_query(ctx: Any, part: CompValue) -> Any:
    raise RemoteAccessError(REMOTE_REFUSED)


rdflib_sparql.CUSTOM_EVALS["incidentlib-no-service"] = _refuse_service
rdflib_evaluate.evalServiceQuery = _no_service_query


def _walk(node: Any) -> Iterator[CompValue]:
    if isinstance(node, CompValue):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list | tuple):
        for item in node:
            yield from _walk(item)


def remote_parts(algebra: CompValue) -> list[str]:
    """Names of the parts of a parsed query that would fetch remote data (SERVICE, FROM, FROM NAMED)."""
    found: list[str] = []
    for part in _walk(algebra):
        if part.name == "ServiceGraphPattern":
            found.append("SERVICE")
        if dict.get(part, "datasetClause"):  # CompValue.get returns the key itself when absent
            found.append("FROM")
    return found


_INIT_NS = dict(PREFIXES.items())
# Parsed queries kept: the guard parses a query and the in-process store evaluates that same parse;
# a few dozen also cover the web app's and agents' repeated queries, at a few kB each.
PREPARED_CACHE_SIZE = 64


@lru_cache(maxsize=PREPARED_CACHE_SIZE)
def prepare(query: str) -> Query:
    """rdflib's parse of ``query`` with the library's prefixes (cached: rdflib evaluates a parsed query any number of times)."""
    return prepareQuery(query, initNs=_INIT_NS)
_KINDS: dict[str, QueryKind] = {
    "SelectQuery": "SELECT", "AskQuery": "ASK", "ConstructQuery": "CONSTRUCT", "DescribeQuery": "DESCRIBE",
}


def check_query(query: str) -> QueryKind:
    """The query's form after the guards every store shares: parsed by rdflib, updates refused with
    :class:`ReadOnlyError`, SERVICE and FROM refused with :class:`RemoteAccessError`."""
    if not query or not query.strip():
        raise SparqlError("empty query")
    try:
        prepared = prepare(query)
    except ParseException as exc:
        if _is_update(query):
            raise ReadOnlyError(
                "SPARQL UPDATE is not allowed: the library graph is read-only "
                "(edit the YAML files under data/ instead)"
            ) from None
        raise SparqlError(f"SPARQL syntax error at line {exc.lineno}, column {exc.col}: {exc.msg}") from None
    except Exception as exc:  # noqa: BLE001 - rdflib raises plain Exception for unknown prefixes and the like
        raise SparqlError(f"cannot prepare query: {exc}") from None
    if remote_parts(prepared.algebra):
        raise RemoteAccessError(REMOTE_REFUSED)
    return _KINDS[prepared.algebra.name]


def run_sparql(store: GraphStore | Graph, query: str, timeout: float | None = None) -> SparqlResult:
    """Run a SELECT, ASK, CONSTRUCT or DESCRIBE query on any graph store (an rdflib graph is wrapped
    in the in-process store); every store answers in the same wire formats, read here the same way."""
    kind = check_query(query)
    if isinstance(store, Graph):
        from .store_memory import MemoryStore

        store = MemoryStore(store)
    return read_answer(store.query(query, kind, timeout))


def read_answer(answer: StoreAnswer) -> SparqlResult:
    """A store's answer as a :class:`SparqlResult`: rows keep each term's lexical value (None when unbound);
    a graph comes back as Turtle with the library's prefixes."""
    if answer.kind in GRAPH_KINDS:
        out = Graph()
        for prefix, namespace in PREFIXES.items():
            out.bind(prefix, namespace)
        out.parse(data=answer.body, format="nt")
        return SparqlResult(type=answer.kind, turtle=out.serialize(format="turtle"))
    payload = json.loads(answer.body or b"{}")
    if answer.kind == "ASK":
        boolean = bool(payload.get("boolean"))
        return SparqlResult(type="ASK", boolean=boolean, json_results={"head": {}, "boolean": boolean})
    variables = [str(v) for v in payload.get("head", {}).get("vars", [])]
    rows: list[dict[str, str | None]] = [
        {name: (binding[name]["value"] if name in binding else None) for name in variables}
        for binding in payload.get("results", {}).get("bindings", [])
    ]
    return SparqlResult(type="SELECT", variables=variables, rows=rows, json_results=payload)


def _is_update(query: str) -> bool:
    try:
        parseUpdate(query)
    except ParseException:  # not an update (a query, or a syntax error that parseQuery reports)
        return False
    return True
