"""Near-duplicate detection for imports: the same source URL, or very similar title and text.

Texts are compared by the Jaccard similarity of their token sets.  Comparing a record with
every known one grows with the square of an import, so candidates come from MinHash + LSH
banding over the token sets (:mod:`incidentlib.dedupe`: ``BANDS`` bands of ``ROWS`` rows);
each candidate is then compared exactly, so a reported score is exact.  A pair at the
threshold J = 0.6 becomes a candidate with probability ``1 − (1 − 0.6⁴)³² ≈ 0.988``, one at
J = 0.7 with 0.9998, one at J = 0.8 with ≈ 1; unrelated records (J ≈ 0.05) almost never do.

A status-page history or a ticket export writes the same template sentences into every record ("We are
investigating reports of…", "A fix has been implemented and we are monitoring the results."), and two
incidents that share them and differ in the one sentence that names their cause are not the same incident.
So the texts are compared without the collection's boilerplate (:class:`~incidentlib.search.boilerplate.Boilerplate`),
learnt by the importer from the library's records and the import's together: sentences in at least
``TEMPLATE_MIN_RECORDS`` (10) distinct texts and 1 % of them, more than the similarity's 3, so that an incident filed
again a few times is still compared by what its copies share.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..dedupe import BANDS, ROWS, MinHasher
from ..search.boilerplate import Boilerplate
from ..search.tokenize import tokenize

# Jaccard similarity of title+summary tokens at or above which an imported record is a near-duplicate.
# Chosen by hand, with margin: no two distinct incidents in the bundled library come close (the highest
# pair, IL-0019/IL-0033, is 0.28), while a reworded copy of a record keeps most of its tokens.
SIMILARITY_THRESHOLD = 0.6


def normalise_url(url: str) -> str:
    """Scheme, ``www.``, the host's case and a trailing slash do not make a different page; a ``#fragment`` does, and
    so does the case of the path (link shorteners and ticket systems tell ``/AbC12`` from ``/abc12``).

    Status-page histories link each incident as ``history#id``, so two URLs that differ only
    in their fragment name two incidents.  An empty fragment (``page#``) is dropped.
    """
    url = url.strip()
    url = re.sub(r"^https?://", "", url, flags=re.IGNORECASE)
    host, slash, rest = url.partition("/")
    host = host.lower().removeprefix("www.")
    url = f"{host}{slash}{rest}"
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
    prints: tuple[np.ndarray, ...]  # one per language of title + summary: its token ids (int32), none empty


@dataclass(frozen=True)
class Duplicate:
    of: str
    reason: str


#: Bytes of one LSH band key: ROWS signature values of 8 bytes (uint64).
_BAND_BYTES = ROWS * 8


#: What the duplicate check compares of a text: its token set (without the collection's boilerplate) and its LSH band
#: keys (none for a text without tokens).
Prepared = tuple[frozenset[str], list[tuple[int, bytes]]]


class Fingerprints:
    """``fingerprints(text)`` → the text's :data:`Prepared` form, from the text alone (so it may be computed ahead,
    in another process: :mod:`.ahead`)."""

    def __init__(self, boilerplate: Boilerplate | None = None) -> None:
        self.boilerplate = boilerplate  # template sentences left out of every text compared
        self._hasher = MinHasher(num_perm=BANDS * ROWS)

    def __call__(self, text: str) -> Prepared:
        tokens = fingerprint(self.boilerplate.strip(text) if self.boilerplate is not None else text)
        if not tokens:
            return tokens, []
        rows = self._hasher.signature(tokens).tobytes()
        return tokens, [(band, rows[band * _BAND_BYTES:(band + 1) * _BAND_BYTES]) for band in range(BANDS)]


class DuplicateIndex:
    """Existing incidents and the records accepted so far in this import.

    A known record's token sets are kept as arrays of token ids, so a record's candidates are
    scored together: ``|A ∩ B|`` for every candidate ``B`` is a sum over ``B``'s ids of a
    marker array set at ``A``'s ids, and ``J = |A ∩ B| / (|A| + |B| − |A ∩ B|)``, the same
    integers and so the same number as :func:`jaccard`.
    """

    def __init__(self, threshold: float = SIMILARITY_THRESHOLD, boilerplate: Boilerplate | None = None) -> None:
        self.threshold = threshold
        self.fingerprints = Fingerprints(boilerplate)
        self._known: list[Known] = []
        self._by_url: dict[str, str] = {}
        self._buckets: dict[tuple[int, bytes], list[int]] = defaultdict(list)  # (band, rows) -> known positions
        self._token_ids: dict[str, int] = {}  # every token of a known record
        self._marks = np.zeros(1024, dtype=bool)  # by token id: in the record being checked (all False between checks)
        # text -> (fingerprint, LSH keys) of the last find(): an accepted record is added next, without
        # tokenizing and hashing its texts again
        self._last: dict[str, Prepared] = {}

    def _prepared(self, text: str) -> Prepared:
        found = self._last.get(text)
        return found if found is not None else self.fingerprints(text)

    def _ids(self, tokens: frozenset[str]) -> np.ndarray:
        ids = self._token_ids
        new = [t for t in tokens if t not in ids]  # not ``tokens - ids.keys()``: that walks every known token
        ids.update(zip(new, range(len(ids), len(ids) + len(new)), strict=True))
        return np.fromiter(map(ids.__getitem__, tokens), dtype=np.int32, count=len(tokens))

    def add(self, incident_id: str, urls: list[str], texts: list[str]) -> None:
        normal = frozenset(normalise_url(u) for u in urls)
        position = len(self._known)
        prepared = [self._prepared(t) for t in texts if t]
        self._known.append(Known(incident_id, normal, tuple(self._ids(tokens) for tokens, _ in prepared if tokens)))
        for url in normal:
            self._by_url.setdefault(url, incident_id)
        for key in {key for _, keys in prepared for key in keys}:
            self._buckets[key].append(position)

    def find(self, urls: list[str], texts: list[str], prepared: Sequence[Prepared] | None = None) -> Duplicate | None:
        """The first known record (in the order added) with the highest similarity ≥ the threshold among the LSH
        candidates, if any.  ``prepared``: ``fingerprints(text)`` of each of ``texts``, computed already."""
        for url in urls:
            owner = self._by_url.get(normalise_url(url))
            if owner:
                return Duplicate(owner, f"same source URL as {owner}: {url}")
        if prepared is not None:
            self._last = {t: found for t, found in zip(texts, prepared, strict=True) if t}
        else:
            self._last = {t: self.fingerprints(t) for t in texts if t}
        candidates: set[int] = set()
        for _, keys in self._last.values():
            for key in keys:
                bucket = self._buckets.get(key)
                if bucket:
                    candidates.update(bucket)
        best, best_id = self._best(sorted(candidates), [tokens for tokens, _ in self._last.values() if tokens])
        if best >= self.threshold:
            return Duplicate(best_id, f"title and text {best:.0%} similar to {best_id}")
        return None

    def _best(self, positions: list[int], prints: list[frozenset[str]]) -> tuple[float, str]:
        """The highest Jaccard similarity of ``prints`` with the known records at ``positions`` (in the order added)
        and the first record reaching it; ``(0.0, "")`` when none shares a token."""
        theirs = [(position, ids) for position in positions for ids in self._known[position].prints]
        if not theirs or not prints:
            return 0.0, ""
        flat = np.concatenate([ids for _, ids in theirs])
        sizes = np.fromiter((len(ids) for _, ids in theirs), dtype=np.int64, count=len(theirs))
        starts = np.zeros(len(theirs), dtype=np.int64)
        np.cumsum(sizes[:-1], out=starts[1:])
        if len(self._marks) < len(self._token_ids):
            self._marks = np.zeros(2 * len(self._token_ids), dtype=bool)
        best, first = 0.0, len(theirs)
        ids = self._token_ids
        for tokens in prints:
            mine = np.array([ids[t] for t in tokens if t in ids], dtype=np.int64)
            self._marks[mine] = True
            shared = np.add.reduceat(self._marks[flat], starts, dtype=np.int64)
            self._marks[mine] = False
            scores = shared / (len(tokens) + sizes - shared)
            top = int(np.argmax(scores))  # the first of the highest
            score = float(scores[top])
            if score > best or (score == best and score > 0 and top < first):
                best, first = score, top
        return best, (self._known[theirs[first][0]].id if best > 0 else "")
