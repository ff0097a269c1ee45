"""A concept classifier learnt from curated links, in both languages.

Features: the TF-IDF vector of the text under the bilingual BM25 tokenizer (sublinear tf,
L2-normalised) joined with the text's sentence embedding (L2-normalised), so each half
weighs the same.  One logistic regression per concept (one-vs-rest) with balanced class
weights, so a rare cause is not drowned by the many records without it; a concept is
proposed when its probability passes 0.5, the decision boundary of that balanced model.

Training examples are curated records, one example per language they are written in,
labelled with their components, causes and symptoms.  Concepts with fewer than
``MIN_POSITIVE_RECORDS`` records are not learnt: the alias matcher covers them.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..embeddings import Embedder
from ..models import LANGS, Incident
from ..search.tokenize import tokenize

if TYPE_CHECKING:
    from scipy import sparse  # type: ignore[import-untyped]
    from sklearn.linear_model import LogisticRegression

# Three records is the least from which a concept's wording can be told from one incident's story.
MIN_POSITIVE_RECORDS = 3
# The decision boundary of a class-balanced logistic regression.
PROPOSE_PROBABILITY = 0.5
# L2 regularisation of sklearn's default strength; the model is not tuned to any one collection.
REGULARISATION_C = 1.0
# liblinear's coordinate descent solves these small, sparse one-vs-rest problems about 7x faster
# than lbfgs (measured: 30 concepts of the bundled library, 15 vs 2 CPU s), with probabilities
# within 0.02 of it; the first fit of a new library happens on a live request, so it must be quick.
SOLVER = "liblinear"


#: Text embeddings a process remembers at most (the least recently used go first).  A fit and then the tagging
#: of the same records, and the five fits of a cross-fitted evaluation, embed the same few thousand texts again;
#: a server also embeds every pasted text (similar by text infers its concepts), and those must not pile up for
#: the life of the process.  8,192 vectors of use-m3's 512 dimensions are 16 MB.  Chosen, not tuned.
EMBEDDING_MEMO_ENTRIES = 8_192


class EmbeddingMemo:
    """Least-recently-used text embeddings, keyed by a 16-byte BLAKE2b of (embedder name, text), not the text itself."""

    def __init__(self, capacity: int = EMBEDDING_MEMO_ENTRIES) -> None:
        self.capacity = capacity
        self._vectors: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()  # tagging runs on a server's request threads

    @staticmethod
    def key(embedder: str, text: str) -> bytes:
        return hashlib.blake2b(f"{embedder}\x00{text}".encode(), digest_size=16).digest()

    def __len__(self) -> int:
        return len(self._vectors)

    def found(self, keys: Sequence[bytes]) -> dict[bytes, np.ndarray]:
        """The remembered vectors among ``keys`` (each now the most recently used)."""
        with self._lock:
            hits = {key: self._vectors[key] for key in keys if key in self._vectors}
            for key in hits:
                self._vectors.move_to_end(key)
        return hits

    def remember(self, key: bytes, vector: np.ndarray) -> None:
        with self._lock:
            self._vectors[key] = vector
            self._vectors.move_to_end(key)
            while len(self._vectors) > self.capacity:
                self._vectors.popitem(last=False)


_EMBEDDINGS = EmbeddingMemo()


@dataclass(frozen=True)
class Example:
    record: str
    text: str
    concepts: frozenset[str]


def training_examples(incidents: Sequence[Incident], text_of: Callable[[Incident, str], str]) -> list[Example]:
    """One example per (curated record, language): ``text_of(incident, lang)`` gives the text."""
    examples = []
    for incident in incidents:
        if incident.is_draft:
            continue
        labels = frozenset((*incident.components, *incident.causes, *incident.symptoms))
        if not labels:
            continue
        for lang in LANGS:
            text = text_of(incident, lang)
            if text:
                examples.append(Example(incident.id, text, labels))
    return examples


class ConceptClassifier:
    """``probabilities(texts)``: P(concept | text) for every learnt concept."""

    def __init__(self, embedder: Embedder | None) -> None:
        self.embedder = embedder
        self.concepts: list[str] = []
        # sklearn loads here, not at import: a search that never classifies should not pay its ~1 s import
        from sklearn.feature_extraction.text import TfidfVectorizer

        self._vectorizer: TfidfVectorizer | None = TfidfVectorizer(tokenizer=tokenize, lowercase=False, token_pattern=None,
                                                                   sublinear_tf=True)
        self._models: list[LogisticRegression] = []
        # what scoring needs, kept after a fit and pickled instead of the scikit-learn objects (see __getstate__)
        self._vocabulary: dict[str, int] = {}
        self._idf = np.zeros(0)

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings, remembered (:class:`EmbeddingMemo`): cross-fitting and tagging embed the same records again."""
        assert self.embedder is not None
        keys = [EmbeddingMemo.key(self.embedder.name, text) for text in texts]
        vectors = _EMBEDDINGS.found(keys)  # held here too: a batch larger than the memo still gets every vector
        missing = {key: text for key, text in zip(keys, texts, strict=True) if key not in vectors}
        if missing:
            for key, vector in zip(missing, self.embedder.encode_documents(list(missing.values())), strict=True):
                vectors[key] = vector
                _EMBEDDINGS.remember(key, vector)
        return np.stack([vectors[key] for key in keys])

    def _lexical(self, texts: Sequence[str]) -> sparse.csr_matrix:
        """The fitted TF-IDF vectors of ``texts``, as scikit-learn's ``TfidfVectorizer.transform`` computes them
        (sublinear ``tf = 1 + ln count``, times ``idf``, rows L2-normalised), from the vocabulary and ``idf`` alone:
        a model read back from its cache scores text without importing scikit-learn (about 3 s of a CLI call)."""
        from scipy import sparse  # imported when a model is fitted or used

        vocabulary = self._vocabulary
        indptr = [0]
        columns: list[int] = []
        counted: list[int] = []
        for text in texts:
            counts: dict[int, int] = {}
            for token in tokenize(text):
                column = vocabulary.get(token)
                if column is not None:
                    counts[column] = counts.get(column, 0) + 1
            for column in sorted(counts):
                columns.append(column)
                counted.append(counts[column])
            indptr.append(len(columns))
        counts_array = np.asarray(counted, dtype=np.float64)
        columns_array = np.asarray(columns, dtype=np.int64)
        values = (1.0 + np.log(counts_array)) * self._idf[columns_array] if len(columns_array) else counts_array
        matrix = sparse.csr_matrix((values, columns_array, np.asarray(indptr, dtype=np.int64)),
                                   shape=(len(texts), len(vocabulary)))
        norms = np.sqrt(np.asarray(matrix.multiply(matrix).sum(axis=1)).ravel())
        norms[norms == 0] = 1.0
        return sparse.csr_matrix(sparse.diags(1 / norms) @ matrix)

    def _features(self, texts: Sequence[str], fit: bool = False) -> sparse.csr_matrix:
        from scipy import sparse  # imported when a model is fitted or used

        if fit:
            vectorizer = self._vectorizer
            assert vectorizer is not None  # fit() makes one
            lexical = vectorizer.fit_transform(texts)
            self._vocabulary = dict(vectorizer.vocabulary_)
            self._idf = np.asarray(vectorizer.idf_, dtype=np.float64)
        else:
            lexical = self._lexical(texts)
        if self.embedder is None:
            return sparse.csr_matrix(lexical)
        dense = self._embed(texts)
        return sparse.hstack([lexical, sparse.csr_matrix(dense)], format="csr")

    def fit(self, examples: Sequence[Example]) -> ConceptClassifier:
        if not examples:
            return self
        for transient in self._TRANSIENT:  # made from the previous fit's models and vocabulary
            self.__dict__.pop(transient, None)
        if self._vectorizer is None:  # read back from a cache: fitted again from the start
            from sklearn.feature_extraction.text import TfidfVectorizer

            self._vectorizer = TfidfVectorizer(tokenizer=tokenize, lowercase=False, token_pattern=None, sublinear_tf=True)
        counts: dict[str, set[str]] = {}
        for example in examples:
            for concept in example.concepts:
                counts.setdefault(concept, set()).add(example.record)
        self.concepts = sorted(c for c, records in counts.items() if len(records) >= MIN_POSITIVE_RECORDS)
        features = self._features([e.text for e in examples], fit=True)
        self._models = []
        self.__dict__.pop("_weights_saved", None)
        for concept in self.concepts:
            target = np.array([concept in e.concepts for e in examples], dtype=int)
            from sklearn.linear_model import LogisticRegression

            model = LogisticRegression(C=REGULARISATION_C, class_weight="balanced", max_iter=1000, solver=SOLVER)
            model.fit(features, target)
            self._models.append(model)
        return self

    #: Caches of a fitted model, rebuilt on demand and never pickled (see ``__getstate__``).
    _TRANSIENT = ("_stacked", "_sentences_memo")
    #: The scikit-learn objects of a fit: not pickled, so that reading a model back imports no scikit-learn.
    _FITTING = ("_vectorizer", "_models")

    def __getstate__(self) -> dict[str, object]:
        state = {key: value for key, value in self.__dict__.items() if key not in (*self._TRANSIENT, *self._FITTING)}
        if self._models or "_weights_saved" not in state:
            state["_weights_saved"] = self._weights() if self._models else None
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("_vectorizer", None)
        self.__dict__.setdefault("_models", [])

    def _weights(self) -> tuple[np.ndarray, np.ndarray]:
        """Every concept's model as one matrix: (features × concepts) coefficients and the intercepts, so that one
        product scores every concept (one sklearn call per concept cost ~0.2 ms of input checks each, 134 of them
        per text)."""
        stacked = self.__dict__.get("_stacked")
        if stacked is None:
            saved = self.__dict__.get("_weights_saved")
            stacked = saved if saved is not None and not self._models else (
                np.stack([m.coef_[0] for m in self._models], axis=1), np.array([m.intercept_[0] for m in self._models]))
            self.__dict__["_stacked"] = stacked
        return stacked

    @property
    def _fitted(self) -> bool:
        return bool(self._models) or self.__dict__.get("_weights_saved") is not None

    def probabilities(self, texts: Sequence[str]) -> np.ndarray:
        """(texts × concepts) matrix of probabilities; zero columns when nothing was learnt.

        Each concept's binary logistic regression gives ``P = 1 / (1 + exp(-(x·w + b)))`` (what its ``predict_proba``
        computes), all concepts at once from :meth:`_weights`."""
        if not self._fitted or not self.concepts or not texts:
            return np.zeros((len(texts), len(self.concepts)), dtype=np.float32)
        coefficients, intercepts = self._weights()
        features = self._features(texts)
        logits = np.asarray(features @ coefficients) + intercepts
        return np.asarray(np.exp(-np.logaddexp(0.0, -logits)), dtype=np.float32)  # 1 / (1 + e^-x), without overflow

    def _sentence_vectors(self, text: str) -> tuple[list[str], sparse.csr_matrix | None]:
        """``text``'s sentences and their lexical vectors (``None`` when it has no sentence), one transform for all of
        them; the last text's are kept, since the tagger asks for the evidence of several concepts in a row."""
        memo = self.__dict__.get("_sentences_memo")
        if memo is not None and memo[0] == text:
            return memo[1], memo[2]
        found = split_sentences(text)
        vectors = self._lexical(found) if found else None
        self.__dict__["_sentences_memo"] = (text, found, vectors)
        return found, vectors

    def evidence(self, text: str, concept: str) -> str:
        """The sentence of ``text`` whose words weigh most for ``concept`` in the lexical half of the model (the first
        such sentence; a sentence without any known word never counts)."""
        index = self.concepts.index(concept)
        weights = self._weights()[0][: len(self._vocabulary), index]
        found, vectors = self._sentence_vectors(text)
        if vectors is None:  # no sentence
            return ""
        scores = np.asarray(vectors @ weights, dtype=np.float64).ravel()
        scores[np.diff(vectors.indptr) == 0] = -np.inf
        best = int(np.argmax(scores))
        return found[best] if scores[best] > -np.inf else ""


def split_sentences(text: str) -> list[str]:
    import re

    return [s.strip() for s in re.split(r"(?<=[.!?。다])\s+|\n+", text) if s.strip()]
