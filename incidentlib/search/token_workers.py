"""Tokenizing a large batch of texts on several cores: :func:`~.tokenize.token_ids` split between processes.

Tokenizing is five sixths of a BM25 build from texts (41 µs of ~50 µs a chunk at 433,100 chunks,
docs/benchmarks.md), and it is Python work that one process does on one core. :func:`token_ids` gives
contiguous shares of the texts to worker processes (new interpreters running :data:`_WORKER`: texts in and
token ids out through pipes) and tokenizes the first share itself meanwhile. Each worker numbers
its terms on its own; its numbers are then mapped to the caller's through ``term_id``, once per distinct term,
and its ids rewritten with one array look-up. The result is the same as one :func:`~.tokenize.token_ids` call
over all the texts: the same tokens in the same order, numbered by the same ``term_id`` (which may be called in
another order and for terms no text ends up holding, as that function already allows).

The first worker and this process share the first two shares' worth of texts from both ends: the worker is fed
batches from the front, this process takes them from the back, until they meet (:class:`_Claims`). So the two
finish together whatever head start the worker had. A caller with other work to do first (a build in segments,
counting the pairs of the segment before) starts the workers early with :class:`Tokenizing` and collects the ids
later; the worker has then tokenized more of the shared texts by the time this process begins.

The workers are new interpreters, not forks: a fork of a process with threads (a server's) may deadlock, and a
``multiprocessing`` spawn would import the caller's main script again. A worker that fails (killed, out of
memory) costs time, not the result: its share is tokenized here instead, with a warning.
"""

from __future__ import annotations

import io
import logging
import pickle
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO, cast

import numpy as np

from . import tokenize
from .cores import configured_workers, usable_cores

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
    configured = configured_workers(WORKERS_ENV)
    return configured if configured is not None else max(0, min(MAX_WORKERS, usable_cores() - 1))


def token_ids(texts: Sequence[str], term_id: Callable[[str], int], workers: int | None = None,
              min_texts: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`~.tokenize.token_ids` of ``texts``, with ``workers`` other processes (default
    :func:`default_workers`) taking contiguous shares when there are at least ``min_texts`` texts (default
    :data:`PARALLEL_MIN_TEXTS`): :class:`Tokenizing` started and collected at once."""
    return Tokenizing(texts, workers, min_texts).ids(term_id)


class Tokenizing:
    """:func:`token_ids` in two steps: made, the workers start on their texts; :meth:`ids` tokenizes this process's
    share and collects theirs.  Whatever happens between the two, :meth:`ids` or :meth:`discard` must follow.

    The first two shares' worth of texts are split between the first worker and this process where they meet
    (:class:`_Claims`); the other workers have equal fixed shares after them.  Every id is written once into the one
    array returned: this process's batches are copied into place, and each worker's ids are read from its pipe
    straight into their place and relabelled there (a worker first says how many it has).  Concatenating parts
    instead made three more arrays the size of a share's ids (the pickled answer, the array unpickled from it, then
    the whole result) and fresh memory is slow to come by: on the machine of docs/benchmarks.md a gigabyte of new
    pages cost about 4 s of kernel time."""

    def __init__(self, texts: Sequence[str], workers: int | None = None, min_texts: int | None = None) -> None:
        workers = default_workers() if workers is None else workers
        least = PARALLEL_MIN_TEXTS if min_texts is None else min_texts
        self.texts = texts
        self.started: list[_Worker | None] = []
        if workers <= 0 or len(texts) < max(least, workers + 1):
            self.shared: list[str] = []
            self.fixed: list[list[str]] = []
            self.claims = _Claims(0)
            return
        bounds = np.linspace(0, len(texts), workers + 2).round().astype(int).tolist()
        self.shared = list(texts[:bounds[2]])
        self.fixed = [list(texts[bounds[i]:bounds[i + 1]]) for i in range(2, workers + 1)]
        self.claims = _Claims(-(-len(self.shared) // tokenize.TOKEN_BATCH))
        try:
            self.started.append(_start(self.shared, self.claims))
            self.started.extend(_start(share) for share in self.fixed)
        except BaseException:
            self.discard()
            raise

    def ids(self, term_id: Callable[[str], int]) -> tuple[np.ndarray, np.ndarray]:
        """The token ids of every text, in order, numbered by ``term_id``, and each text's token count."""
        if not self.started:
            return tokenize.token_ids(self.texts, term_id)
        try:
            here = _claimed_here(self.shared, self.claims, term_id)
            front = self.shared[:self.claims.front * tokenize.TOKEN_BATCH]  # what the first worker was fed
            answers = [_answer(self.started[0], front, term_id), here]
            answers.extend(_answer(worker, share, term_id) for share, worker in zip(self.fixed, self.started[1:], strict=True))
            ids = np.empty(sum(answer.count for answer in answers), dtype=np.int32)
            at = 0
            for answer in answers:
                answer.fill(ids[at:at + answer.count])
                at += answer.count
        except BaseException:  # interrupted (or a bad text): no worker is left running
            self.discard()
            raise
        return ids, np.concatenate([answer.lengths for answer in answers])

    def discard(self) -> None:
        """Every worker stopped (nothing of their answers is wanted)."""
        self.claims.close()
        for worker in self.started:
            if worker is not None:
                worker.discard()


