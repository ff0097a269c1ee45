"""Geometry for the pictures the pages draw as inline SVG: a neighbourhood graph, a timeline, a map.

Layouts are computed on the server (NetworkX, fixed seed) so a page is the same for
everyone who opens its URL and needs no graph library in the browser; the browser only
pans and zooms the finished SVG.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import networkx as nx
from markupsafe import Markup, escape

from ..views import IncidentDetail

GRAPH_WIDTH, GRAPH_HEIGHT = 960, 620
# Margins keep the labels of nodes on the hull inside the picture: a label is centred on
# its node and up to ~34 characters (~220 px) wide, and sits 14 px above it.
GRAPH_MARGIN_X, GRAPH_MARGIN_Y = 120, 40
# A fixed seed makes the same incident always draw the same picture (shareable URLs).
LAYOUT_SEED = 7
# Related incidents drawn around the centre: more than ~8 turns the picture into a hairball.
GRAPH_RELATED = 8
TIMELINE_WIDTH, TIMELINE_ROW = 960, 22
# Highlighting only terms of at least two characters avoids marking every lone letter or digit.
MIN_HIGHLIGHT_CHARS = 2


@dataclass(frozen=True)
class Node:
    id: str
    kind: str  # incident, component, cause, symptom, organization
    label: str
    href: str
    x: float
    y: float
    center: bool = False


@dataclass(frozen=True)
class Edge:
    x1: float
    y1: float
    x2: float
    y2: float


@dataclass(frozen=True)
class Figure:
    nodes: list[Node]
    edges: list[Edge]
    width: int
    height: int


def _scale(positions: dict[str, tuple[float, float]], width: int, height: int, margin_x: int,
           margin_y: int) -> dict[str, tuple[float, float]]:
    xs = [p[0] for p in positions.values()]
    ys = [p[1] for p in positions.values()]
    span_x = (max(xs) - min(xs)) or 1.0
    span_y = (max(ys) - min(ys)) or 1.0
    return {
        key: (round(margin_x + (x - min(xs)) / span_x * (width - 2 * margin_x), 1),
              round(margin_y + (y - min(ys)) / span_y * (height - 2 * margin_y), 1))
        for key, (x, y) in positions.items()
    }


def neighbourhood(detail: IncidentDetail, incident_href: str, topic_href: str) -> Figure:
    """The incident, its concepts, and its related incidents linked through the concepts they share.

    ``incident_href`` and ``topic_href`` are format strings with ``{id}``.
    """
    graph: nx.Graph = nx.Graph()
    center = f"incident:{detail.id}"
    graph.add_node(center, kind="incident", label=f"{detail.id} {detail.title}", ref=detail.id)
    concepts = [*detail.components, *detail.causes, *detail.symptoms, detail.org]
    for ref in concepts:
        key = f"{ref.kind}:{ref.id}"
        graph.add_node(key, kind=ref.kind, label=ref.label, ref=ref.id)
        graph.add_edge(center, key)
    for item in detail.related[:GRAPH_RELATED]:
        key = f"incident:{item.id}"
        graph.add_node(key, kind="incident", label=f"{item.id} {item.title}", ref=item.id)
        shared = [f"{ref.kind}:{ref.id}" for ref in item.shared_concepts if f"{ref.kind}:{ref.id}" in graph]
        for other in shared or [center]:
            graph.add_edge(key, other)
    raw = nx.spring_layout(graph, seed=LAYOUT_SEED, k=1.6 / max(1, graph.number_of_nodes()) ** 0.5)
    positions = _scale({n: (float(p[0]), float(p[1])) for n, p in raw.items()}, GRAPH_WIDTH, GRAPH_HEIGHT, GRAPH_MARGIN_X,
                       GRAPH_MARGIN_Y)
    nodes = []
    for key, attrs in graph.nodes(data=True):
        href = incident_href if attrs["kind"] == "incident" else topic_href
        x, y = positions[key]
        nodes.append(Node(id=key, kind=attrs["kind"], label=attrs["label"], href=href.format(id=attrs["ref"]),
                          x=x, y=y, center=key == center))
    edges = [Edge(*positions[a], *positions[b]) for a, b in graph.edges]
    return Figure(nodes=nodes, edges=edges, width=GRAPH_WIDTH, height=GRAPH_HEIGHT)


@dataclass(frozen=True)
class TimelinePoint:
    id: str
    title: str
    date: str
    href: str
    x: float
    y: float


@dataclass(frozen=True)
class Timeline:
    points: list[TimelinePoint]
    years: list[tuple[int, float]]
    width: int
    height: int


def _decimal_year(date: str) -> float:
    parts = [int(p) for p in date.split("-")]
    year = parts[0]
    month = parts[1] if len(parts) > 1 else 7  # a bare year sits mid-year
    day = parts[2] if len(parts) > 2 else 15
    return year + (month - 1) / 12 + (day - 1) / 365


def timeline(items: list[tuple[str, str, str | None]], incident_href: str) -> Timeline | None:
    """Dated incidents (id, title, date) on one axis; rows stack incidents that would overlap."""
    dated = sorted(((i, t, d) for i, t, d in items if d), key=lambda item: item[2] or "")
    if not dated:
        return None
    values = [_decimal_year(d) for _, _, d in dated]
    first, last = int(min(values)), int(max(values)) + 1
    margin = 30
    span = (last - first) or 1
    def x_of(value: float) -> float:
        return round(margin + (value - first) / span * (TIMELINE_WIDTH - 2 * margin), 1)
    rows_end: list[float] = []
    points = []
    for (incident_id, title, date), value in zip(dated, values, strict=True):
        x = x_of(value)
        row = next((r for r, end in enumerate(rows_end) if end < x - 12), None)
        if row is None:
            row = len(rows_end)
            rows_end.append(x)
        rows_end[row] = x
        points.append(TimelinePoint(id=incident_id, title=title, date=date or "", href=incident_href.format(id=incident_id),
                                    x=x, y=40 + row * TIMELINE_ROW))
    height = 60 + len(rows_end) * TIMELINE_ROW
    return Timeline(points=points, years=[(y, x_of(y)) for y in range(first, last + 1)], width=TIMELINE_WIDTH, height=height)


def highlight(text: str, terms: list[str]) -> Markup:
    """``text`` escaped, with every occurrence of a matched term wrapped in ``<mark>``.

    Terms are index tokens (lower-case stems), so matching is case-insensitive and also
    marks the term inside a longer word (타임아웃 in 타임아웃이).
    """
    wanted = sorted({t for t in terms if len(t) >= MIN_HIGHLIGHT_CHARS}, key=len, reverse=True)
    if not wanted:
        return escape(text)
    pattern = re.compile("|".join(re.escape(t) for t in wanted), re.IGNORECASE)
    out: list[str] = []
    last = 0
    for match in pattern.finditer(text):
        out.append(str(escape(text[last:match.start()])))
        out.append(f"<mark>{escape(match.group(0))}</mark>")
        last = match.end()
    out.append(str(escape(text[last:])))
    return Markup("".join(out))
