"""Neighbourhoods and shortest paths in the projection."""

from __future__ import annotations

import itertools

import networkx as nx

from ..errors import InvalidRequest
from ..loader import LibraryData
from ..requests import MAX_DEPTH
from ..views import GraphLink, GraphPath, NodeLinkGraph
from .defaults import HUB_KINDS as HUB_KINDS
from .nodes import node_view, resolve_node


def neighbors(data: LibraryData, graph: nx.Graph, reference: str, depth: int = 1, lang: str = "en") -> NodeLinkGraph:
    """Everything within ``depth`` hops of a node (1 <= depth <= ``MAX_DEPTH``)."""
    if depth < 1 or depth > MAX_DEPTH:
        raise InvalidRequest(f"depth must be between 1 and {MAX_DEPTH}, got {depth}")
    center = resolve_node(data, graph, reference)
    return node_link(data, nx.ego_graph(graph, center, radius=depth), lang)


def path(data: LibraryData, graph: nx.Graph, source: str, target: str, lang: str = "en",
         skip_kinds: tuple[str, ...] = HUB_KINDS) -> GraphPath | None:
    """The shortest path between two nodes, avoiding hub-like tag nodes by default; None if there is none."""
    start, end = resolve_node(data, graph, source), resolve_node(data, graph, target)
    allowed = [n for n, a in graph.nodes(data=True) if a["type"] not in skip_kinds or n in (start, end)]
    view = graph.subgraph(allowed)
    try:
        nodes = nx.shortest_path(view, start, end)
    except nx.NetworkXNoPath:
        return None
    node_views = [node_view(data, n, lang) for n in nodes]
    links = [GraphLink(source=a, target=b, type=graph.edges[a, b]["type"]) for a, b in itertools.pairwise(nodes)]
    concepts = [view_.label for view_ in node_views if view_.type != "incident"]
    return GraphPath(source=start, target=end, length=len(nodes) - 1, nodes=node_views, concepts=concepts, links=links)


def node_link(data: LibraryData, sub: nx.Graph, lang: str) -> NodeLinkGraph:
    """Nodes sorted by id; each link once, its ends in id order, links sorted."""
    nodes = [node_view(data, n, lang) for n in sorted(sub.nodes)]
    links = [
        GraphLink(source=a, target=b, type=attrs["type"]) if a <= b else GraphLink(source=b, target=a, type=attrs["type"])
        for a, b, attrs in sub.edges(data=True)
    ]
    links.sort(key=lambda link: (link.source, link.target))
    return NodeLinkGraph(nodes=nodes, links=links)