class _Claims:
    """The batches of texts the first worker and this process share, claimed from both ends under a lock: the
    worker's feeder takes them from the front, this process from the back, until none is left."""

    def __init__(self, batches: int) -> None:
        self.front, self.back = 0, batches
        self._lock = threading.Lock()

    def from_front(self) -> int | None:
        with self._lock:
            if self.front >= self.back:
                return None
            self.front += 1
            return self.front - 1

    def from_back(self) -> int | None:
        with self._lock:
            if self.front >= self.back:
                return None
            self.back -= 1
            return self.back

    def close(self) -> None:
        """No batch is handed out any more (the front stops where it is)."""
        with self._lock:
            self.back = self.front


@dataclass(frozen=True)
class _Worker:
    """A worker process, and the file its messages go to: a pipe nobody reads while its ids are read could fill and
    stop it."""

    process: subprocess.Popen[bytes]
    errors: IO[bytes]
    feeder: threading.Thread

    @property
    def output(self) -> io.BufferedReader:
        assert self.process.stdout is not None
        return cast(io.BufferedReader, self.process.stdout)

    def stop(self) -> None:
        """Killed if still running, and waited for, with the thread writing its texts."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.feeder.join()  # its next write fails on the closed pipe, if it was still writing

    def discard(self) -> None:
        """Stopped, its pipe and its messages' file closed (nothing of its answer is wanted any more)."""
        self.stop()
        self.output.close()
        self.errors.close()

    def finished(self) -> bool:
        """Waits for the worker to exit; true when its status is 0."""
        self.output.close()
        if self.process.wait() != 0:
            return False
        self.feeder.join()
        self.errors.close()
        return True

    def failure(self, error: Exception) -> str:
        """What went wrong: the worker's exit status and the end of its messages, or ``error``."""
        self.stop()
        told = b""
        if not self.errors.closed:
            self.errors.seek(0)
            told = self.errors.read()[-2000:]
            self.errors.close()
        if not self.output.closed:
            self.output.close()
        status = self.process.returncode
        return f"exit status {status}: {told.decode(errors='replace').strip()[-500:]}" if status else str(error)


