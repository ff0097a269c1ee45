"""Geometry for the pictures the pages draw as inline SVG: a neighbourhood graph, a timeline, a map.

Layouts are computed on the server (NetworkX, fixed seed) so a page is the same for
everyone who opens its URL and needs no graph library in the browser; the browser only
pans and zooms the finished SVG.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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
    import networkx as nx  # here: importing it with the web pages was 0.23 s of a server's start

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


PLOT_WIDTH, PLOT_HEIGHT = 960, 300
PLOT_MARGIN_LEFT, PLOT_MARGIN_BOTTOM, PLOT_MARGIN_TOP = 48, 28, 12
# The y axis shows at least up to 110 % of expected, so a healthy run sits visibly below the top.
PLOT_MIN_TOP = 1.1


@dataclass(frozen=True)
class Plot:
    polyline: str
    width: int
    height: int
    expected_y: float
    level_y: float | None
    y_ticks: list[tuple[str, float]]
    x_ticks: list[tuple[str, float]]
    dips: list[float]
    restarts: list[float]
    bottom: float


def series_plot(points: list[tuple[float, float]], dips: list[float], restarts: list[float],
                level: float | None) -> Plot | None:
    """An MFU curve (fraction of expected) as SVG coordinates, with the expected level, the median level,
    the dip buckets and the restarts marked."""
    if len(points) < 2:
        return None
    t0, t1 = points[0][0], points[-1][0]
    span = (t1 - t0) or 1.0
    top = max(PLOT_MIN_TOP, max(v for _, v in points) * 1.05)
    inner_w = PLOT_WIDTH - PLOT_MARGIN_LEFT - 10
    inner_h = PLOT_HEIGHT - PLOT_MARGIN_BOTTOM - PLOT_MARGIN_TOP
    bottom = PLOT_MARGIN_TOP + inner_h

    def x_of(t: float) -> float:
        return round(PLOT_MARGIN_LEFT + (t - t0) / span * inner_w, 1)

    def y_of(v: float) -> float:
        return round(bottom - max(0.0, v) / top * inner_h, 1)

    unit, scale = ("h", 3600.0) if span >= 7200 else ("min", 60.0) if span >= 120 else ("s", 1.0)
    x_ticks = [(f"{(span * i / 5) / scale:.0f} {unit}", x_of(t0 + span * i / 5)) for i in range(6)]
    y_ticks = [(f"{round(f * 100)}%", y_of(f)) for f in (0.0, 0.25, 0.5, 0.75, 1.0)]
    return Plot(
        polyline=" ".join(f"{x_of(t)},{y_of(v)}" for t, v in points), width=PLOT_WIDTH, height=PLOT_HEIGHT,
        expected_y=y_of(1.0), level_y=y_of(level) if level is not None else None, y_ticks=y_ticks, x_ticks=x_ticks,
        dips=[x_of(t) for t in dips if t0 <= t <= t1], restarts=[x_of(t) for t in restarts if t0 <= t <= t1], bottom=bottom,
    )
