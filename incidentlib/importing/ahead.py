"""An import's per-record work that depends on the record alone, done ahead in a worker process.

Of each record an import spends about half in work that depends on its text alone (recognising concepts, error
signals, the duplicate check's token sets and MinHash keys) and the rest in work that must go in order in one process
(the duplicate check against every record accepted before it, validation).  :class:`WorkAhead` gives the first kind
to one worker process, a new interpreter as in :mod:`incidentlib.search.token_workers` (a fork of a server's process
with threads may deadlock), which receives the work pickled (a callable taking a batch of items and giving a result
per item) and then the items a batch at a time, and works ahead of the importing process; that one asks for each
record's result when it reaches it.

Batches are claimed under a lock: by the thread feeding the worker from the front; by the importing process for a
batch it asks for that nobody has claimed (the worker still starting, or slower); and, while it waits for one the
worker holds, by the importing process from the back.  So the two processes share the work whatever their speeds,
and every result is ``work([item])[0]``, whoever computed it (the work must give each item's result from that item
alone).  A worker that fails (killed, out of memory) costs time, not the result: the batches it held are done here,
with a warning.
"""

from __future__ import annotations

import logging
import pickle
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Generic, TypeVar

from ..search.cores import configured_workers, usable_cores

log = logging.getLogger(__name__)

Item = TypeVar("Item")
Result = TypeVar("Result")

#: Items below which one process does everything: a worker costs about a second to start (an interpreter importing the
#: package, then the work's patterns compiled as it is unpickled), the importing process's own work on ~500 records.
PARALLEL_MIN_ITEMS = 2_000
#: Items per message to the worker: enough that a message's fixed cost (pickling, a pipe write, a thread switch) is
#: small against the work on them (a few ms a record), few enough that the importing process, claiming a batch the
#: worker has not reached, waits for no more than that batch.
BATCH_ITEMS = 32
#: Batches the worker may be given beyond the one the importing process last asked for: its answers wait in memory
#: until asked for (a record's links and token sets, some KB), so a worker faster than the importing process (whose
#: duplicate check grows with the library) stops this far ahead, ~2,000 records, rather than at the end of the import.
MAX_LEAD_BATCHES = 64
#: Environment variable that sets the number of worker processes: 0 does everything in the importing process.  At
#: most one is used: the importing process's own share of each record takes about as long as the work done ahead, so
#: a second worker would wait for it.
WORKERS_ENV = "INCIDENTLIB_IMPORT_WORKERS"
#: Bytes a pipe to or from the worker holds (Linux lets a process raise it to 1 MB): a batch and its answer, some
#: hundreds of KB, go through in one write and one read.  Through the default 64 KB the reading thread took the GIL
#: back after every 64 KB, each time waiting behind the importing thread's switch interval (5 ms), and the worker
#: stood still, its answer half written: it did half the batches it does now.
PIPE_BYTES = 1 << 20
#: A message's length, before it: the reader then takes the whole message in one read.
_LENGTH = struct.Struct("<Q")


def default_workers() -> int:
    """:data:`WORKERS_ENV` if set (at most 1), else 1 when this process may use two cores or more, else 0."""
    configured = configured_workers(WORKERS_ENV)
    if configured is not None:
        return min(configured, 1)
    return 1 if usable_cores() > 1 else 0


