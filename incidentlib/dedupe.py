"""Duplicate detection shared by ``validate --strict`` and importers.

Two records are duplicates when they cite the same source URL or when their text is
nearly the same.  Comparing every pair of texts grows with the square of the library,
so near-duplicate text is found in two steps:

1. **MinHash + LSH banding** picks candidate pairs.  Each text becomes a set of word
   shingles (``SHINGLE_SIZE`` consecutive tokens); its signature is, for each of
   ``NUM_PERM`` hash functions ``h_i(x) = ⌊((a_i·x + b_i) mod 2⁶⁴) / 2³²⌋`` of the shingle's 31-bit hash ``x``
   (multiply-add-shift, a strongly universal family for keys of half the word: Dietzfelbinger, 1996), the minimum
   over its shingles.  Two signatures agree in one position with probability equal to the Jaccard
   similarity ``J = |A ∩ B| / |A ∪ B|``.  The signature is cut into ``BANDS`` bands of
   ``ROWS`` rows; texts sharing any whole band become candidates, which happens with
   probability ``1 - (1 - J^ROWS)^BANDS``.
2. **Exact Jaccard** on the shingle sets confirms each candidate, so the reported score
   is exact and LSH only decides which pairs are worth computing.
"""

from __future__ import annotations

import re
import zlib
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import combinations

import numpy as np

# Word 3-grams: short enough that a reworded sentence changes few shingles, long enough
# that two texts about the same topic with the same vocabulary do not look alike.
SHINGLE_SIZE = 3
# 128 permutations keep the signature estimate within about ±0.09 (1/sqrt(128)) of J.
NUM_PERM = 128
# 32 bands of 4 rows: a pair at J = 0.9 becomes a candidate with probability
# 1 - (1 - 0.9^4)^32 ≈ 1.0, and one at J = 0.5 still with ≈ 0.87, so the exact check
# (not LSH) decides; pairs below J ≈ 0.2 are almost never compared.
BANDS = 32
ROWS = NUM_PERM // BANDS
# Text at or above this Jaccard similarity of shingles is the same text, reworded a little.
TEXT_SIMILARITY_THRESHOLD = 0.9
# Shingle hashes are reduced below the Mersenne prime 2^31 - 1 (keys of at most half the 64-bit word, as
# multiply-add-shift needs); each hash function keeps the high 32 bits of a·x + b modulo 2^64, a odd and b any 64-bit
# number.  The wrapping product and a shift are 2× faster in numpy than the 64-bit remainder of the (a·x + b) mod P
# family used before, which a signature computed for every record of an import paid 19,200 times (150 tokens × 128).
_PRIME = (1 << 31) - 1
_HIGH_BITS = np.uint64(32)
# Fixed seed: signatures, and so candidate pairs, are the same on every run.
_SEED = 20260226


def normalise_url(url: str) -> str:
    """The form two source URLs are compared in.

    Scheme, a leading ``www.``, the host's case and a trailing slash do not matter; the
    ``#fragment`` does, because records drawn from one long page cite the section that
    describes each of them (``chronicles.md#a`` and ``chronicles.md#b`` are different).
    """
    text = url.strip()
    base, hash_mark, fragment = text.partition("#")
    lowered = base.lower()
    for prefix in ("https://", "http://"):
        if lowered.startswith(prefix):
            base = base[len(prefix):]
            break
    host, _, path = base.partition("/")
    host = host.lower().removeprefix("www.")
    path = path.rstrip("/")
    normal = f"{host}/{path}" if path else host
    return f"{normal}#{fragment}" if hash_mark and fragment else normal


# Words as written, case-folded: duplicates are copies, so no stemming is needed, and a plain
# regex keeps the whole library's shingling well under a second.
_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    """Case-folded word tokens (Latin, digits and Hangul alike) of ``text``."""
    return _WORD.findall(text.casefold())


