"""The BM25 postings of a very large corpus, counted a segment of chunks at a time and merged into files.

The one-pass build (:func:`~.lexical.build_postings`) holds every token id and every (term, chunk) pair in memory:
at 6.7M chunks (half of 1M incidents) it added 13.6 GB to the building process and 5.2 GB to its tokenizing worker
(docs/benchmarks.md), so 1M incidents would not fit on a 24 GB machine.  Here:

1. the chunks are counted :data:`SEGMENT_CHUNKS` at a time by the same code (:func:`~.lexical._count_texts`), with
   one term numbering shared by the segments, so every term gets the id of its first occurrence in the whole
   corpus, as in the one-pass build; each segment's term-major pairs (its run offsets by term, each pair's chunk
   and count) go to scratch files and leave memory.  The next segment's tokenizing workers start as soon as a
   segment's token ids are in, so they work while this process counts that segment's pairs, which it does alone
   (:class:`~.token_workers.Tokenizing`);
2. the pairs of all segments are merged term by term into the final arrays, which are ``.npy`` files written
   through a memory map: term ``t``'s postings are its postings of segment 0, then of segment 1, … — chunks stay
   ascending within a term, since the segments are in chunk order;
3. the weights are computed last, from the whole corpus's ``df``, chunk count and average length, in a pass of their
   own over the placed arrays.  (Computed in the merge as each block was placed, they took longer at 1M incidents:
   the merge's third scattered write cost more than the sequential pass, 66.2 against 60.2 s for both; see
   docs/benchmarks.md.)  A segment's scratch files are deleted once it is merged.

The result equals the one-pass build's array for array (``tests/test_lexical_segments.py``).  What it holds at
once is one segment's build and a block of the merge (:data:`MERGE_BLOCK` pairs); the final arrays live in the page
cache, written to the files they will be served from.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import numpy as np

from . import token_workers
from .lexical import BM25_B, BM25_K1, Postings, _bm25_weights, _count_texts, _run_terms

#: Chunks counted per segment: the one-pass build of 1.35M chunks (the 100k library) added 1.7 GB to the building
#: process and 1.0 GB to its worker, so a segment of this size keeps the build under about 3 GB on each of the two,
#: where a million incidents are ten times that many chunks.  Below it, a corpus is built in one pass.
SEGMENT_CHUNKS = 1 << 21
#: Pairs placed per step of the merge: its int64 temporaries are a few tens of MB.
MERGE_BLOCK = 1 << 22


def build_postings_in_segments(texts: Sequence[str], folder: Path, segment_chunks: int = SEGMENT_CHUNKS,
                               k1: float = BM25_K1, b: float = BM25_B,
                               progress: Callable[[int, int], None] | None = None) -> Postings:
    """The postings of ``texts`` (what :func:`~.lexical.build_postings` gives), their arrays written to
    ``folder/<name>.npy`` for each name of :data:`~.lexical.ARRAYS` and returned memory-mapped.  ``folder`` must be a new
    folder of the caller's (it makes it); a ``segments`` folder inside holds the scratch files while the build runs.
    ``progress(chunks counted, chunks)`` is called after each segment."""
    if segment_chunks < 1:
        raise ValueError(f"segment_chunks must be at least 1, not {segment_chunks}")
    folder.mkdir(parents=True, exist_ok=False)
    scratch = folder / "segments"
    scratch.mkdir()
    vocabulary: dict[str, int] = {}
    lengths_parts: list[np.ndarray] = []
    runs_parts: list[np.ndarray] = []
    size = len(texts)
    following: list[token_workers.Tokenizing] = []  # the next segment's tokenizing, once started

    def start_following(start: int) -> None:
        if start < size:
            following.append(token_workers.Tokenizing(texts[start:start + segment_chunks]))

    try:
        for number, start in enumerate(range(0, size, segment_chunks)):
            current = following.pop() if following else token_workers.Tokenizing(texts[start:start + segment_chunks])
            runs, chunk_of_pair, tf, lengths = _count_texts(current.texts, vocabulary, current,
                                                            partial(start_following, start + segment_chunks))
            del current
            np.save(scratch / f"{number}-chunks.npy", chunk_of_pair.astype(np.int32, copy=False))
            np.save(scratch / f"{number}-tf.npy", tf.astype(np.int32, copy=False))
            del chunk_of_pair, tf
            runs_parts.append(runs)
            lengths_parts.append(lengths.astype(np.int32, copy=False))
            if progress is not None:
                progress(min(start + segment_chunks, size), size)
    finally:
        for tokenizing in following:  # interrupted with the next segment's workers started
            tokenizing.discard()
    terms = len(vocabulary)
    per_term = np.zeros(terms, dtype=np.int64)
    for runs in runs_parts:
        per_term[: len(runs) - 1] += np.diff(runs)
    indptr = np.zeros(terms + 1, dtype=np.int64)
    np.cumsum(per_term, out=indptr[1:])
    pairs = int(indptr[-1])
    lengths_all = np.concatenate(lengths_parts) if lengths_parts else np.zeros(0, dtype=np.int32)
    np.save(folder / "indptr.npy", indptr)
    np.save(folder / "lengths.npy", lengths_all)
    if not pairs:  # nothing to map (a file of no values cannot be mapped)
        shutil.rmtree(scratch)
        empty = np.zeros(0, dtype=np.int32)
        for name, array in (("indices", empty), ("tf", empty), ("data", np.zeros(0, dtype=np.float32))):
            np.save(folder / f"{name}.npy", array)
        return Postings(list(vocabulary), indptr, empty, np.zeros(0, dtype=np.float32), size, empty, lengths_all)
    indices = np.lib.format.open_memmap(folder / "indices.npy", mode="w+", dtype=np.int32, shape=(pairs,))
    tf_all = np.lib.format.open_memmap(folder / "tf.npy", mode="w+", dtype=np.int32, shape=(pairs,))
    data = np.lib.format.open_memmap(folder / "data.npy", mode="w+", dtype=np.float32, shape=(pairs,))
    cursor = indptr[:-1].copy()  # where each term's next postings go
    for number, runs in enumerate(runs_parts):
        offset = number * segment_chunks
        chunks = np.load(scratch / f"{number}-chunks.npy", mmap_mode="r")
        counts = np.load(scratch / f"{number}-tf.npy", mmap_mode="r")
        shift = cursor[: len(runs) - 1] - runs[:-1]  # pair j of term t goes to cursor[t] + (j - runs[t])
        for lo in range(0, len(chunks), MERGE_BLOCK):
            hi = min(lo + MERGE_BLOCK, len(chunks))
            places = shift[_run_terms(runs, lo, hi)] + np.arange(lo, hi, dtype=np.int64)
            indices[places] = chunks[lo:hi] + np.int32(offset)
            tf_all[places] = counts[lo:hi]
        cursor[: len(runs) - 1] += np.diff(runs)
        del chunks, counts
        # a merged segment's scratch files go at once: the placed files grow by 8 bytes a pair as they shrink by 8, so
        # the disk never holds much more than the final files (all the scratch files and the placed ones together
        # were 16 GB at 1M incidents)
        for part in ("chunks", "tf"):
            (scratch / f"{number}-{part}.npy").unlink()
    shutil.rmtree(scratch)
    if size:
        _bm25_weights(per_term, size, lengths_all, tf_all, indices, partial(_run_terms, indptr), k1, b, out=data)
    for array in (indices, tf_all, data):
        array.flush()
    return Postings(list(vocabulary), indptr, indices, data, size, tf_all, lengths_all)
