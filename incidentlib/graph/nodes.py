"""Node lookup: a user's reference (id, concept id, ``kind:id`` or label) to a projection node, and back to a view."""

from __future__ import annotations

import networkx as nx

from ..errors import UnknownNodeError
from ..loader import LibraryData
from ..views import GraphNode
from .projection import node_id, split_node


def resolve_node(data: LibraryData, graph: nx.Graph, reference: str) -> str:
    """Accept ``IL-0025``, ``nccl``, ``component:nccl`` or a label such as ``InfiniBand``.

    Tried in that order: a node id as given, an incident id (any case), a concept id or label
    (``Vocabulary.resolve``); otherwise ``UnknownNodeError`` with the vocabulary's suggestions.
    """
    text = reference.strip()
    if text in graph:
        return text
    if text.upper() in data.incidents:
        return node_id("incident", text.upper())
    concept = data.vocab.resolve(text)
    if concept is not None:
        return node_id(concept.kind.value, concept.id)
    raise UnknownNodeError(reference, data.vocab.suggest(text))


def node_view(data: LibraryData, node: str, lang: str) -> GraphNode:
    """A node with its label in ``lang``: an incident's title, a concept's preferred label."""
    kind, key = split_node(node)
    label = data.incidents[key].title.get(lang) if kind == "incident" else data.vocab.label(key, lang)
    return GraphNode(id=node, type=kind, label=label)