class WorkAhead(Generic[Item, Result]):
    """``work([items[i]])[0]`` for each ``i``, computed ahead by a worker process when there are at least
    ``min_items`` items (default :data:`PARALLEL_MIN_ITEMS`) and ``workers`` (default :func:`default_workers`) is
    not 0.

    Made with the number of items to come, the worker starts (and imports the package) at once; :meth:`start` gives
    it the work and the items.  :meth:`result` must be asked with indexes that never decrease (an import reads its
    records in order); it may skip indexes.  The items are taken a batch at a time, each once, by slicing (by the
    thread feeding the worker, or by :meth:`result`): a sequence may make them only then.  Use it as a context
    manager, or call :meth:`close`: the worker is stopped then.
    """

    def __init__(self, count: int, workers: int | None = None, min_items: int | None = None) -> None:
        wanted = default_workers() if workers is None else min(workers, 1)
        least = PARALLEL_MIN_ITEMS if min_items is None else min_items
        self.work: Callable[[list[Item]], list[Result]] | None = None
        self.items: Sequence[Item] = ()
        self.by_worker = 0  # items whose result the worker gave, for a report
        self._lock = threading.Condition()
        # the batches from _next_batch up to _back are unclaimed: the worker claims them from the front, this process
        # from the back while it waits (and from the front a batch it asks for that nobody has claimed)
        self._next_batch = 0
        self._back = 0
        self._workers: set[int] = set()  # batches claimed by the worker, not answered yet
        self._answers: dict[int, list[Result]] = {}  # batches done ahead, not yet passed by result()
        self._current: tuple[int, list[Result]] | None = None  # the batch of the last item asked for, and its results
        self._failed = False  # the worker stopped answering: its batches are done here
        self._asked = -1
        self._asked_batch = 0  # the batch of the last item asked for, for the worker's lead (MAX_LEAD_BATCHES)
        self._process: subprocess.Popen[bytes] | None = None
        self._threads: list[threading.Thread] = []
        self._errors: IO[bytes] | None = None
        if wanted and count >= least:
            self._spawn()

    @property
    def parallel(self) -> bool:
        """Whether a worker was started (and has not been closed)."""
        return self._process is not None

    def start(self, work: Callable[[list[Item]], list[Result]], items: Sequence[Item]) -> None:
        """The worker is given ``work`` (pickled: it must be picklable) and then ``items``, a batch at a time."""
        if self.work is not None:
            raise RuntimeError("WorkAhead.start() was called twice")
        self.work, self.items = work, items
        self._back = -(-len(items) // BATCH_ITEMS)
        process = self._process
        if process is None:
            return
        assert process.stdin is not None and process.stdout is not None
        feeder = threading.Thread(target=self._feed, args=(process.stdin,), name="import-worker-feeder", daemon=True)
        reader = threading.Thread(target=self._read, args=(process.stdout,), name="import-worker-reader", daemon=True)
        try:
            for thread in (feeder, reader):
                thread.start()
                self._threads.append(thread)
        except RuntimeError as error:  # no thread to be had: every batch is done here
            log.warning("could not start the threads of an import worker (%s): working in this process", error)
            self.close()

    # ---- the importing process's side ---------------------------------------------------------------------------
    def result(self, index: int) -> Result:
        """``work([items[index]])[0]``: done ahead by the worker, or here (a batch nobody had claimed, or one the
        failed worker held).  While a batch the worker holds is awaited, the last batch nobody has claimed is done
        here, so the two meet wherever their speeds take them."""
        if self.work is None:
            raise RuntimeError("WorkAhead.result() before start()")
        if index < self._asked:
            raise ValueError(f"result({index}) asked after result({self._asked}): indexes must not decrease")
        self._asked = index
        batch, offset = divmod(index, BATCH_ITEMS)
        if self._current is not None and self._current[0] == batch:
            return self._current[1][offset]
        self._lock.acquire()
        try:
            self._asked_batch = batch
            self._lock.notify_all()  # the feeder may be waiting for the importing process to come closer
            for passed in [number for number in self._answers if number < batch]:
                del self._answers[passed]  # never asked again: indexes do not decrease
            while batch in self._workers and not self._failed:
                if self._next_batch < self._back:  # meanwhile, the last unclaimed batch is done here
                    self._back -= 1
                    last = self._back
                    self._lock.release()
                    try:
                        done = self.work(self._batch(last))
                    finally:
                        self._lock.acquire()
                    self._answers[last] = done
                else:
                    self._lock.wait()
            answer = self._answers.pop(batch, None)
            if answer is None and self._next_batch <= batch < self._back:
                self._next_batch = batch + 1  # claimed here; the ones skipped are never asked for
        finally:
            self._lock.release()
        if answer is None:  # claimed here, or the worker failed before answering it
            answer = self.work(self._batch(batch))
        self._current = (batch, answer)
        return answer[offset]

    def _batch(self, number: int) -> list[Item]:
        return list(self.items[number * BATCH_ITEMS:(number + 1) * BATCH_ITEMS])

    def _batch_size(self, number: int) -> int:
        """``len(self._batch(number))`` without taking the items (a sequence may make them when taken)."""
        return max(0, min(BATCH_ITEMS, len(self.items) - number * BATCH_ITEMS))

    def close(self) -> None:
        """The worker stopped and its threads joined (idempotent)."""
        with self._lock:
            self._failed = True  # nothing more is claimed for it
            self._lock.notify_all()
        process, self._process = self._process, None
        if process is not None:
            log.debug("the import worker did %d of %d items", self.by_worker, len(self.items))
            if process.poll() is None:
                process.kill()
            process.wait()
            for stream in (process.stdin, process.stdout):
                if stream is not None:
                    stream.close()
        for thread in self._threads:
            thread.join()
        self._threads = []
        if self._errors is not None:
            self._errors.close()
            self._errors = None

    def __enter__(self) -> WorkAhead[Item, Result]:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.close()

    # ---- the worker ---------------------------------------------------------------------------------------------
    def _spawn(self) -> None:
        if not sys.executable:  # an embedded interpreter may not know its own program
            log.warning("no Python executable to start an import worker with: working in this process")
            return
        package_parent = str(Path(__file__).resolve().parents[2])  # this very copy of the package, not another one
        command = [sys.executable, "-P", "-c", _WORKER, package_parent]  # -P: the working folder shadows no module
        self._errors = tempfile.TemporaryFile()  # noqa: SIM115  # closed by close()
        try:
            self._process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._errors)
        except OSError as error:
            log.warning("could not start an import worker (%s): working in this process", error)
            self._errors.close()
            self._errors = None
            return
        for pipe in (self._process.stdin, self._process.stdout):
            _widen(pipe)

    def _claim(self) -> int | None:
        """The next batch for the worker, claimed (once it is at most :data:`MAX_LEAD_BATCHES` ahead of the importing
        process); ``None`` when none is left or the worker failed."""
        with self._lock:
            while (not self._failed and self._next_batch < self._back
                   and self._next_batch - self._asked_batch > MAX_LEAD_BATCHES):
                self._lock.wait()
            if self._failed or self._next_batch >= self._back:
                return None
            number = self._next_batch
            self._next_batch += 1
            self._workers.add(number)
            return number

    def _feed(self, pipe: IO[bytes]) -> None:
        """Writes the work, then each batch claimed as ``(number, items)``, then ``None``.  A write blocks while the
        pipe is full, so the worker is given a batch or two more than it has done and the rest stay unclaimed."""
        try:
            _send(pipe, self.work)
            for number in iter(self._claim, None):
                _send(pipe, (number, self._batch(number)))
            _send(pipe, None)
            pipe.close()
        except (OSError, ValueError) as error:  # the worker stopped reading (or close() came first)
            self._fail(f"its input closed ({error})")

    def _read(self, pipe: IO[bytes]) -> None:
        """Reads the worker's answers, ``(number, results)``, until it exits."""
        try:
            while (message := _receive(pipe)) is not None:
                number, answer = message
                with self._lock:
                    if number not in self._workers or len(answer) != self._batch_size(number):
                        raise RuntimeError(f"an answer for batch {number} that was not asked for, or of another size")
                    self._workers.discard(number)
                    self._answers[number] = answer
                    self.by_worker += len(answer)
                    self._lock.notify_all()
        except Exception as error:  # noqa: BLE001  # any failure of the worker: its batches are done here
            self._fail(f"{type(error).__name__}: {error}")
            return
        with self._lock:
            pending = bool(self._workers)
        if pending:
            self._fail("it exited before answering every batch")

    def _fail(self, why: str) -> None:
        with self._lock:
            if self._failed:
                return  # closed on purpose, or said already
            self._failed = True
            pending = len(self._workers)
            self._lock.notify_all()
        process, told = self._process, ""
        if self._errors is not None:
            try:
                self._errors.seek(0)
                told = self._errors.read()[-500:].decode(errors="replace").strip()
            except (OSError, ValueError):
                told = ""
        status = process.poll() if process is not None else None
        log.warning("the import worker failed (%s%s%s): its %d batches are done in this process", why,
                    f"; exit status {status}" if status else "", f": {told}" if told else "", pending)


