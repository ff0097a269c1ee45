"""The search page's list: a page of search results, or, with filters and no words, the incidents they match.

Hybrid search always has nearest neighbours by meaning, so it never comes back empty: the page says when no
incident contains the words (no result has lexical evidence, ``why.lexical_rank``) instead of presenting the
nearest incidents as matches. Search has no offset, so a page ``n`` asks for the first ``n`` pages plus one result,
which tells whether there is a next page, up to the library's ``MAX_K``; a filter listing has a total and pages
through all of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import NotFound
from ..library import Library
from ..requests import MAX_K, IncidentFilter
from ._paging import Pager

#: Results a page shows: a screenful on a laptop.
RESULTS_PER_PAGE = 20
#: Search pages reachable from the page: the library returns at most MAX_K results of one query (the JSON API too).
MAX_SEARCH_PAGES = MAX_K // RESULTS_PER_PAGE


def marks(library: Library, items: list[Any], lang: str) -> dict[str, Any]:
    """What result and related lists print beside each incident: its organization's name in ``lang`` (the items
    carry the id) and whether it is an unreviewed draft (the items do not say)."""
    labels: dict[str, str] = {}
    drafts: set[str] = set()
    for item in items:
        if item.org not in labels:
            concept = library.vocab.get(item.org)
            labels[item.org] = concept.label.get(lang) if concept is not None else item.org
        try:
            if library.get(item.id).is_draft:
                drafts.add(item.id)
        except NotFound:  # removed by a write since the list was made
            continue
    return {"org_labels": labels, "drafts": drafts}


@dataclass
class SearchPage:
    """What the result list shows: ``results`` (search) or ``listed`` (filters only), and how to page."""

    results: list[Any] = field(default_factory=list)
    listed: list[Any] = field(default_factory=list)
    pager: Pager | None = None
    total: int | None = None  # known for a filter listing; a search only knows whether more follow
    no_words: bool = False  # a search none of whose results contains the query's words
    searched: bool = False


def run(library: Library, q: str, filters: IncidentFilter, lang: str, page: int) -> SearchPage:
    """Page ``page`` of the search for ``q``, or of the filters' listing when ``q`` is blank."""
    if q.strip():
        page = min(max(page, 1), MAX_SEARCH_PAGES)
        wanted = min(page * RESULTS_PER_PAGE + 1, MAX_K)  # one more than the page: is there a next page?
        found = library.search(q, k=wanted, filters=filters, lang=lang).results
        pager = Pager.of(page, RESULTS_PER_PAGE, len(found))
        shown = found[pager.start : pager.end]
        no_words = bool(found) and all(r.why.lexical_rank is None for r in found)
        return SearchPage(results=shown, pager=pager, no_words=no_words, searched=True)
    if filters.is_empty():
        return SearchPage()
    total = library.list_incidents(filters, lang=lang, limit=0).total
    pager = Pager.of(page, RESULTS_PER_PAGE, total)
    items = library.list_incidents(filters, lang=lang, limit=RESULTS_PER_PAGE, offset=pager.start).items
    return SearchPage(listed=items, pager=pager, total=total)
