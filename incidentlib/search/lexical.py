"""BM25 over chunks with the bilingual tokenizer: a term-major sparse matrix, scored with numpy.

Scores follow the Lucene variant of BM25 (the one ``bm25s`` uses by default, and the one
this index was measured with before):

    idf(t)    = ln(1 + (N − df(t) + 0.5) / (df(t) + 0.5))
    w(t, c)   = idf(t) · tf(t, c) / (tf(t, c) + k1 · (1 − b + b · |c| / avg|c|))
    score(c)  = Σ over query tokens t (repeats counted) of w(t, c)

The weights are precomputed into a CSC-like layout (``indptr``/``indices``/``data`` per term,
chunk positions ascending), so a query touches only the postings of its own tokens: no Python
loop runs over chunks, and no per-chunk token lists are kept (matched terms are read back
from the postings).  The arrays can be saved and loaded (:mod:`.lexical_store`), so a warm
start does not tokenize the library again, and after an edit only the new chunks are tokenized
(:func:`update_postings`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import chain, islice, repeat

import numpy as np

from ..cold_pages import announce_cold_slices
from . import token_workers
from .tokenize import tokenize

#: BM25 term-frequency saturation and length normalisation: the usual textbook defaults
#: (k1 = 1.2, b = 0.75), not tuned on this library.
BM25_K1 = 1.2
BM25_B = 0.75
#: Chunks scored as one block (2 MB of float32 scores, which stay in the cache): every query term's postings inside
#: the block are added, and the block is reduced per incident, before the next block.  Adding one term at a time over
#: the whole score array streams it through memory once per term instead (13.5M chunks at 1M incidents: 54 MB, 10-23
#: terms a query).  Blocks of 256K-1M chunks measured alike at 1M incidents; 4M-chunk blocks lost most of the gain
#: (bench/bench_lexical_scores.py).  A library under this size is one block.
SCORE_BLOCK_CHUNKS = 1 << 19
#: A block's chunks above the cut are looked up in its runs one binary search each; reducing the whole block costs one
#: step per run instead.  Above one such chunk for every four runs (the first blocks, before the cut has risen) the
#: whole block is reduced; later blocks have a few hundred chunks above the cut against 40,000 runs.
WHOLE_BLOCK_HITS_PER_RUN = 4
#: Stand-in token of a chunk with no tokens, so every chunk has length ≥ 1 in the average length
#: (the convention the scores were measured with; it can never match a query token).
EMPTY_TOKEN = "∅"


@dataclass(frozen=True)
class Postings:
    """The index arrays: term ``t``'s chunks are ``indices[indptr[t]:indptr[t+1]]`` (ascending), weights in ``data``.

    ``tf`` (the term's count in that chunk, beside each weight) and ``lengths`` (tokens per chunk) are
    what the weights are computed from: kept so that a changed corpus is re-weighted without
    tokenizing the unchanged chunks again (:func:`update_postings`).
    """

    vocabulary: list[str]
    indptr: np.ndarray  # int64, len(vocabulary) + 1
    indices: np.ndarray  # int32 chunk positions
    data: np.ndarray  # float32 BM25 weights
    size: int  # number of chunks
    tf: np.ndarray  # int32 term counts, aligned with indices
    lengths: np.ndarray  # int32 tokens per chunk (≥ 1, see EMPTY_TOKEN)


#: The array fields of :class:`Postings`, by the names the lexical cache gives their files.
ARRAYS = ("indptr", "indices", "data", "tf", "lengths")


def build_postings(texts: Sequence[str], k1: float = BM25_K1, b: float = BM25_B) -> Postings:
    """Tokenize ``texts`` and compute the BM25 weight of every (term, chunk) pair (formula in the module docstring).

    The same postings as :func:`postings_from_tokens` over ``[tokenize(t) for t in texts]`` (term ids in order of
    first occurrence), with the texts tokenized in bulk (:func:`~.tokenize.token_ids`), on several cores for a large
    batch (:mod:`.token_workers`).
    """
    vocabulary: dict[str, int] = {}
    runs, chunk_of_pair, tf, lengths = _count_texts(texts, vocabulary)
    return _weigh_runs(list(vocabulary), runs, chunk_of_pair, tf, lengths, k1, b)


def postings_from_tokens(token_lists: Iterable[list[str]], size: int, k1: float = BM25_K1, b: float = BM25_B) -> Postings:
    """:func:`build_postings` from already tokenized chunks (``size`` of them)."""
    vocabulary: dict[str, int] = {}
    runs, chunk_of_pair, tf, lengths = _count(token_lists, size, vocabulary)
    return _weigh_runs(list(vocabulary), runs, chunk_of_pair, tf, lengths, k1, b)


def update_postings(previous: Postings, previous_keys: Sequence[str], texts: Sequence[str],
                    k1: float = BM25_K1, b: float = BM25_B, keys: Sequence[str] | None = None) -> Postings:
    """The postings of ``texts`` computed from ``previous`` (the postings of the texts ``previous_keys`` name): only
    the texts that were not there before are tokenized; unchanged chunks keep their term counts and move to their
    new positions, removed ones drop out, and every weight is recomputed (N, df and the average length change with
    any edit).  Scores equal those of :func:`build_postings` over ``texts``; the vocabulary may keep terms no chunk
    holds any more (they have no postings and match nothing) until the next full build.

    ``previous_keys[i]`` identifies the text of previous chunk ``i`` and ``keys[j]`` that of ``texts[j]`` (by
    default the texts themselves): equal keys mean equal texts.  A live library passes its chunk digests (a hash
    of each chunk's id and text), so that the unchanged texts are never read: at 100k incidents reading the 1.35M
    texts again took half of a write's re-index (docs/benchmarks.md, "A write at 100k").

    When the chunks kept keep their relative order (a write adds, removes or replaces some incidents' chunks:
    the others stay in id order), each term's kept postings are still in chunk order after the move, and the new
    postings are merged into them (:func:`_merged`): no sort of every posting, and no per-posting term array.
    Otherwise (a reordered corpus) the (term, chunk) pairs are sorted again.
    """
    keys = texts if keys is None else keys
    if len(previous_keys) != previous.size:
        raise ValueError(f"previous postings cover {previous.size} chunks, given {len(previous_keys)} texts")
    if len(keys) != len(texts):
        raise ValueError(f"{len(texts)} texts, given {len(keys)} keys")
    size = len(texts)
    new_position, fresh = _matched(previous_keys, keys)
    vocabulary = {term: index for index, term in enumerate(previous.vocabulary)}
    lengths = np.zeros(size, dtype=np.int32)
    reused = new_position >= 0
    lengths[new_position[reused]] = previous.lengths[reused]
    add_runs, add_local, add_tf, add_lengths = _count_texts([texts[p] for p in fresh], vocabulary)
    add_terms = np.repeat(np.arange(len(add_runs) - 1, dtype=np.int64), np.diff(add_runs))  # the new chunks' pairs: few
    fresh_positions = np.asarray(fresh, dtype=np.int64)
    lengths[fresh_positions] = add_lengths
    if size and bool(np.all(np.diff(new_position[reused]) > 0)):
        return _merged(previous, new_position, list(vocabulary), add_terms, fresh_positions[add_local], add_tf,
                       lengths, k1, b)
    old_terms = np.repeat(np.arange(len(previous.vocabulary), dtype=np.int64), np.diff(previous.indptr))
    moved = new_position[previous.indices]
    kept = moved >= 0
    return _weigh(list(vocabulary),
                  np.concatenate([old_terms[kept], add_terms]),
                  np.concatenate([moved[kept], fresh_positions[add_local]]),
                  np.concatenate([previous.tf[kept], add_tf]), lengths, k1, b)


def _matched(previous_keys: Sequence[str], keys: Sequence[str]) -> tuple[np.ndarray, list[int]]:
    """Where each previous chunk went (-1: removed) and the positions of the chunks that are new.  A key met several
    times is matched occurrence by occurrence, in order (the ``i``-th new one takes the ``i``-th previous one).

    Unique keys (chunk digests) are matched by one dictionary built and read in C (about 0.4 s for 1.35M chunks, where
    the general loop below takes about 4 s); repeated keys (texts, as tests give them) take the loop."""
    new_position = np.full(len(previous_keys), -1, dtype=np.int64)
    index = dict(zip(previous_keys, range(len(previous_keys)), strict=True))
    if len(index) == len(previous_keys):
        old_of_new = np.fromiter(map(index.get, keys, repeat(-1)), dtype=np.int64, count=len(keys))
        matched = old_of_new >= 0
        new_position[old_of_new[matched]] = np.flatnonzero(matched)
        if np.count_nonzero(new_position >= 0) == np.count_nonzero(matched):  # no previous chunk taken twice
            return new_position, np.flatnonzero(~matched).tolist()
        new_position[:] = -1
    del index
    free: dict[str, list[int]] = {}
    for position in range(len(previous_keys) - 1, -1, -1):  # popped in ascending order below
        free.setdefault(previous_keys[position], []).append(position)
    fresh: list[int] = []
    for position, key in enumerate(keys):
        slots = free.get(key)
        if slots:
            new_position[slots.pop()] = position
        else:
            fresh.append(position)
    return new_position, fresh


def _merged(previous: Postings, new_position: np.ndarray, vocabulary: list[str], add_terms: np.ndarray,
            add_chunks: np.ndarray, add_tf: np.ndarray, lengths: np.ndarray, k1: float, b: float) -> Postings:
    """:func:`update_postings` when the kept chunks keep their order: the previous postings, moved to their chunks'
    new positions with the removed ones left out, and the new (term, chunk, count) triples (term-major, chunks
    ascending) inserted where they belong in their terms' runs, then weighed."""
    terms, size = len(vocabulary), len(lengths)
    moved = new_position.astype(np.int32)[previous.indices]  # positions fit int32 as the indices do
    kept = moved >= 0
    gone = np.flatnonzero(~kept)  # few after a write: counted per term by where they fall in indptr
    per_term = np.zeros(terms, dtype=np.int64)
    per_term[: len(previous.vocabulary)] = np.diff(previous.indptr)
    per_term -= np.bincount(np.searchsorted(previous.indptr, gone, side="right") - 1, minlength=terms)
    del gone
    indices, tf = (moved[kept], previous.tf[kept]) if not bool(kept.all()) else (moved, np.asarray(previous.tf))
    del moved, kept
    kept_indptr = np.zeros(terms + 1, dtype=np.int64)
    np.cumsum(per_term, out=kept_indptr[1:])
    at = np.empty(len(add_terms), dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, add_terms[1:] != add_terms[:-1]]).tolist() if len(add_terms) else []
    ends = [*starts[1:], len(add_terms)] if starts else []
    for lo, hi in zip(starts, ends, strict=True):  # one binary search per new term
        term = int(add_terms[lo])
        first, last = int(kept_indptr[term]), int(kept_indptr[term + 1])
        at[lo:hi] = first + np.searchsorted(indices[first:last], add_chunks[lo:hi])
    indices = np.insert(indices, at, add_chunks.astype(np.int32))
    tf = np.insert(tf, at, add_tf.astype(np.int32))
    per_term += np.bincount(add_terms, minlength=terms)
    indptr = np.zeros(terms + 1, dtype=np.int64)
    np.cumsum(per_term, out=indptr[1:])

    weights = _bm25_weights(per_term, size, lengths, tf, indices, partial(_run_terms, indptr), k1, b)
    return Postings(vocabulary, indptr, indices, weights, size, tf, lengths)


def _run_terms(indptr: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """The term of each of postings ``lo..hi``, from the run offsets ``indptr`` (term ``t``'s postings are
    ``indptr[t]:indptr[t+1]``): one block's terms, never one array for every posting."""
    first = int(np.searchsorted(indptr, lo, side="right")) - 1
    last = int(np.searchsorted(indptr, hi, side="left"))
    runs = np.diff(np.clip(indptr[first:last + 1], lo, hi)).astype(np.int64)
    return np.repeat(np.arange(first, first + len(runs), dtype=np.int64), runs)


def _bm25_weights(per_term: np.ndarray, size: int, lengths: np.ndarray, tf: np.ndarray, chunk_of_pair: np.ndarray,
                  term_ids: Callable[[int, int], np.ndarray], k1: float, b: float,
                  out: np.ndarray | None = None) -> np.ndarray:
    """The float32 weight of every posting (formula in the module docstring), a block of postings at a time:
    ``idf`` per term and the length normalisation per chunk, gathered per posting (``term_ids(lo, hi)``: the terms
    of postings ``lo..hi``), in float64; written into ``out`` when given (e.g. a mapped file)."""
    df = per_term.astype(np.float64)
    idf = np.log(1.0 + (size - df + 0.5) / (df + 0.5))
    average = float(lengths.mean())
    saturation = k1 * (1.0 - b + b * lengths / average)
    weights = np.empty(len(tf), dtype=np.float32) if out is None else out
    for lo in range(0, len(tf), WEIGH_BLOCK):  # float64 temporaries per block, the float32 result written in place
        hi = min(lo + WEIGH_BLOCK, len(tf))
        frequency = tf[lo:hi].astype(np.float64)
        weight = idf[term_ids(lo, hi)]
        weight *= frequency
        frequency += saturation[chunk_of_pair[lo:hi]]
        weight /= frequency
        weights[lo:hi] = weight
    return weights


#: Chunks whose tokens are numbered per pass of :func:`_count`: the token lists of one batch are held at a time
#: (~15 MB), while the per-batch Python overhead (a few C-level calls) stays negligible against ~100 tokens a chunk.
COUNT_BATCH = 16384
_EMPTY_CHUNK = [EMPTY_TOKEN]


def _count(token_lists: Iterable[list[str]], size: int, vocabulary: dict[str, int]
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_pairs` of the chunks' tokens (every distinct (term, chunk) pair with its count, term-major) and each
    chunk's length; new terms are added to ``vocabulary``.

    Tokens are numbered by C-level dictionary look-ups into a flat int32 array, which :func:`_pairs` counts per
    (term, chunk).
    """
    ids: list[np.ndarray] = []  # int32 (4 bytes a token; term ids stay below 2**31), one array per batch
    lengths: list[np.ndarray] = [np.zeros(0, dtype=np.int32)]
    numbering = _Numbering(vocabulary)
    term_id = numbering.__getitem__  # C-level lookups per token; only a new term runs Python code
    source = iter(token_lists)
    while batch := [found or _EMPTY_CHUNK for found in islice(source, COUNT_BATCH)]:
        lengths.append(np.fromiter(map(len, batch), dtype=np.int32, count=len(batch)))
        ids.append(np.fromiter(map(term_id, chain.from_iterable(batch)), dtype=np.int32))
    vocabulary.update(numbering)
    chunk_lengths = np.concatenate(lengths)
    if len(chunk_lengths) != size:
        raise ValueError(f"size is {size} but {len(chunk_lengths)} token lists were given")
    return _pairs(ids, chunk_lengths)


#: Tokens whose first occurrences are found per step of :func:`_count_texts` (int64 positions: 32 MB a step).
FIRST_SEEN_BLOCK = 1 << 22


def _count_texts(texts: Sequence[str], vocabulary: dict[str, int], tokenizing: token_workers.Tokenizing | None = None,
                 tokenized: Callable[[], None] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_count` of ``[tokenize(t) for t in texts]``, with the texts tokenized in bulk.

    :func:`~.tokenize.token_ids` numbers terms in an order of its own; the new terms are then renumbered in the
    order of their first occurrence among the tokens (the numbering :func:`_count` gives), so the vocabulary and
    the postings equal those of the per-text path.  ``tokenizing``, when given, is the tokenizing of ``texts``
    already started (its workers at work); ``tokenized`` is called once the token ids are in, before the pairs are
    counted (a build in segments starts the next segment's workers there).
    """
    numbering = _Numbering(vocabulary)
    known = len(vocabulary)
    # several processes for a large batch
    ids, lengths = (tokenizing or token_workers.Tokenizing(texts)).ids(numbering.__getitem__)
    if tokenized is not None:
        tokenized()
    empty = np.flatnonzero(lengths == 0)
    if len(empty):
        offsets = np.cumsum(lengths, dtype=np.int64) - lengths
        ids = np.insert(ids, offsets[empty], np.int32(numbering[EMPTY_TOKEN]))
        lengths[empty] = 1
    new_terms = list(numbering)[known:]
    if new_terms:
        first = np.full(len(new_terms), len(ids), dtype=np.int64)
        for start in range(0, len(ids), FIRST_SEEN_BLOCK):
            block = ids[start:start + FIRST_SEEN_BLOCK]
            fresh = np.flatnonzero(block >= known)
            np.minimum.at(first, block[fresh] - known, fresh + start)
        order = np.argsort(first, kind="stable")
        order = order[first[order] < len(ids)]  # a term numbered for a token no text kept is left out
        renumber = np.arange(known + len(new_terms), dtype=np.int32)
        renumber[known + order] = np.arange(known, known + len(order), dtype=np.int32)
        ids = token_workers.relabel_in_place(ids, renumber)
        vocabulary.update((new_terms[i], known + rank) for rank, i in enumerate(order.tolist()))
    if len(lengths) != len(texts):
        raise AssertionError(f"{len(lengths)} token counts for {len(texts)} texts")
    batches = [ids]
    del ids  # _pairs frees the token ids once the sort keys hold them
    return _pairs(batches, lengths)


#: (term, chunk) pairs weighed per step of :func:`_weigh`: each step's float64 temporaries are a few MB, where doing
#: it in one step held one float64 temporary per pair (about 0.6 GB at 1.35M chunks).
WEIGH_BLOCK = 1 << 20


#: Tokens from which :func:`_pairs` counts with scipy's sparse matrices: importing them costs a short command (the
#: first search of a small library builds its index) more than sorting a few hundred thousand keys does, and a
#: search imports no SciPy module otherwise (tests/test_startup.py).
SPARSE_COUNT_TOKENS = 1 << 21


def _pairs_by_sort(tokens: np.ndarray, chunk_lengths: np.ndarray, terms: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_pairs` for a few tokens, with numpy alone: each token becomes the key ``term << shift | chunk``, one
    sort puts equal pairs side by side, term-major with chunks ascending, and a run's length is the pair's count."""
    size = len(chunk_lengths)
    shift = max(1, (size - 1).bit_length())
    keys = (tokens.astype(np.int64) << shift) | np.repeat(np.arange(size, dtype=np.int64), chunk_lengths)
    keys.sort(kind="stable")
    first = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    tf = np.diff(np.r_[first, len(keys)]).astype(np.int32)
    distinct = keys[first]
    runs = np.zeros(terms + 1, dtype=np.int64)
    np.cumsum(np.bincount(distinct >> shift, minlength=terms), out=runs[1:])
    return runs, (distinct & ((1 << shift) - 1)).astype(np.int32), tf, chunk_lengths


def _pairs(ids: list[np.ndarray], chunk_lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every distinct (term, chunk) pair with its count, term-major with chunks ascending, from the term ids of every
    token (chunk by chunk) and each chunk's number of tokens: the run offsets by term (term ``t``'s pairs are
    ``runs[t]:runs[t+1]``, for the terms up to the largest id given), the chunk and the count of each pair (int32),
    and the chunk lengths.

    The tokens already come grouped by chunk, so they are a chunk-by-term sparse matrix with a 1 per token (CSR:
    the chunk lengths are its row offsets, the token ids its column indices, nothing copied); scipy turns it
    term-major with a counting sort (``tocsc``), which visits the chunks in order, so a term's chunks come ascending
    with a chunk's repeats of the term side by side, and adds up the repeats in one linear pass (``sum_duplicates``:
    the term counts).  No step sorts: summing first, per chunk, sorted each chunk's ~100 terms, three quarters of the
    step's CPU time at 100k incidents (docs/benchmarks.md, "Seventh pass").  On 127.6M random term ids the sparse
    path took half the time of one sort of every (term, chunk) key on two threads and a third of its peak memory
    ("Fifth pass").

    Below :data:`SPARSE_COUNT_TOKENS` tokens the same counts come from one sort of numpy keys
    (:func:`_pairs_by_sort`).

    ``ids`` is emptied: its arrays are freed as soon as the matrix holds them.
    """
    size = len(chunk_lengths)
    tokens = ids[0] if len(ids) == 1 else np.concatenate(ids) if ids else np.zeros(0, dtype=np.int32)
    ids.clear()
    if not size or not len(tokens):
        return np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32), chunk_lengths
    terms = int(tokens.max()) + 1
    if len(tokens) < SPARSE_COUNT_TOKENS:
        return _pairs_by_sort(tokens, chunk_lengths, terms)
    from scipy import sparse  # type: ignore[import-untyped]  # here: a short command's small build never imports it

    # row offsets in the token ids' own width when they fit, so scipy takes the ids as they are instead of a copy
    width = np.int32 if len(tokens) < 2**31 else np.int64
    offsets = np.zeros(size + 1, dtype=width)
    np.cumsum(chunk_lengths, out=offsets[1:], dtype=width)
    by_chunk = sparse.csr_matrix((np.ones(len(tokens), dtype=np.int32), tokens, offsets), shape=(size, terms), copy=False)
    del tokens, offsets
    # term-major first: the counting sort visits the chunks in order, so within a term its chunks come ascending and a
    # chunk's repeats of the term side by side, and summing them is one linear pass (no sort of each chunk's terms)
    by_term = by_chunk.tocsc()
    del by_chunk
    by_term.has_sorted_indices = True  # true of a counting sort's output, whatever the scipy version records
    by_term.sum_duplicates()
    return by_term.indptr.astype(np.int64, copy=False), by_term.indices, by_term.data, chunk_lengths


class _Numbering(dict[str, int]):
    """A term numbering that gives an unseen term the next number when it is first looked up."""

    def __missing__(self, term: str) -> int:
        number = len(self)
        self[term] = number
        return number


def _weigh(vocabulary: list[str], term_of_pair: np.ndarray, chunk_of_pair: np.ndarray, tf: np.ndarray,
           lengths: np.ndarray, k1: float, b: float) -> Postings:
    """Postings from (term, chunk, count) triples in any order: grouped by term, chunks ascending, BM25-weighted.

    ``idf`` is computed per term and the length normalisation per chunk, then gathered per pair: the same
    float64 operations in the same order as computing both per pair, on ``terms + chunks`` values instead of
    one per pair.
    """
    terms, size = len(vocabulary), len(lengths)
    if not size:
        return Postings([], np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float32), 0,
                        np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32))
    if len(term_of_pair) > 1:
        keys = term_of_pair * size + chunk_of_pair
        if not bool(np.all(keys[1:] > keys[:-1])):
            order = np.argsort(keys, kind="stable")
            term_of_pair, chunk_of_pair, tf = term_of_pair[order], chunk_of_pair[order], tf[order]
        del keys
    per_term = np.bincount(term_of_pair, minlength=terms)
    weights = _bm25_weights(per_term, size, lengths, tf, chunk_of_pair, lambda lo, hi: term_of_pair[lo:hi], k1, b)
    indptr = np.zeros(terms + 1, dtype=np.int64)
    np.cumsum(per_term, out=indptr[1:])
    return Postings(vocabulary, indptr, chunk_of_pair.astype(np.int32, copy=False), weights, size,
                    tf.astype(np.int32, copy=False), lengths.astype(np.int32, copy=False))


def _weigh_runs(vocabulary: list[str], runs: np.ndarray, chunk_of_pair: np.ndarray, tf: np.ndarray, lengths: np.ndarray,
                k1: float, b: float) -> Postings:
    """Postings from :func:`_pairs`' term-major pairs (``runs``: their offsets by term), BM25-weighted: the result
    :func:`_weigh` gives for the same pairs, without a term id per pair."""
    terms, size = len(vocabulary), len(lengths)
    if not size:
        return _weigh(vocabulary, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32),
                      lengths, k1, b)
    indptr = np.full(terms + 1, runs[-1], dtype=np.int64)  # terms no token holds (above the largest id) hold nothing
    indptr[: len(runs)] = runs
    per_term = np.diff(indptr)
    weights = _bm25_weights(per_term, size, lengths, tf, chunk_of_pair, partial(_run_terms, indptr), k1, b)
    return Postings(vocabulary, indptr, chunk_of_pair.astype(np.int32, copy=False), weights, size,
                    tf.astype(np.int32, copy=False), lengths.astype(np.int32, copy=False))


class LexicalIndex:
    """Scores every chunk for a query; filtering is a mask applied before ranking."""

    def __init__(self, texts: Sequence[str] | None = None, k1: float = BM25_K1, b: float = BM25_B,
                 postings: Postings | None = None) -> None:
        """From ``texts`` (tokenized here) or from ready ``postings`` (loaded, or updated after a change)."""
        if postings is None:
            postings = build_postings(texts or [], k1, b)
        self.postings = postings
        self._term = {token: i for i, token in enumerate(postings.vocabulary)}

    def __len__(self) -> int:
        return self.postings.size

    def _token_ids(self, query: str) -> list[int]:
        return [self._term[token] for token in tokenize(query) if token in self._term]

    def term_counts(self, query: str) -> dict[int, int]:
        """Known query tokens by term id, with how often each occurs (:meth:`scores` adds ``count(t) · w(t, c)``)."""
        counts: dict[int, int] = {}
        for term in self._token_ids(query):
            counts[term] = counts.get(term, 0) + 1
        return counts

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every chunk (zeros when no query token is known)."""
        return self.run_scores(query, None)[0]

    def run_scores(self, query: str, run_starts: np.ndarray | None, depth: int | None = None,
                   run_allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """BM25 score of every chunk and, when ``run_starts`` is given, each run's best score.

        Runs are consecutive chunks (an incident's), starting at ``run_starts`` (ascending, the first at chunk 0);
        the best scores equal ``np.maximum.reduceat(scores, run_starts)``.  The chunks are scored a block of whole
        runs at a time (:data:`SCORE_BLOCK_CHUNKS`), each block reduced while its scores are in the cache.  Within a
        chunk the terms are added in query order, as one term at a time over every chunk would add them, so the
        float32 sums are the same bit for bit.

        With ``depth``, only the runs that can rank among the ``depth`` best are sure to be reduced: the best score
        of every run that is, among the runs ``run_allowed`` allows (all by default), one of the ``depth`` largest
        positive ones (ties going to the earlier run) is exact; any other run's is exact or 0.  The ``depth``-th
        best score of the blocks already reduced, ``θ``, only rises, and a run of a later block can only pass the
        runs counted there with a chunk scoring above ``θ`` (a tie goes to the earlier run), so only such chunks'
        runs are reduced (:class:`_RunCut`).
        """
        p = self.postings
        terms = self._token_ids(query)
        announce_cold_slices(p.indptr, (p.indices, p.data), np.unique(np.asarray(terms, dtype=np.int64)))
        scores = np.empty(p.size, dtype=np.float32)
        best = None if run_starts is None else np.zeros(len(run_starts), dtype=np.float32)
        edges, block_runs = _blocks(run_starts, p.size)
        # each term's postings cut at the block edges (they are in chunk order): a binary search per edge
        cuts = [int(p.indptr[term]) + np.searchsorted(p.indices[p.indptr[term]:p.indptr[term + 1]], edges)
                for term in terms]
        cut = _RunCut(depth, run_allowed)
        for block in range(len(edges) - 1):
            low, high = int(edges[block]), int(edges[block + 1])
            scores[low:high] = 0.0
            for term_cut in cuts:
                start, end = int(term_cut[block]), int(term_cut[block + 1])
                # one pass adding in place, where ``scores[idx] += w`` gathers, adds and scatters back through a
                # temporary (0.52-0.60x the time at 100k and 1M incidents, bench/bench_lexical_scores.py); a term's
                # chunks are distinct, so both add each posting once, in order
                np.add.at(scores, p.indices[start:end], p.data[start:end])
            if best is not None and run_starts is not None and block_runs is not None:
                first, last = int(block_runs[block]), int(block_runs[block + 1])
                cut.reduce(scores[low:high], run_starts[first:last] - low, first, best)
        return scores, best

    def contains(self, term: int, chunk_index: int) -> bool:
        """Whether token id ``term`` occurs in chunk ``chunk_index`` (binary search in its postings)."""
        p = self.postings
        start, end = int(p.indptr[term]), int(p.indptr[term + 1])
        at = start + int(np.searchsorted(p.indices[start:end], chunk_index))
        return at < end and int(p.indices[at]) == chunk_index

    def most_matched(self, query: str, chunk_indexes: Sequence[int]) -> int | None:
        """The first of ``chunk_indexes`` holding the most distinct query tokens (as :meth:`matched_terms` counts
        them); None when none holds any.  The query is tokenized once for all of them."""
        terms = [term for token in dict.fromkeys(tokenize(query))
                 if (term := self._term.get(token)) is not None and not _is_fragment(token, query)]
        best, best_count = None, 0
        for chunk_index in chunk_indexes:
            count = sum(self.contains(term, chunk_index) for term in terms)
            if count > best_count:
                best, best_count = chunk_index, count
        return best

    def matched_terms(self, query: str, chunk_index: int) -> list[str]:
        """Query tokens that occur in one chunk, in query order (bigram fragments left out)."""
        seen: dict[str, None] = {}
        for token in tokenize(query):
            term = self._term.get(token)
            if term is not None and token not in seen and not _is_fragment(token, query) and self.contains(term, chunk_index):
                seen[token] = None
        return list(seen)


class _RunCut:
    """Each block's runs reduced to their best score, and ``θ``: the ``depth``-th largest positive best score of the
    allowed runs reduced so far (0 until there are ``depth`` of them, or with no ``depth``: then every run is reduced).

    Runs arrive in order, so a run of a later block ranks among the ``depth`` best only with a chunk scoring above
    ``θ``: only those chunks' runs are reduced, unless they are many (the first blocks, before ``θ`` rises)."""

    def __init__(self, depth: int | None, allowed: np.ndarray | None) -> None:
        self.depth = depth if depth is None or depth > 0 else None  # no depth to cut at: every run reduced
        self.allowed = allowed
        self.top = np.zeros(0, dtype=np.float32)  # the depth largest counted so far
        self.theta = 0.0

    def reduce(self, scores: np.ndarray, starts: np.ndarray, first: int, best: np.ndarray) -> None:
        """Reduce the runs starting at ``starts`` in ``scores`` (one block; they are runs ``first``... of ``best``)."""
        hits = np.flatnonzero(scores > self.theta) if self.depth is not None else None
        if hits is None or len(hits) * WHOLE_BLOCK_HITS_PER_RUN > len(starts):
            maxima = np.maximum.reduceat(scores, starts) if len(starts) else np.zeros(0, dtype=np.float32)
            best[first:first + len(starts)] = maxima
            runs = np.arange(first, first + len(starts))
        elif len(hits):
            run_of_hit = np.searchsorted(starts, hits, side="right") - 1
            inside = run_of_hit >= 0  # chunks before the first run are in no run (as reduceat leaves them)
            hits, run_of_hit = hits[inside], run_of_hit[inside]
            if not len(hits):
                return
            group_starts = np.flatnonzero(np.r_[True, run_of_hit[1:] != run_of_hit[:-1]])
            maxima = np.maximum.reduceat(scores[hits], group_starts)
            runs = first + run_of_hit[group_starts]
            best[runs] = maxima
        else:
            return
        if self.depth is None:
            return
        counted = maxima > self.theta
        if self.allowed is not None:
            counted &= self.allowed[runs]
        self.top = np.concatenate([self.top, maxima[counted]])
        if len(self.top) > self.depth:
            self.top = np.partition(self.top, len(self.top) - self.depth)[len(self.top) - self.depth:]
        if len(self.top) >= self.depth > 0:
            self.theta = float(self.top.min())


def _blocks(run_starts: np.ndarray | None, size: int) -> tuple[np.ndarray, np.ndarray | None]:
    """The score blocks' edges in chunks (from 0 to ``size``) and, with runs, the index of each block's first run
    (ending with the number of runs).  A block starts at the first run at or after each multiple of
    :data:`SCORE_BLOCK_CHUNKS`, so a run is never split between blocks."""
    multiples = np.arange(0, size, SCORE_BLOCK_CHUNKS, dtype=np.int64)
    if run_starts is None or not len(run_starts) or not size:
        return np.append(multiples, size), None
    first_runs = np.unique(np.searchsorted(run_starts, multiples, side="left"))  # the first is run 0
    first_runs = first_runs[first_runs < len(run_starts)]
    edges = run_starts[first_runs].astype(np.int64)
    edges[0] = 0  # chunks before the first run are scored in the first block, and in no run (as reduceat leaves them)
    return np.append(edges, size), np.append(first_runs, len(run_starts))


def _is_fragment(token: str, query: str) -> bool:
    # Hangul bigrams are matching aids, and runs of zeros (PCI addresses) carry no meaning:
    # neither is a word a user would recognise as "matched".
    if len(token) < 2 or set(token) == {"0"}:
        return True
    return len(token) == 2 and all("\uac00" <= ch <= "\ud7a3" for ch in token) and token not in query.split()