def _widen(pipe: IO[bytes] | None) -> None:
    """The pipe made to hold :data:`PIPE_BYTES` where the system allows it (else it keeps its size)."""
    try:
        import fcntl  # POSIX only
    except ImportError:
        return
    setting = getattr(fcntl, "F_SETPIPE_SZ", None)  # Linux only
    if pipe is None or setting is None:
        return
    try:
        fcntl.fcntl(pipe.fileno(), setting, PIPE_BYTES)
    except OSError as error:  # a lower system limit: smaller writes, the same messages
        log.debug("pipe size left as it is: %s", error)


def _send(pipe: IO[bytes], message: object) -> None:
    """``message`` pickled, after its length, in one write."""
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    pipe.write(_LENGTH.pack(len(body)) + body)
    pipe.flush()


def _receive(pipe: IO[bytes]) -> Any:
    """The next message :func:`_send` wrote; ``None`` at the end of the pipe (a message cut short raises)."""
    head = pipe.read(_LENGTH.size)
    if not head:
        return None
    if len(head) < _LENGTH.size:
        raise EOFError("the pipe ended inside a message's length")
    (length,) = _LENGTH.unpack(head)
    body = pipe.read(length)
    if len(body) < length:
        raise EOFError(f"the pipe ended {length - len(body)} bytes before the end of a message")
    return pickle.loads(body)


#: The worker's program.  It imports the package from the folder given (the importing process's own copy), widens its
#: pipes, reads the work, then ``(number, items)`` until ``None``, and writes ``(number, work(items))`` for each batch
#: as it is done; each message is pickled after its length (:func:`_send`).
_WORKER = """
import sys
sys.path.insert(0, sys.argv[1])
from incidentlib.importing import ahead, pipeline
source, out = sys.stdin.buffer, sys.stdout.buffer
ahead._widen(source)
ahead._widen(out)
work = ahead._receive(source)
for number, items in iter(lambda: ahead._receive(source), None):
    ahead._send(out, (number, work(items)))
"""