def _start(share: list[str], claims: _Claims | None = None) -> _Worker | None:
    """A worker given ``share`` (with ``claims``: the batches of it the worker claims from the front), or ``None``
    when it could not be started.

    The texts are written a batch at a time (:data:`~.tokenize.TOKEN_BATCH` texts, then ``None``) by a thread of
    this process, and the worker tokenizes each batch as it arrives and drops it.  Written whole before this process
    went on, they held it up until the worker had read them all (2.8 s of a 24 s share at 1.35M chunks, mostly the
    worker making room for 0.4 GB of strings), and the worker held every text at once."""
    if not sys.executable:  # an embedded interpreter may not know its own program
        log.warning("no Python executable to start a tokenizing worker with: tokenizing its %d texts here", len(share))
        return None
    command = [sys.executable, "-P", "-c", _WORKER, tokenize.__file__]  # -P: the working folder shadows no module
    errors = tempfile.TemporaryFile()  # noqa: SIM115  # closed by _Worker.finished or _Worker.failure
    try:
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors)
    except OSError as error:
        errors.close()
        log.warning("could not start a tokenizing worker (%s): tokenizing its %d texts here", error, len(share))
        return None
    assert process.stdin is not None
    texts, process.stdin = process.stdin, None  # the feeder's to close: nothing else may flush or close it
    feeder = threading.Thread(target=_feed, args=(texts, share, claims), name="tokenizing-worker-feeder", daemon=True)
    try:
        feeder.start()
    except RuntimeError as error:  # no thread to be had: the process is stopped, its share tokenized here
        process.kill()
        process.wait()
        for stream in (texts, process.stdout, errors):
            if stream is not None:
                stream.close()
        log.warning("could not start a thread feeding a tokenizing worker (%s): tokenizing its %d texts here", error,
                    len(share))
        return None
    return _Worker(process, errors, feeder)


