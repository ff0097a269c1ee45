"""Pages of a long list: which slice a page number shows and where its previous and next pages are.

A page number comes from a link or a form someone may have edited or kept while the list shrank (drafts published
by someone else): anything that is not a positive number is page 1, and a page past the end is the last page, so
an old link or a redirect after the last draft of a page was reviewed still lands on a page with drafts on it.
"""

from __future__ import annotations

from dataclasses import dataclass


def page_number(value: str | int | None) -> int:
    """``value`` as a page number (1 for anything that is not a positive whole number)."""
    text = str(value or "").strip()
    return int(text) if text.isdigit() and 0 < len(text) <= 9 and int(text) > 0 else 1


@dataclass(frozen=True)
class Pager:
    """Page ``page`` (1-based, clamped to the pages there are) of ``total`` items, ``size`` a page."""

    page: int
    size: int
    total: int

    @classmethod
    def of(cls, page: int, size: int, total: int) -> Pager:
        pages = max(1, -(-total // size))
        return cls(page=min(max(page, 1), pages), size=size, total=total)

    @property
    def start(self) -> int:
        """Index of the first item shown (0-based)."""
        return (self.page - 1) * self.size

    @property
    def end(self) -> int:
        """Index after the last item shown."""
        return min(self.start + self.size, self.total)

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.size))

    @property
    def previous(self) -> int | None:
        return self.page - 1 if self.page > 1 else None

    @property
    def next(self) -> int | None:
        return self.page + 1 if self.page < self.pages else None
