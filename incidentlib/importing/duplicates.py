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
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat

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
class Duplicate:
    of: str
    reason: str


#: Odd 64-bit multipliers that mix a band's ROWS signature values, and its number, into one integer key (FNV-1a's
#: prime and the golden ratio's bits): a key is a Python int, not a ``(band, bytes)`` tuple, because an import of
#: 100,000 records holds 3.2 million keys, most of them in no other record.  Two bands that mix to one key by chance
#: only make a pair a candidate; the exact Jaccard decides, so a collision never makes a duplicate.
_ROW_MIX = np.uint64(0x100000001B3)
_BAND_MIX = np.uint64(0x9E3779B97F4A7C15)
_BAND_NUMBERS = np.arange(1, BANDS + 1, dtype=np.uint64) * _BAND_MIX


def band_keys(signature: np.ndarray) -> list[int]:
    """One integer per LSH band of a MinHash ``signature`` (``BANDS × ROWS`` values): equal bands of one band number
    give equal keys, and different ones almost never do (``_ROW_MIX``).  Arithmetic wraps modulo 2⁶⁴."""
    rows = signature.reshape(BANDS, ROWS)
    key = _BAND_NUMBERS
    for row in range(ROWS):  # array arithmetic on uint64 wraps without a warning
        key = (key ^ rows[:, row]) * _ROW_MIX
    keys: list[int] = key.tolist()
    return keys


#: What the duplicate check compares of a text: its token set (without the collection's boilerplate) and its LSH band
#: keys (none for a text without tokens).
Prepared = tuple[frozenset[str], list[int]]


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
        return tokens, band_keys(self._hasher.signature(tokens))


