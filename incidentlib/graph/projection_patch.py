"""The projection after a live write, made from the one before it and the changed incidents only.

A write adds, replaces or removes a few incidents; making the projection again took 6-8 s at 100k incidents from the
records, and 47 s read from an Oxigraph store with five SELECTs (docs/benchmarks.md).  :func:`patched_projection` makes the new projection from the old one by
copy on write: the new graph has its own outer node and adjacency dictionaries (copies of the old ones' entries,
which are shared), and its own copy of the adjacency of every node a changed incident was or is now linked to.  The
old projection is left exactly as it was, so a request still reading it is never disturbed, and the cost is one copy
of the two outer dictionaries plus the degrees of the touched nodes, instead of a pass over every record.

The result has the nodes, edges and attributes :func:`~.projection.build_projection` gives for the new data
(``tests/test_projection_patch.py`` compares them); only the insertion order of the changed incidents' nodes and
edges can differ from a build (a new incident's node comes last), which decides nothing but ties that NetworkX
breaks by insertion order.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from ..loader import LibraryData
from .projection import EdgeKinds, Projection, link_incident, node_id, split_node


def patched_projection(graph: Projection, previous: LibraryData, data: LibraryData, changed: Collection[str]) -> Projection:
    """The projection of ``data``, from ``graph`` (the projection of ``previous``) and the records of ``changed``:
    ``data`` is ``previous`` with only the incidents ``changed`` names added, replaced or removed, and the same
    vocabulary."""
    if data.vocab is not previous.vocab and list(data.vocab) != list(previous.vocab):
        raise ValueError("the projection cannot be patched: the vocabulary changed")
    new = _CopyOnWrite(graph)
    adjacency = new._adj  # the graph's own storage, which this module patches
    changed_nodes = {node_id("incident", incident_id) for incident_id in changed}
    curated: list[tuple[str, str]] = []
    touched: set[str] = set()
    for inode in sorted(changed_nodes):
        if inode not in adjacency:
            continue
        for other, attributes in list(adjacency[inode].items()):
            touched.add(other)
            if attributes.get("type") == "curated" and other not in changed_nodes and _names(data, other, inode):
                curated.append((other, inode))  # the unchanged incident's own related list still names it
            new.unlink(inode, other)
        new.drop(inode)
    kinds = EdgeKinds()
    for incident_id in sorted(changed):
        incident = data.incidents.get(incident_id)
        if incident is not None:
            curated.extend(link_incident(new, kinds, incident))
    for a, b in curated:
        new.link(a, b, kinds.of("curated"))
    vocabulary = {node_id(concept.kind.value, concept.id) for concept in data.vocab}
    for node in touched:  # a node no build would make: not in the vocabulary and no edge left
        if node in adjacency and not adjacency[node] and node not in vocabulary:
            new.drop(node)
    return new.result()


def _names(data: LibraryData, inode: str, other: str) -> bool:
    """Whether the incident of node ``inode`` lists the incident of node ``other`` among its related ones."""
    incident = data.incidents.get(split_node(inode)[1])
    return incident is not None and any(link.id == split_node(other)[1] for link in incident.related)


class _CopyOnWrite(Projection):
    """A projection sharing ``base``'s per-node dictionaries until one is changed through it: :meth:`link`,
    :meth:`unlink` and :meth:`drop` give a node its own adjacency first.  Nodes are added by ``add_node`` only when
    they are new (a changed incident's node is dropped first), which makes their dictionaries afresh."""

    def __init__(self, base: Projection) -> None:
        super().__init__()
        self.graph.update(base.graph)
        self._node = dict(base._node)
        self._adj = dict(base._adj)
        self._own: set[str] = set()

    def _owned(self, node: str) -> dict[str, Any]:
        adjacency: dict[str, dict[str, Any]] = self._adj
        if node not in self._own:
            adjacency[node] = dict(adjacency[node])
            self._own.add(node)
        return adjacency[node]

    def link(self, u: str, v: str, attributes: Mapping[str, Any]) -> None:
        for node in (u, v):
            if node in self._adj:
                self._owned(node)
            else:
                self._own.add(node)  # made afresh by Projection.link
        super().link(u, v, attributes)

    def unlink(self, u: str, v: str) -> None:
        del self._owned(u)[v]
        if u != v:
            del self._owned(v)[u]

    def drop(self, node: str) -> None:
        """Remove a node that has no edge left."""
        del self._adj[node]
        del self._node[node]
        self._own.discard(node)

    def result(self) -> Projection:
        """A plain :class:`Projection` over the patched dictionaries."""
        graph = Projection()
        graph.graph.update(self.graph)
        graph._node, graph._adj = self._node, self._adj
        return graph.finish()


def patched_frequencies(frequencies: Mapping[str, int], before: Projection, after: Projection,
                        changed: Collection[str]) -> dict[str, int]:
    """``scoring.document_frequency(after)`` from ``frequencies`` (that of ``before``): only the nodes a changed
    incident was or is now linked to are counted again, from ``after``, each in the time of its degree."""
    from .scoring import document_frequency_of

    result = dict(frequencies)
    touched: set[str] = set()
    for incident_id in changed:
        inode = node_id("incident", incident_id)
        for graph in (before, after):
            if inode in graph:
                touched.update(graph[inode])
    for node in touched:
        count = document_frequency_of(after, node)
        if count is None:
            result.pop(node, None)
        else:
            result[node] = count
    return result
