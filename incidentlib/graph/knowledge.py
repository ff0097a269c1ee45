"""Graph queries over the projection: related incidents, neighbourhoods, paths, topics.

Related-incident score
----------------------
Two incidents are related when they share at least one component or cause (or a
curator linked them).  Each shared concept ``c`` contributes

    w(c) = ln(1 + N / df(c))

where ``N`` is the number of incidents and ``df(c)`` the number of incidents that
name ``c``.  A concept only two incidents share weighs ``ln(1 + N/2)``; one that
every incident names weighs ``ln 2``.  A curated ``related`` link (in either
direction) adds ``ln(1 + N/2)``: it counts like one rare concept.  The score is
the sum, rounded to 4 places.

Curated links are listed first (a curator's judgement outranks a computed
overlap), then computed ones; within each group by score, ties by incident id.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from functools import cached_property

import networkx
import networkx as nx

from ..errors import InvalidRequest, UnknownNodeError
from ..loader import LibraryData
from ..models import ConceptKind, Incident
from ..requests import MAX_DEPTH
from ..views import (
    ConceptCount,
    ConceptRef,
    GraphLink,
    GraphNode,
    GraphPath,
    IncidentSummary,
    NodeLinkGraph,
    RelatedItem,
    TopicPage,
)
from .projection import build_projection, node_id, split_node

RELATING_KINDS: tuple[str, ...] = ("component", "cause")


class KnowledgeGraph:
    """Graph algorithms over one loaded library."""

    def __init__(self, data: LibraryData) -> None:
        self.data = data

    @cached_property
    def nx(self) -> nx.Graph:
        return build_projection(self.data)

    # ---- node references -------------------------------------------------
    def resolve_node(self, reference: str) -> str:
        """Accept ``IL-0025``, ``nccl``, ``component:nccl`` or a label such as ``InfiniBand``."""
        text = reference.strip()
        if text in self.nx:
            return text
        if text.upper() in self.data.incidents:
            return node_id("incident", text.upper())
        concept = self.data.vocab.resolve(text)
        if concept is not None:
            return node_id(concept.kind.value, concept.id)
        suggestions = self.data.vocab.suggest(text)
        raise UnknownNodeError(reference, suggestions)

    def node_view(self, node: str, lang: str) -> GraphNode:
        kind, key = split_node(node)
        label = self.data.incidents[key].title.get(lang) if kind == "incident" else self.data.vocab.label(key, lang)
        return GraphNode(id=node, type=kind, label=label)

    # ---- views -----------------------------------------------------------
    def concept_ref(self, concept_id: str, lang: str) -> ConceptRef:
        concept = self.data.vocab.get(concept_id)
        kind = concept.kind.value if concept else "unknown"
        return ConceptRef(id=concept_id, kind=kind, label=self.data.vocab.label(concept_id, lang))

    def summary(self, incident: Incident, lang: str) -> IncidentSummary:
        return IncidentSummary(
            id=incident.id,
            title=incident.title.get(lang),
            org=incident.org,
            org_label=self.data.vocab.label(incident.org, lang),
            date=incident.date,
            severity=incident.severity.value if incident.severity else None,
            status=incident.status.value,
            tags=list(incident.tags),
            components=list(incident.components),
        )

    # ---- related incidents -------------------------------------------------
    @cached_property
    def document_frequency(self) -> dict[str, int]:
        graph = self.nx
        return {
            node: sum(1 for other in graph[node] if other.startswith("incident:"))
            for node, attrs in graph.nodes(data=True)
            if attrs.get("type", "incident") != "incident"
        }

    def concept_weight(self, node: str) -> float:
        total = max(len(self.data.incidents), 1)
        df = max(self.document_frequency.get(node, 1), 1)
        return math.log(1 + total / df)

    def related(self, incident_id: str, lang: str = "en", limit: int | None = 10) -> list[RelatedItem]:
        """Incidents sharing components or causes with ``incident_id``, best first."""
        incident = self.data.incidents[incident_id]
        inode = node_id("incident", incident_id)
        shared: dict[str, list[str]] = {}
        for concept_node in self.nx[inode]:
            kind, _ = split_node(concept_node)
            if kind not in RELATING_KINDS:
                continue
            for other in self.nx[concept_node]:
                if other.startswith("incident:") and other != inode:
                    shared.setdefault(other, []).append(concept_node)
        curated = self._curated_reasons(incident, lang)
        for other_id in curated:
            shared.setdefault(node_id("incident", other_id), [])
        curated_bonus = math.log(1 + max(len(self.data.incidents), 2) / 2)

        items: list[RelatedItem] = []
        for other_node, concept_nodes in shared.items():
            other_id = split_node(other_node)[1]
            other = self.data.incidents[other_id]
            ordered = sorted(concept_nodes, key=lambda n: (RELATING_KINDS.index(split_node(n)[0]), -self.concept_weight(n), n))
            score = sum(self.concept_weight(n) for n in ordered)
            if other_id in curated:
                score += curated_bonus
            refs = [self.concept_ref(split_node(n)[1], lang) for n in ordered]
            items.append(
                RelatedItem(
                    id=other_id,
                    title=other.title.get(lang),
                    org=other.org,
                    date=other.date,
                    shared=[ref.label for ref in refs],
                    shared_concepts=refs,
                    score=round(score, 4),
                    curated_reason=curated.get(other_id),
                )
            )
        items.sort(key=lambda item: (item.curated_reason is None, -item.score, item.id))
        return items if limit is None else items[:limit]

    def _curated_reasons(self, incident: Incident, lang: str) -> dict[str, str]:
        reasons = {link.id: link.reason.get(lang) for link in incident.related}
        for other in self.data.incidents.values():
            for link in other.related:
                if link.id == incident.id and other.id not in reasons:
                    reasons[other.id] = link.reason.get(lang)
        return reasons

    # ---- neighbourhoods and paths -------------------------------------------
    def neighbors(self, reference: str, depth: int = 1, lang: str = "en") -> NodeLinkGraph:
        """Everything within ``depth`` hops of a node (depth is capped at 3)."""
        if depth < 1 or depth > MAX_DEPTH:
            raise InvalidRequest(f"depth must be between 1 and {MAX_DEPTH}, got {depth}")
        center = self.resolve_node(reference)
        sub = nx.ego_graph(self.nx, center, radius=depth)
        return self._node_link(sub, lang)

    def path(self, source: str, target: str, lang: str = "en", skip_kinds: tuple[str, ...] = ("tag",)) -> GraphPath | None:
        """The shortest path between two nodes, avoiding hub-like tag nodes by default."""
        start, end = self.resolve_node(source), self.resolve_node(target)
        allowed = [n for n, a in self.nx.nodes(data=True) if a["type"] not in skip_kinds or n in (start, end)]
        view = self.nx.subgraph(allowed)
        try:
            nodes = nx.shortest_path(view, start, end)
        except nx.NetworkXNoPath:
            return None
        node_views = [self.node_view(n, lang) for n in nodes]
        links = [GraphLink(source=a, target=b, type=self.nx.edges[a, b]["type"]) for a, b in itertools.pairwise(nodes)]
        concepts = [view_.label for view_ in node_views if view_.type != "incident"]
        return GraphPath(source=start, target=end, length=len(nodes) - 1, nodes=node_views, concepts=concepts, links=links)

    def _node_link(self, sub: networkx.Graph, lang: str) -> NodeLinkGraph:
        nodes = [self.node_view(n, lang) for n in sorted(sub.nodes)]
        links = [
            GraphLink(source=a, target=b, type=attrs["type"]) if a <= b else GraphLink(source=b, target=a, type=attrs["type"])
            for a, b, attrs in sub.edges(data=True)
        ]
        links.sort(key=lambda link: (link.source, link.target))
        return NodeLinkGraph(nodes=nodes, links=links)

    # ---- topic pages -------------------------------------------------------
    def topic(self, reference: str, lang: str = "en", limit: int = 15) -> TopicPage:
        """A concept's page: definition, incidents, co-occurring concepts, organizations."""
        node = self.resolve_node(reference)
        kind, concept_id = split_node(node)
        if kind == "incident":
            raise UnknownNodeError(reference, [])
        concept = self.data.vocab.get(concept_id)
        assert concept is not None
        family = {concept_id, *self.descendants(concept_id)}
        incidents = [
            incident
            for incident in self.data.incidents.values()
            if family & set(self._incident_concepts(incident, kind))
        ]
        co_counts: Counter[str] = Counter()
        org_counts: Counter[str] = Counter()
        for incident in incidents:
            org_counts[incident.org] += 1
            for other_kind in ("component", "cause", "symptom"):
                for other in self._incident_concepts(incident, other_kind):
                    if other not in family:
                        co_counts[other] += 1
        vocab = self.data.vocab
        return TopicPage(
            id=concept.id,
            kind=concept.kind.value,
            label=concept.label.get(lang),
            labels={"en": concept.label.en or "", "ko": concept.label.ko or ""},
            alt_labels=concept.alt.get(lang),
            definition=concept.definition.get(lang) if concept.definition else None,
            broader=[self.concept_ref(c, lang) for c in vocab.ancestors(concept.id)],
            narrower=[self.concept_ref(c, lang) for c in vocab.narrower(concept.id)],
            incidents=[self.summary(i, lang) for i in sorted(incidents, key=lambda i: (i.date or "", i.id), reverse=True)],
            co_occurring=[
                ConceptCount(id=c, kind=vocab.get(c).kind.value, label=vocab.label(c, lang), count=n)  # type: ignore[union-attr]
                for c, n in sorted(co_counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
            ],
            organizations=[
                ConceptCount(id=o, kind="organization", label=vocab.label(o, lang), count=n)
                for o, n in sorted(org_counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
            ],
        )

    def descendants(self, concept_id: str) -> set[str]:
        found: set[str] = set()
        stack = self.data.vocab.narrower(concept_id)
        while stack:
            current = stack.pop()
            if current not in found:
                found.add(current)
                stack.extend(self.data.vocab.narrower(current))
        return found

    @staticmethod
    def _incident_concepts(incident: Incident, kind: str) -> list[str]:
        if kind == ConceptKind.organization.value:
            return [incident.org]
        return incident.concept_ids()[kind]