class _Column:
    """Integers appended at the end of one array, whose room doubles when full (amortised O(1) an integer)."""

    def __init__(self, dtype: type[np.integer]) -> None:
        self._data = np.zeros(1024, dtype=dtype)
        self.size = 0

    def extend(self, values: np.ndarray | list[int]) -> None:
        end = self.size + len(values)
        if end > len(self._data):
            grown = np.zeros(max(end, 2 * len(self._data)), dtype=self._data.dtype)
            grown[:self.size] = self._data[:self.size]
            self._data = grown
        self._data[self.size:end] = values
        self.size = end

    @property
    def values(self) -> np.ndarray:
        return self._data[:self.size]


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``range(s, s + n)`` for each ``(s, n)`` of ``starts`` and ``lengths``, one after the other, in one array."""
    begins = np.cumsum(lengths) - lengths  # where each range begins in the result
    return np.repeat(starts - begins, lengths) + np.arange(int(lengths.sum()))


class DuplicateIndex:
    """Existing incidents and the records accepted so far in this import.

    A known record's token sets ("prints", one per language of its title and summary) are kept as token ids, all of
    them end to end in one array, so a record's candidates are gathered and scored together with no step per
    candidate in Python: ``|A ∩ B|`` for every candidate print ``B`` is a sum over ``B``'s ids of a marker array set at
    ``A``'s ids, and ``J = |A ∩ B| / (|A| + |B| − |A ∩ B|)``, the same integers and so the same number as
    :func:`jaccard`.
    """

    def __init__(self, threshold: float = SIMILARITY_THRESHOLD, boilerplate: Boilerplate | None = None) -> None:
        self.threshold = threshold
        self.fingerprints = Fingerprints(boilerplate)
        self._incident_ids: list[str] = []  # by position, in the order added
        self._by_url: dict[str, str] = {}
        # band key -> the known positions with that band: one int while it is one (most keys), a list from the second on
        self._buckets: dict[int, int | list[int]] = {}
        self._token_ids: dict[str, int] = {}  # every token of a known record
        self._tokens = _Column(np.int32)  # every known print's token ids, print after print
        self._print_start, self._print_size = _Column(np.int64), _Column(np.int64)  # by print: where in _tokens
        self._first_print, self._print_count = _Column(np.int64), _Column(np.int64)  # by known position: its prints
        self._marks = np.zeros(1024, dtype=bool)  # by token id: in the record being checked (all False between checks)
        # text -> (fingerprint, LSH keys) and its tokens' ids (-1: not a known token) of the last find(): an accepted
        # record is added next, without tokenizing, hashing and looking up its texts again
        self._last: dict[str, tuple[Prepared, np.ndarray]] = {}

    def _looked_up(self, tokens: frozenset[str]) -> np.ndarray:
        """The id of each of ``tokens`` (in the set's order), -1 for a token no known record has."""
        return np.fromiter(map(self._token_ids.get, tokens, repeat(-1)), dtype=np.int64, count=len(tokens))

    def _ids(self, tokens: frozenset[str], looked_up: np.ndarray) -> np.ndarray:
        """The ids of ``tokens``, a new one given to each token without one (``looked_up``: :meth:`_looked_up`)."""
        missing = np.flatnonzero(looked_up < 0)
        if len(missing):
            looked_up = looked_up.copy()
            ids, in_order = self._token_ids, list(tokens)  # a set's order is the same at every walk over it
            for at in missing.tolist():  # setdefault: a token new to the first text may be in the second too
                looked_up[at] = ids.setdefault(in_order[at], len(ids))
        return looked_up.astype(np.int32)

    def add(self, incident_id: str, urls: list[str], texts: list[str]) -> None:
        normal = frozenset(normalise_url(u) for u in urls)
        position = len(self._incident_ids)
        self._incident_ids.append(incident_id)
        self._first_print.extend([self._print_start.size])
        keys: set[int] = set()
        count = 0
        for text in texts:
            if not text:
                continue
            last = self._last.get(text)
            if last is None:  # not the text of the last find(): a known incident, added without a check
                prepared = self.fingerprints(text)
                last = prepared, self._looked_up(prepared[0])
            (tokens, text_keys), looked_up = last
            keys.update(text_keys)
            if tokens:
                ids = self._ids(tokens, looked_up)
                self._print_start.extend([self._tokens.size])
                self._print_size.extend([len(ids)])
                self._tokens.extend(ids)
                count += 1
        self._print_count.extend([count])
        for url in normal:
            self._by_url.setdefault(url, incident_id)
        buckets = self._buckets
        for key in keys:
            held = buckets.get(key)
            if held is None:
                buckets[key] = position
            elif isinstance(held, int):
                buckets[key] = [held, position]
            else:
                held.append(position)

    def find(self, urls: list[str], texts: list[str], prepared: Sequence[Prepared] | None = None) -> Duplicate | None:
        """The first known record (in the order added) with the highest similarity ≥ the threshold among the LSH
        candidates, if any.  ``prepared``: ``fingerprints(text)`` of each of ``texts``, computed already."""
        for url in urls:
            owner = self._by_url.get(normalise_url(url))
            if owner:
                return Duplicate(owner, f"same source URL as {owner}: {url}")
        if prepared is None:
            prepared = [self.fingerprints(t) if t else (frozenset(), []) for t in texts]
        self._last = {t: (found, self._looked_up(found[0])) for t, found in zip(texts, prepared, strict=True) if t}
        candidates: set[int] = set()
        buckets = self._buckets
        for (_, keys), _ in self._last.values():
            for key in keys:
                bucket = buckets.get(key)
                if isinstance(bucket, list):
                    candidates.update(bucket)
                elif bucket is not None:
                    candidates.add(bucket)
        mine = [(len(tokens), looked_up[looked_up >= 0]) for (tokens, _), looked_up in self._last.values() if tokens]
        best, best_id = self._best(np.array(sorted(candidates), dtype=np.int64), mine)
        if best >= self.threshold:
            return Duplicate(best_id, f"title and text {best:.0%} similar to {best_id}")
        return None

    def _best(self, positions: np.ndarray, prints: list[tuple[int, np.ndarray]]) -> tuple[float, str]:
        """The highest Jaccard similarity of ``prints`` (each: its size and the ids of its known tokens) with the known
        records at ``positions`` (in the order added) and the first record reaching it; ``(0.0, "")`` when none shares
        a token."""
        counts = self._print_count.values[positions]
        theirs = _ranges(self._first_print.values[positions], counts)  # the candidates' prints, in order
        if not len(theirs) or not prints:
            return 0.0, ""
        sizes = self._print_size.values[theirs]
        flat = self._tokens.values[_ranges(self._print_start.values[theirs], sizes)]
        starts = np.cumsum(sizes) - sizes  # of each print in flat (none is empty)
        if len(self._marks) < len(self._token_ids):
            self._marks = np.zeros(2 * len(self._token_ids), dtype=bool)
        best, first = 0.0, len(theirs)
        for size, mine in prints:
            self._marks[mine] = True
            shared = np.add.reduceat(self._marks[flat], starts, dtype=np.int64)
            self._marks[mine] = False
            scores = shared / (size + sizes - shared)
            top = int(np.argmax(scores))  # the first of the highest
            score = float(scores[top])
            if score > best or (score == best and score > 0 and top < first):
                best, first = score, top
        if best <= 0:
            return 0.0, ""
        owner = int(np.searchsorted(np.cumsum(counts), first, side="right"))  # the candidate whose print it is
        return best, self._incident_ids[int(positions[owner])]
