"""Related-incident score.

Two incidents are related when they share at least one component or cause (or a
curator linked them).  Each shared concept ``c`` contributes

    w(c) = ln(1 + N / df(c))

where ``N`` is the number of incidents and ``df(c)`` the number of incidents that
name ``c``.  A concept only two incidents share weighs ``ln(1 + N/2)``; one that
every incident names weighs ``ln 2``.  A curated ``related`` link (in either
direction) adds ``ln(1 + N/2)``: it counts like one rare concept.  An inferred
link (see :mod:`incidentlib.tagging`) counts with its confidence on each side, so a
shared concept contributes ``w(c) · conf_a(c) · conf_b(c)`` (1 for curated links).
The score is the sum, rounded to 4 places.

Curated links are listed first (a curator's judgement outranks a computed
overlap), then computed ones; within each group by score, ties by incident id.
"""

from __future__ import annotations

import math

import networkx as nx

from ..loader import LibraryData
from ..models import Incident
from ..views import RelatedItem
from .defaults import RELATING_KINDS as RELATING_KINDS
from .projection import node_id, split_node
from .refs import concept_ref

# Decimal places of a related score: enough to order every pair in the bundled library, few
# enough that the JSON stays readable and scores compare equal across platforms.
SCORE_DECIMALS = 4


def document_frequency(graph: nx.Graph) -> dict[str, int]:
    """``df(c)`` for every concept node: how many incidents link to it."""
    return {
        node: sum(1 for other in graph[node] if other.startswith("incident:"))
        for node, attrs in graph.nodes(data=True)
        if attrs.get("type", "incident") != "incident"
    }


def document_frequency_of(graph: nx.Graph, node: str) -> int | None:
    """``document_frequency(graph)[node]``, counted for one node (``None``: not a concept node of ``graph``)."""
    if node not in graph or graph.nodes[node].get("type", "incident") == "incident":
        return None
    return sum(1 for other in graph[node] if other.startswith("incident:"))


def concept_weight(frequencies: dict[str, int], incident_count: int, node: str) -> float:
    """``w(c) = ln(1 + N / df(c))``, with ``N`` and ``df`` at least 1."""
    total = max(incident_count, 1)
    df = max(frequencies.get(node, 1), 1)
    return math.log(1 + total / df)


def curated_reasons(data: LibraryData, graph: nx.Graph, incident: Incident, lang: str) -> dict[str, str]:
    """Incidents a curator linked to ``incident`` in either direction, with the reason in ``lang``: its own links
    first, then those of the incidents its ``curated`` edges lead to (only their records are read)."""
    reasons = {link.id: link.reason.get(lang) for link in incident.related}
    inode = node_id("incident", incident.id)
    linking = sorted(split_node(other)[1] for other, edge in graph[inode].items() if edge.get("type") == "curated")
    for other_id in linking:
        other = data.incidents.get(other_id)
        if other is None or other_id in reasons:
            continue
        for link in other.related:
            if link.id == incident.id:
                reasons[other_id] = link.reason.get(lang)
                break
    return reasons


def is_inferred(graph: nx.Graph, incident_node: str, concept_node: str) -> bool:
    """Whether the incident–concept link was inferred from the text rather than curated."""
    return bool(graph.edges[incident_node, concept_node].get("inferred", False))


def link_confidence(graph: nx.Graph, incident_node: str, concept_node: str) -> float:
    """The link's confidence: 1 for a curated link, the tagger's confidence for an inferred one."""
    return float(graph.edges[incident_node, concept_node].get("confidence", 1.0))


def related(data: LibraryData, graph: nx.Graph, frequencies: dict[str, int], incident_id: str,
            lang: str = "en", limit: int | None = 10) -> list[RelatedItem]:
    """Incidents sharing components or causes with ``incident_id``, best first (see the module docstring)."""
    incident = data.incidents[incident_id]
    inode = node_id("incident", incident_id)
    shared: dict[str, list[str]] = {}
    for concept_node in graph[inode]:
        kind, _ = split_node(concept_node)
        if kind not in RELATING_KINDS:
            continue
        for other in graph[concept_node]:
            if other.startswith("incident:") and other != inode:
                shared.setdefault(other, []).append(concept_node)
    curated = curated_reasons(data, graph, incident, lang)
    for other_id in curated:
        shared.setdefault(node_id("incident", other_id), [])
    curated_bonus = math.log(1 + max(len(data.incidents), 2) / 2)

    def weight(node: str) -> float:
        return concept_weight(frequencies, len(data.incidents), node)

    # scored from the graph alone; only the incidents shown are read (a common component is shared by thousands)
    scored: list[tuple[bool, float, str, str, list[str]]] = []
    for other_node, concept_nodes in shared.items():
        other_id = split_node(other_node)[1]
        ordered = sorted(concept_nodes, key=lambda n: (RELATING_KINDS.index(split_node(n)[0]), -weight(n), n))
        # an inferred link counts with its confidence (on either side); curated links count fully
        score = sum(weight(n) * link_confidence(graph, inode, n) * link_confidence(graph, other_node, n) for n in ordered)
        if other_id in curated:
            score += curated_bonus
        scored.append((curated.get(other_id) is None, -round(score, SCORE_DECIMALS), other_id, other_node, ordered))
    scored.sort(key=lambda entry: entry[:3])
    items: list[RelatedItem] = []
    for _, negated, other_id, other_node, ordered in scored if limit is None else scored[:limit]:
        other = data.incidents[other_id]
        refs = [concept_ref(data, split_node(n)[1], lang).model_copy(
            update={"inferred": is_inferred(graph, inode, n) or is_inferred(graph, other_node, n)}) for n in ordered]
        items.append(
            RelatedItem(
                id=other_id,
                title=other.title.get(lang),
                org=other.org,
                date=other.date,
                shared=[ref.label for ref in refs],
                shared_concepts=refs,
                score=-negated,
                curated_reason=curated.get(other_id),
            )
        )
    return items
