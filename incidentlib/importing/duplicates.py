"""Near-duplicate detection for imports: the same source URL, or very similar title and text.

Texts are compared by the Jaccard similarity of their token sets.  Comparing a record with
every known one grows with the square of an import, so candidates come from MinHash + LSH
banding over the token sets (:mod:`incidentlib.dedupe`: ``BANDS`` bands of ``ROWS`` rows);
each candidate is then compared exactly, so a reported score is exact.  A pair at the
threshold J = 0.6 becomes a candidate with probability ``1 − (1 − 0.6⁴)³² ≈ 0.988``, one at
J = 0.7 with 0.9998, one at J = 0.8 with ≈ 1; unrelated records (J ≈ 0.05) almost never do.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ..dedupe import BANDS, ROWS, MinHasher
from ..search.tokenize import tokenize

# Jaccard similarity of title+summary tokens at or above which an imported record is a near-duplicate.
# Chosen by hand, with margin: no two distinct incidents in the bundled library come close (the highest
# pair, IL-0019/IL-0033, is 0.28), while a reworded copy of a record keeps most of its tokens.
SIMILARITY_THRESHOLD = 0.6


def normalise_url(url: str) -> str:
    """Scheme, ``www.``, case and a trailing slash do not make a different page; a ``#fragment`` does.

    Status-page histories link each incident as ``history#id``, so two URLs that differ only
    in their fragment name two incidents.  An empty fragment (``page#``) is dropped.
    """
    url = url.strip().lower()
    for prefix in ("https://", "http://"):
        url = url.removeprefix(prefix)
    url = url.removeprefix("www.")
    page, _, fragment = url.partition("#")
    page = page.rstrip("/")
    return f"{page}#{fragment}" if fragment else page


def fingerprint(text: str) -> frozenset[str]:
    return frozenset(tokenize(text))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """``|a ∩ b| / |a ∪ b|`` with ``|a ∪ b| = |a| + |b| − |a ∩ b|`` (one set built, not two); 0 when either is empty."""
    if not a or not b:
        return 0.0
    shared = len(a & b)
    return shared / (len(a) + len(b) - shared)


@dataclass(frozen=True)
class Known:
    id: str
    urls: frozenset[str]
    prints: tuple[frozenset[str], ...]  # one per language of title + summary


@dataclass(frozen=True)
class Duplicate:
    of: str
    reason: str


class DuplicateIndex:
    """Existing incidents and the records accepted so far in this import."""

    def __init__(self, threshold: float = SIMILARITY_THRESHOLD) -> None:
        self.threshold = threshold
        self._known: list[Known] = []
        self._by_url: dict[str, str] = {}
        self._hasher = MinHasher(num_perm=BANDS * ROWS)
        self._buckets: dict[tuple[int, bytes], list[int]] = defaultdict(list)  # (band, rows) -> known positions
        # text -> (fingerprint, LSH keys) of the last find(): an accepted record is added next, without
        # tokenizing and hashing its texts again
        self._last: dict[str, tuple[frozenset[str], list[tuple[int, bytes]]]] = {}

    def _prepared(self, text: str) -> tuple[frozenset[str], list[tuple[int, bytes]]]:
        found = self._last.get(text)
        if found is None:
            tokens = fingerprint(text)
            found = (tokens, self._bands(tokens) if tokens else [])
        return found

    def _bands(self, tokens: frozenset[str]) -> list[tuple[int, bytes]]:
        signature = self._hasher.signature(tokens)
        return [(band, signature[band * ROWS:(band + 1) * ROWS].tobytes()) for band in range(BANDS)]

    def add(self, incident_id: str, urls: list[str], texts: list[str]) -> None:
        normal = frozenset(normalise_url(u) for u in urls)
        position = len(self._known)
        prepared = [self._prepared(t) for t in texts if t]
        self._known.append(Known(incident_id, normal, tuple(tokens for tokens, _ in prepared)))
        for url in normal:
            self._by_url.setdefault(url, incident_id)
        for key in {key for _, keys in prepared for key in keys}:
            self._buckets[key].append(position)

    def find(self, urls: list[str], texts: list[str]) -> Duplicate | None:
        """The first known record (in the order added) with the highest similarity ≥ the threshold among the LSH
        candidates, if any."""
        for url in urls:
            owner = self._by_url.get(normalise_url(url))
            if owner:
                return Duplicate(owner, f"same source URL as {owner}: {url}")
        self._last = {t: self._prepared(t) for t in texts if t}
        prints = [tokens for tokens, _ in self._last.values() if tokens]
        candidates = {position for _, keys in self._last.values() for key in keys for position in self._buckets.get(key, ())}
        best, best_id = 0.0, ""
        for position in sorted(candidates):  # the order added, so ties go to the earlier record
            known = self._known[position]
            for mine in prints:
                for theirs in known.prints:
                    score = jaccard(mine, theirs)
                    if score > best:
                        best, best_id = score, known.id
        if best >= self.threshold:
            return Duplicate(best_id, f"title and text {best:.0%} similar to {best_id}")
        return None