def _feed(texts: IO[bytes], share: list[str], claims: _Claims | None) -> None:
    """Writes ``share`` (with ``claims``: the batches it claims from the front, until none is left) to a worker's input
    a batch at a time, then ``None``, and closes it.  Runs in its own thread: a write lets the GIL go while the worker
    reads, and the next batch is claimed once the last one is in the pipe.  A batch of :data:`~.tokenize.TOKEN_BATCH`
    texts pickles to megabytes, far more than a pipe holds (64 KB), so the worker has then read most of it: it holds
    about one batch it has not tokenized.  (Batches smaller than the pipe, of very short texts, could all be claimed
    ahead of the worker: slower, since this process then waits for it, but the same result.)  Each batch is pickled
    first and written in one call, which waits for the GIL once: pickled straight into the pipe, every 64 KB frame
    written waited for it again behind the tokenizing thread (up to 5 ms each, the interpreter's switch interval),
    and the worker sat idle for its texts."""
    batch = tokenize.TOKEN_BATCH
    numbers = iter(claims.from_front, None) if claims is not None else iter(range(-(-len(share) // batch)))
    try:
        with texts:
            for number in numbers:
                texts.write(pickle.dumps(share[number * batch:(number + 1) * batch], protocol=pickle.HIGHEST_PROTOCOL))
            texts.write(pickle.dumps(None, protocol=pickle.HIGHEST_PROTOCOL))
    except OSError as error:  # the worker died before reading everything: _answer reports it
        log.debug("tokenizing worker stopped reading its texts: %s", error)


@dataclass(frozen=True)
class _Answer:
    """A share's token count, its texts' token counts, and how to write its ids (numbered by the caller's
    ``term_id``) into an array of that count."""

    count: int
    lengths: np.ndarray
    fill: Callable[[np.ndarray], None]


def _tokenized_here(share: list[str], term_id: Callable[[str], int]) -> _Answer:
    """``share`` tokenized in this process (a failed worker's)."""
    batches, lengths = tokenize.token_id_batches(share, term_id)
    batches.reverse()
    return _answer_of(batches, lengths)


def _answer_of(last_first: list[np.ndarray], lengths: np.ndarray) -> _Answer:
    """The answer of ids tokenized here, one array per batch, the last batch first: ``fill`` pops them in text order,
    each batch freed once in place, before the next worker's ids are read."""
    count = sum(map(len, last_first))

    def fill(slot: np.ndarray) -> None:
        at = 0
        while last_first:
            batch = last_first.pop()
            slot[at:at + len(batch)] = batch
            at += len(batch)

    return _Answer(count, lengths, fill)


def _claimed_here(shared: list[str], claims: _Claims, term_id: Callable[[str], int]) -> _Answer:
    """The batches of ``shared`` this process claims from the back, tokenized here until the worker's front meets
    them; the answer is in text order (the batches were taken last first)."""
    size = tokenize.TOKEN_BATCH
    taken: list[int] = []

    def batches() -> Iterator[list[str]]:
        for number in iter(claims.from_back, None):
            taken.append(number)
            yield shared[number * size:(number + 1) * size]

    parts, lengths = tokenize.token_id_stream(batches(), term_id)  # last batch first, as taken
    sizes = [len(shared[number * size:(number + 1) * size]) for number in taken]
    by_batch = np.split(lengths, np.cumsum(sizes)[:-1]) if taken else []
    by_batch.reverse()
    return _answer_of(parts, np.concatenate(by_batch) if by_batch else np.zeros(0, dtype=lengths.dtype))


def _answer(worker: _Worker | None, share: list[str], term_id: Callable[[str], int]) -> _Answer:
    """The worker's answer for ``share``: its header read now, its ids read into place by ``fill``; ``share``
    tokenized here instead if the worker failed (at any point: the ids it announced are then made here)."""
    if worker is None:
        return _tokenized_here(share, term_id)
    try:
        count, lengths, terms = pickle.load(worker.output)
        if len(lengths) != len(share) or int(lengths.sum()) != count:
            raise RuntimeError(f"{len(lengths)} token counts adding up to {int(lengths.sum())} and {count} ids "
                               f"for {len(share)} texts")
    except Exception as error:  # noqa: BLE001  # any failure of the worker's answer: the share is done here instead
        log.warning("a tokenizing worker failed (%s): tokenizing its %d texts here", worker.failure(error), len(share))
        return _tokenized_here(share, term_id)
    mapping = np.fromiter(map(term_id, terms), dtype=np.int32, count=len(terms))

    def fill(slot: np.ndarray) -> None:
        view = slot.data.cast("B")
        got = 0
        while got < len(view):
            read = worker.output.readinto(view[got:])
            if not read:
                break
            got += read
        if got == len(view) and worker.finished():
            relabel_in_place(slot, mapping)
            return
        short = RuntimeError(f"{got} of {len(view)} bytes of token ids read")
        log.warning("a tokenizing worker failed (%s): tokenizing its %d texts here", worker.failure(short), len(share))
        here = _tokenized_here(share, term_id)
        if here.count != len(slot):
            raise RuntimeError(f"a tokenizing worker announced {len(slot)} tokens for its texts; they have {here.count}")
        here.fill(slot)

    return _Answer(count, lengths, fill)


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
#: not import the rest of the package.  In on standard input, pickled lists of texts until a pickled ``None``; out on
#: standard output, a pickled ``(count, lengths, terms)`` (``terms[i]`` is the term numbered ``i`` in its ids), then
#: its ``count`` token ids as raw int32 (this machine's byte order: the reader is its parent), batch after batch.
_WORKER = """
import importlib.util, pickle, sys
spec = importlib.util.spec_from_file_location("incidentlib_tokenize_worker", sys.argv[1])
tokenize = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tokenize)
source = sys.stdin.buffer
terms = {}
ids, lengths = tokenize.token_id_stream(iter(lambda: pickle.load(source), None), lambda term: terms.setdefault(term, len(terms)))
out = sys.stdout.buffer
pickle.dump((sum(map(len, ids)), lengths, list(terms)), out, protocol=pickle.HIGHEST_PROTOCOL)
for batch in ids:
    out.write(memoryview(batch).cast("B"))
out.flush()
"""
