"""Constants of the graph algorithms that light modules need: no NetworkX here (a search imports this)."""

from __future__ import annotations

#: Kinds whose shared concepts relate two incidents (see ``graph.scoring``).
RELATING_KINDS: tuple[str, ...] = ("component", "cause")
# Tags ("gpu-cloud", "outage") join most incidents: a path through one says nothing.
HUB_KINDS: tuple[str, ...] = ("tag",)
# Rows in each of a topic page's two count lists: chosen by hand for a readable page; not tuned.
TOPIC_LIST_LIMIT = 15
