"""Topic pages: a concept with its definition, incidents, co-occurring concepts and organizations."""

from __future__ import annotations

from collections import Counter

import networkx as nx

from ..errors import UnknownNodeError
from ..loader import LibraryData
from ..models import ConceptKind, Incident
from ..views import ConceptCount, TopicPage
from .defaults import TOPIC_LIST_LIMIT as TOPIC_LIST_LIMIT
from .descent import descendants
from .nodes import resolve_node
from .projection import split_node
from .refs import concept_ref, summary

# Kinds counted as "co-occurring" on a topic page (tags and organizations are listed elsewhere).
CO_OCCURRING_KINDS: tuple[str, ...] = ("component", "cause", "symptom")


def incident_concepts(incident: Incident, kind: str) -> list[str]:
    """The concept ids an incident names for ``kind`` (its one organization for ``organization``)."""
    if kind == ConceptKind.organization.value:
        return [incident.org]
    return incident.concept_ids()[kind]


def topic(data: LibraryData, graph: nx.Graph, reference: str, lang: str = "en", limit: int = TOPIC_LIST_LIMIT) -> TopicPage:
    """A concept's page.

    Its incidents are those naming the concept or any concept below it (newest first); co-occurring
    concepts and organizations are counted over those incidents, most frequent first, ties by id,
    at most ``limit`` of each.
    """
    node = resolve_node(data, graph, reference)
    kind, concept_id = split_node(node)
    if kind == "incident":
        raise UnknownNodeError(reference, [])
    concept = data.vocab.get(concept_id)
    assert concept is not None
    family = {concept_id, *descendants(data.vocab, concept_id)}
    incidents = [incident for incident in data.incidents.values() if family & set(incident_concepts(incident, kind))]
    co_counts: Counter[str] = Counter()
    org_counts: Counter[str] = Counter()
    for incident in incidents:
        org_counts[incident.org] += 1
        for other_kind in CO_OCCURRING_KINDS:
            for other in incident_concepts(incident, other_kind):
                if other not in family:
                    co_counts[other] += 1
    vocab = data.vocab
    return TopicPage(
        id=concept.id,
        kind=concept.kind.value,
        label=concept.label.get(lang),
        labels={"en": concept.label.en or "", "ko": concept.label.ko or ""},
        alt_labels=concept.alt.get(lang),
        definition=concept.definition.get(lang) if concept.definition else None,
        broader=[concept_ref(data, c, lang) for c in vocab.ancestors(concept.id)],
        narrower=[concept_ref(data, c, lang) for c in vocab.narrower(concept.id)],
        incidents=[summary(data, i, lang) for i in sorted(incidents, key=lambda i: (i.date or "", i.id), reverse=True)],
        co_occurring=[
            ConceptCount(id=c, kind=vocab.get(c).kind.value, label=vocab.label(c, lang), count=n)  # type: ignore[union-attr]
            for c, n in sorted(co_counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
        ],
        organizations=[
            ConceptCount(id=o, kind="organization", label=vocab.label(o, lang), count=n)
            for o, n in sorted(org_counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
        ],
    )
