"""Tokenizing a large batch of texts on several cores: :func:`~.tokenize.token_ids` split between processes.

Tokenizing is five sixths of a BM25 build from texts (41 µs of ~50 µs a chunk at 433,100 chunks,
docs/benchmarks.md), and it is Python work that one process does on one core. :func:`token_ids` gives
contiguous shares of the texts to worker processes (new interpreters running :data:`_WORKER`: texts in and
token ids out through pipes, pickled) and tokenizes the first share itself meanwhile. Each worker numbers
its terms on its own; its numbers are then mapped to the caller's through ``term_id``, once per distinct term,
and its ids rewritten with one array look-up. The result is the same as one :func:`~.tokenize.token_ids` call
over all the texts: the same tokens in the same order, numbered by the same ``term_id`` (which may be called in
another order and for terms no text ends up holding, as that function already allows).

The workers are new interpreters, not forks: a fork of a process with threads (a server's) may deadlock, and a
``multiprocessing`` spawn would import the caller's main script again. A worker that fails (killed, out of
memory) costs time, not the result: its share is tokenized here instead, with a warning.
"""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
from collections.abc import Callable, Sequence

import numpy as np

from . import tokenize
from .cores import usable_cores

log = logging.getLogger(__name__)

#: Texts below which one process tokenizes everything: a worker costs ~0.5 s to start (an interpreter importing
#: numpy and the tokenizer) and ~0.1 s to receive 10k texts, against ~2 s saved for 100k texts at ~41 µs a text.
PARALLEL_MIN_TEXTS = 100_000
#: Worker processes at most, a bound on the build's memory: each holds its share of the texts twice (pickled, then as
#: strings) and their token ids, and the building process renumbers every worker's ids alone.
MAX_WORKERS = 3
#: Environment variable that sets the number of worker processes (0: tokenize in this process only).
WORKERS_ENV = "INCIDENTLIB_TOKEN_WORKERS"


def default_workers() -> int:
    """:data:`WORKERS_ENV` if set, else one fewer than the cores this process may use (at most :data:`MAX_WORKERS`)."""
    configured = os.environ.get(WORKERS_ENV)
    if configured is not None:
        try:
            workers = int(configured)
        except ValueError:
            raise ValueError(f"{WORKERS_ENV}={configured!r}: expected a whole number of worker processes") from None
        if workers < 0:
            raise ValueError(f"{WORKERS_ENV}={configured!r}: the number of worker processes cannot be negative")
        return workers
    return max(0, min(MAX_WORKERS, usable_cores() - 1))


def token_ids(texts: Sequence[str], term_id: Callable[[str], int], workers: int | None = None,
              min_texts: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`~.tokenize.token_ids` of ``texts``, with ``workers`` other processes (default
    :func:`default_workers`) taking equal contiguous shares when there are at least ``min_texts`` texts (default
    :data:`PARALLEL_MIN_TEXTS`)."""
    workers = default_workers() if workers is None else workers
    least = PARALLEL_MIN_TEXTS if min_texts is None else min_texts
    if workers <= 0 or len(texts) < max(least, workers + 1):
        return tokenize.token_ids(texts, term_id)
    bounds = np.linspace(0, len(texts), workers + 2).round().astype(int).tolist()
    shares = [list(texts[bounds[i]:bounds[i + 1]]) for i in range(workers + 1)]
    started: list[subprocess.Popen[bytes] | None] = []
    try:
        started.extend(_start(share) for share in shares[1:])
        parts = [tokenize.token_ids(shares[0], term_id)]
        for share, worker in zip(shares[1:], started, strict=True):
            parts.append(_collect(worker, share, term_id))
    except BaseException:  # interrupted (or a bad text): no worker is left running
        for worker in started:
            if worker is not None and worker.poll() is None:
                worker.kill()
                worker.wait()
        raise
    ids = np.concatenate([part[0] for part in parts])
    lengths = np.concatenate([part[1] for part in parts])
    return ids, lengths


def _start(share: list[str]) -> subprocess.Popen[bytes] | None:
    """A worker given ``share`` (written to its standard input), or ``None`` when it could not be started."""
    if not sys.executable:  # an embedded interpreter may not know its own program
        log.warning("no Python executable to start a tokenizing worker with: tokenizing its %d texts here", len(share))
        return None
    command = [sys.executable, "-P", "-c", _WORKER, tokenize.__file__]  # -P: the working folder shadows no module
    try:
        worker = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as error:
        log.warning("could not start a tokenizing worker (%s): tokenizing its %d texts here", error, len(share))
        return None
    assert worker.stdin is not None
    try:
        with worker.stdin:
            pickle.dump(share, worker.stdin, protocol=pickle.HIGHEST_PROTOCOL)
    except OSError as error:  # the worker died before reading everything: _collect reports it
        log.debug("tokenizing worker stopped reading its texts: %s", error)
    worker.stdin = None  # closed: communicate() must not flush it
    return worker


def _collect(worker: subprocess.Popen[bytes] | None, share: list[str], term_id: Callable[[str], int]) -> tuple[np.ndarray, np.ndarray]:
    """The worker's token ids of ``share`` renumbered by ``term_id``; ``share`` tokenized here if the worker failed."""
    if worker is None:
        return tokenize.token_ids(share, term_id)
    out, err = worker.communicate()
    try:
        if worker.returncode != 0:
            raise RuntimeError(f"exit status {worker.returncode}: {err.decode(errors='replace').strip()[-500:]}")
        ids, lengths, terms = pickle.loads(out)
        if len(lengths) != len(share) or int(lengths.sum()) != len(ids):
            raise RuntimeError(f"{len(lengths)} token counts and {len(ids)} ids for {len(share)} texts")
    except Exception as error:  # noqa: BLE001  # any failure of the worker's answer: the share is done here instead
        log.warning("a tokenizing worker failed (%s): tokenizing its %d texts here", error, len(share))
        return tokenize.token_ids(share, term_id)
    mapping = np.fromiter(map(term_id, terms), dtype=np.int32, count=len(terms))
    return relabel_in_place(ids, mapping), lengths


#: Token ids relabelled per step of :func:`relabel_in_place`: a 16 MB temporary, where relabelling all at once held a
#: second array of every token id (0.5 GB at 1.35M chunks, 2.5 GB at 6.7M).
RELABEL_BLOCK = 1 << 22


def relabel_in_place(ids: np.ndarray, table: np.ndarray) -> np.ndarray:
    """``ids`` with each id ``i`` replaced by ``table[i]``, written over ``ids`` a block at a time; returns ``ids``."""
    for start in range(0, len(ids), RELABEL_BLOCK):
        block = ids[start:start + RELABEL_BLOCK]
        block[:] = table[block]
    return ids


#: A worker's program.  It loads the very ``tokenize.py`` this process uses, by its path (that module imports
#: nothing of the package), so an installed copy of another version can never tokenize a share, and the worker does
#: not import the rest of the package.  Pickled texts in on standard input; pickled ``(ids, lengths, terms)`` out on
#: standard output, where ``terms[i]`` is the term numbered ``i`` in ``ids``.
_WORKER = """
import importlib.util, pickle, sys
spec = importlib.util.spec_from_file_location("incidentlib_tokenize_worker", sys.argv[1])
tokenize = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tokenize)
texts = pickle.load(sys.stdin.buffer)
terms = {}
ids, lengths = tokenize.token_ids(texts, lambda term: terms.setdefault(term, len(terms)))
pickle.dump((ids, lengths, list(terms)), sys.stdout.buffer, protocol=pickle.HIGHEST_PROTOCOL)
"""