def shingles(text: str, size: int = SHINGLE_SIZE) -> frozenset[str]:
    """Word ``size``-grams of ``text`` (the words themselves when it is shorter)."""
    tokens = words(text)
    if len(tokens) < size:
        return frozenset(tokens)
    return frozenset(" ".join(tokens[i:i + size]) for i in range(len(tokens) - size + 1))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """``|a ∩ b| / |a ∪ b|``; 0 when either set is empty."""
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


# Shingle hashes a hasher remembers: an import hashes the same words again and again (each record's
# tokens, then the same tokens when it is added), and a bound keeps the memory to some tens of MB.
HASH_MEMO_SIZE = 500_000


def _shingle_hash(item: str) -> int:
    # crc32 rather than hash(): str hashing is salted per process, and signatures must be stable
    return zlib.crc32(item.encode()) % _PRIME


class MinHasher:
    """MinHash signatures with ``num_perm`` hash functions ``⌊((a·x + b) mod 2⁶⁴) / 2³²⌋`` (module docstring)."""

    def __init__(self, num_perm: int = NUM_PERM, seed: int = _SEED) -> None:
        rng = np.random.default_rng(seed)
        self._a = rng.integers(0, np.iinfo(np.uint64).max, size=num_perm, dtype=np.uint64, endpoint=True) | np.uint64(1)
        self._b = rng.integers(0, np.iinfo(np.uint64).max, size=num_perm, dtype=np.uint64, endpoint=True)
        self.num_perm = num_perm
        self._hashes: dict[str, int] = {}

    def signature(self, items: frozenset[str]) -> np.ndarray:
        if not items:
            return np.full(self.num_perm, np.iinfo(np.uint64).max, dtype=np.uint64)
        memo = self._hashes
        missing = [item for item in items if item not in memo]
        if missing:
            if len(memo) + len(missing) > HASH_MEMO_SIZE:
                memo.clear()
            memo.update(zip(missing, map(_shingle_hash, missing), strict=True))
        x = np.fromiter(map(memo.__getitem__, items), dtype=np.uint64, count=len(items))
        values: np.ndarray = np.multiply.outer(x, self._a)  # wraps modulo 2^64, as the family wants
        values += self._b
        values >>= _HIGH_BITS
        minimum: np.ndarray = values.min(axis=0)
        return minimum


@dataclass(frozen=True)
class SimilarPair:
    """Two keys whose texts are at least the threshold similar; ``score`` is the exact Jaccard."""

    a: str
    b: str
    score: float


def similar_texts(
    texts: Mapping[str, str],
    threshold: float = TEXT_SIMILARITY_THRESHOLD,
    bands: int = BANDS,
    rows: int = ROWS,
) -> list[SimilarPair]:
    """Pairs of ``texts`` (key → text) whose shingle Jaccard similarity is ≥ ``threshold``.

    Candidates come from LSH buckets (see the module docstring), each checked exactly;
    the cost grows with the number of texts plus the number of candidate pairs, not
    with all pairs.  Pairs are ordered by key.
    """
    hasher = MinHasher(num_perm=bands * rows)
    prints = {key: shingles(text) for key, text in texts.items() if text.strip()}
    buckets: dict[tuple[int, bytes], list[str]] = defaultdict(list)
    for key, items in prints.items():
        if not items:
            continue
        signature = hasher.signature(items)
        for band in range(bands):
            buckets[(band, signature[band * rows:(band + 1) * rows].tobytes())].append(key)
    candidates: set[tuple[str, str]] = set()
    for members in buckets.values():
        for a, b in combinations(sorted(set(members)), 2):
            candidates.add((a, b))
    found = []
    for a, b in sorted(candidates):
        score = jaccard(prints[a], prints[b])
        if score >= threshold:
            found.append(SimilarPair(a, b, score))
    return found


def shared_urls(urls_by_key: Mapping[str, Iterable[str]]) -> dict[str, list[str]]:
    """Normalised URL → the keys citing it, for every URL cited by more than one key."""
    owners: dict[str, list[str]] = defaultdict(list)
    for key, urls in urls_by_key.items():
        for url in {normalise_url(u) for u in urls}:
            owners[url].append(key)
    return {url: sorted(keys) for url, keys in owners.items() if len(keys) > 1}
