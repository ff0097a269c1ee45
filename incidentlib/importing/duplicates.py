"""Near-duplicate detection for imports: the same source URL, or very similar title and text."""

from __future__ import annotations

from dataclasses import dataclass

from ..search.tokenize import tokenize

SIMILARITY_THRESHOLD = 0.6


def normalise_url(url: str) -> str:
    url = url.strip().lower()
    for prefix in ("https://", "http://"):
        url = url.removeprefix(prefix)
    url = url.removeprefix("www.")
    return url.split("#", 1)[0].rstrip("/")


def fingerprint(text: str) -> frozenset[str]:
    return frozenset(tokenize(text))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


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

    def add(self, incident_id: str, urls: list[str], texts: list[str]) -> None:
        normal = frozenset(normalise_url(u) for u in urls)
        self._known.append(Known(incident_id, normal, tuple(fingerprint(t) for t in texts if t)))
        for url in normal:
            self._by_url.setdefault(url, incident_id)

    def find(self, urls: list[str], texts: list[str]) -> Duplicate | None:
        for url in urls:
            owner = self._by_url.get(normalise_url(url))
            if owner:
                return Duplicate(owner, f"same source URL as {owner}: {url}")
        prints = [fingerprint(t) for t in texts if t]
        best, best_id = 0.0, ""
        for known in self._known:
            for mine in prints:
                for theirs in known.prints:
                    score = jaccard(mine, theirs)
                    if score > best:
                        best, best_id = score, known.id
        if best >= self.threshold:
            return Duplicate(best_id, f"title and text {best:.0%} similar to {best_id}")
        return None
