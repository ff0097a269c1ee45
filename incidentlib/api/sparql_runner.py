"""Run SPARQL with a hard time limit, a memory cap and a concurrency cap.

rdflib cannot interrupt a running query, and a thread cannot be killed, so each
query runs in a child process that is killed when its time is up.

Forking the server itself per query is not safe: ``fork()`` in a process whose
other threads are inside NumPy/BLAS (a search running at the same moment) can
deadlock in the libraries' at-fork handlers, hanging the whole server.  So at
start-up, before any request thread exists, the server forks one single-threaded
*graph process*.  It builds the graph there (:meth:`Library.prepare_sparql`: the
in-memory RDF graph is tens of seconds of a large library's start, which the
server no longer waits for before it listens), then forks ``max_concurrent``
single-threaded *hosts* that hold that graph (copy-on-write), and says it is
ready.  The pipes between the server and the hosts are made before the first
fork, so the server talks to its grandchildren directly.  A query goes to an
idle host, which forks one *worker* for it (safe: the host has no other
threads).  A query that comes before the hosts are ready waits for them up to its
time limit, then is refused with :class:`GraphNotReady` (HTTP 503 with
``Retry-After``): never answered from a half-built graph.  The worker:

* restores the default SIGTERM/SIGINT handlers (it would otherwise inherit the
  server's, which swallow ``terminate()``),
* caps its address space (``RLIMIT_AS``) at what it inherited plus
  :data:`MEMORY_BUDGET_BYTES`, so a query that builds a huge result fails with
  ``MemoryError`` instead of growing the machine's memory,
* caps its CPU time (``RLIMIT_CPU``) a little above the wall-clock limit, so the
  kernel ends it even if nobody else can,
* refuses any network connection (an audit hook), whatever rdflib would try, except
  to the graph store's own endpoint when the library uses a remote SPARQL store (the
  query is evaluated there; the worker waits at most the limit for its answer).

The host waits up to the limit, then ends the worker for certain: SIGTERM, up to
:data:`KILL_GRACE_SECONDS`, SIGKILL, and reaps it, before it answers.  When no
host is idle the query is refused at once with :class:`SparqlBusy` (HTTP 503 with
``Retry-After``) rather than queued.  A host exits when the server closes its
pipe (or dies).  Where ``fork`` is not available the query runs in a worker
thread and only the wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import multiprocessing
import os
import pickle
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any
from urllib.parse import urlsplit

from starlette.concurrency import run_in_threadpool

from ..errors import (
    GraphNotReady,
    GraphStoreError,
    ReadOnlyError,
    RemoteAccessError,
    SparqlBusy,
    SparqlError,
    SparqlMemoryError,
    SparqlTimeout,
)
from ..library import Library, SparqlResult
from .limits import DEFAULT_MAX_CONCURRENT as DEFAULT_MAX_CONCURRENT

# A SELECT over the whole graph serialises to a few MB; 512 MiB above the inherited
# address space leaves room for that and for rdflib's intermediate solution sets,
# while one runaway cross product cannot take the machine's memory.
MEMORY_BUDGET_BYTES = 512 * 1024 * 1024
# After SIGTERM a child with default handlers exits within milliseconds; one second
# covers a loaded machine before SIGKILL, which cannot be ignored.
KILL_GRACE_SECONDS = 1.0
#: prctl option: the signal a process receives when its parent dies (linux/prctl.h).
PR_SET_PDEATHSIG = 1
# CPU seconds beyond the wall-clock limit before the kernel sends SIGXCPU/SIGKILL:
# a backstop for a child whose parent can no longer stop it.
CPU_SLACK_SECONDS = 2
# Seconds a refused client is told to wait: about one time-limited query.
RETRY_AFTER_SECONDS = 5
# Extra seconds the server waits for a host beyond the query's limit and the kill grace period.
HOST_SLACK_SECONDS = 5.0
# Seconds a client refused while the graph is built is told to wait: the query already waited its own limit,
# and the in-memory RDF graph of a large library takes tens of seconds (docs/benchmarks.md); chosen, not tuned.
NOT_READY_RETRY_AFTER_SECONDS = 10
#: Niceness added to the graph process while it builds the graph: the build (seconds of CPU at 10k records) runs
#: while the server answers its first requests on the same cores, and those should come first.  Not nice(1)'s 10:
#: measured at 10k on the shared 2-core machine under load ~8, a graph process at 10 got ~3 % of a core and was
#: not ready after 6 min (92 s at 0); 5 gives it about a third of the CPU weight of the server's threads.
GRAPH_BUILD_NICENESS = 5


def _address_space_bytes() -> int | None:
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            return int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _deny_network(event: str, _args: tuple[Any, ...]) -> None:
    if event in ("socket.connect", "socket.getaddrinfo", "urllib.Request"):
        raise PermissionError("the SPARQL worker may not open network connections")


def _network_guard(endpoint: tuple[str, int] | None) -> Callable[[str, tuple[Any, ...]], None]:
    """An audit hook refusing every connection but those to ``endpoint`` (resolved now, before the hook is on)."""
    if endpoint is None:
        return _deny_network
    host, port = endpoint
    addresses = {(info[4][0], port) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)}

    def guard(event: str, args: tuple[Any, ...]) -> None:
        if event == "socket.getaddrinfo" and (args[0], args[1]) == (host, port):
            return
        if event == "socket.connect" and isinstance(args[1], tuple) and tuple(args[1][:2]) in addresses:
            return
        if event == "urllib.Request" and urlsplit(str(args[0])).hostname == host:
            return  # the connection itself is checked above
        _deny_network(event, args)

    return guard


def _confine(timeout: float, endpoint: tuple[str, int] | None = None) -> None:
    """Make this child killable, bounded in memory and CPU, and unable to reach the network (but ``endpoint``)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        import resource

        current = _address_space_bytes()
        if current is not None:
            cap = current + MEMORY_BUDGET_BYTES
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        cpu = int(timeout) + CPU_SLACK_SECONDS
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    except (ImportError, ValueError, OSError):
        pass  # not POSIX, or limits already lower: the wall-clock kill still holds
    sys.addaudithook(_network_guard(endpoint))


def _child(library: Library, query: str, conn: Connection, timeout: float) -> None:
    try:
        _confine(timeout, library.graph_endpoint())
        conn.send(("ok", library.sparql(query, timeout).model_dump()))
    except SparqlError as exc:
        conn.send(("error", (type(exc).__name__, str(exc))))
    except MemoryError:
        message = (f"SPARQL query needed more than the {MEMORY_BUDGET_BYTES >> 20} MiB memory cap and was stopped; "
                   "add LIMIT or narrow the patterns")
        conn.send(("error", ("SparqlMemoryError", message)))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
        conn.send(("error", ("SparqlError", f"query failed: {exc}")))
    finally:
        conn.close()


def _stop_pid(pid: int) -> None:
    """End process ``pid`` (a child of this process) for certain: SIGTERM, a grace period, SIGKILL; reap it."""
    if os.waitpid(pid, os.WNOHANG) != (0, 0):
        return  # already exited and now reaped
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + KILL_GRACE_SECONDS
    while time.monotonic() < deadline:
        if os.waitpid(pid, os.WNOHANG) != (0, 0):
            return
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def _run_in_worker(library: Library, query: str, timeout: float) -> tuple[str, Any]:
    """In a host: fork a confined worker for ``query``, wait up to ``timeout``, end it, return its answer."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker
        os.close(read_fd)
        code = 0
        try:
            _child(library, query, Connection(write_fd, readable=False), timeout)
        except BaseException:  # noqa: BLE001 - the host reports a missing answer
            code = 1
        finally:
            os._exit(code)
    os.close(write_fd)
    answer = Connection(read_fd, writable=False)
    try:
        if not answer.poll(timeout):
            return "timeout", f"SPARQL query exceeded the {timeout:g} s time limit and was stopped"
        return answer.recv()  # type: ignore[no-any-return]
    except (EOFError, OSError, pickle.PickleError):
        return "error", ("SparqlError", "SPARQL worker ended without an answer")
    finally:
        answer.close()
        _stop_pid(pid)


def _die_with_parent(parent: int) -> None:
    """Have the kernel kill this process when the server dies, even by ``kill -9`` (Linux ``PR_SET_PDEATHSIG``).

    Without it a host whose server was killed waits for its pipe's EOF forever: hosts forked later
    hold copies of the server's end of the pipe. Elsewhere the EOF and the stop message remain.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the server died before the request took effect
        os._exit(0)


def _host_main(library: Library, conn: Connection, parent: int) -> None:
    """A host's loop: one query at a time, each in its own worker, until the server stops it or dies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the server closes the pipe instead
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _die_with_parent(parent)
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            os._exit(0)
        if message is None:  # the server is stopping (see _Host.close)
            os._exit(0)
        query, timeout = message
        try:
            # follow acknowledged writes (docs/storage.md) before forking the worker; a store that
            # cannot be read leaves the last snapshot answering
            with contextlib.suppress(Exception):
                library.refresh_graph()
            conn.send(_run_in_worker(library, query, timeout))
        except (BrokenPipeError, OSError):
            os._exit(0)


def _lower_priority(increment: int) -> int | None:
    """Lower this process's priority by ``increment``; the niceness it had, or None where that is not supported."""
    try:
        before = os.getpriority(os.PRIO_PROCESS, 0)
        os.nice(increment)
    except (AttributeError, OSError):
        return None
    return before


def _restore_priority(niceness: int | None) -> None:
    """Give the hosts (which answer SPARQL queries) the server's priority back where the system allows it; an
    unprivileged process may not raise its priority again, and its hosts then run niced (searches first)."""
    if niceness is not None:
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, 0, niceness)


def _graph_main(library: Library, host_ends: list[Connection], server_ends: list[Connection], ready: Connection,
                parent: int) -> None:
    """The graph process: build the graph, fork one host per pipe, say so on ``ready``, then reap the hosts.

    Every pipe end is held by exactly one process once this has run: the server closed the host ends
    after forking this process, this process closes the server ends now and the host ends once every
    host holds its own, and each host closes the others' ends.  So a host's death is an EOF at the
    server, and the server's close is an EOF at the host."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for end in server_ends:
        end.close()
    _die_with_parent(parent)
    niceness = _lower_priority(GRAPH_BUILD_NICENESS)
    try:
        library.prepare_sparql()
    except Exception as exc:  # noqa: BLE001 - reported to the server, which answers queries with it
        with contextlib.suppress(OSError):
            ready.send(("failed", f"the graph for SPARQL could not be built: {exc}"))
        os._exit(1)
    _restore_priority(niceness)
    # the graph lives as long as this process and its hosts: no full collection walks it again, and the hosts
    # forked below keep sharing its pages (incidentlib.gc_pause.built_for_process_lifetime says why)
    gc.freeze()
    me = os.getpid()
    pids = []
    for index, end in enumerate(host_ends):
        pid = os.fork()
        if pid == 0:  # a host
            code = 0
            try:
                for other, other_end in enumerate(host_ends):
                    if other != index:
                        other_end.close()
                ready.close()
                _host_main(library, end, me)
            except BaseException:  # noqa: BLE001 - the server sees the host's pipe close
                code = 1
            finally:
                os._exit(code)
        pids.append(pid)
    for end in host_ends:
        end.close()
    with contextlib.suppress(OSError):
        ready.send(("ready", len(pids)))
    ready.close()
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    os._exit(0)


class _HostFailed(Exception):
    """A host died or stopped answering; it is replaced by none and not reused."""


class _Host:
    """The server's end of the pipe to one host (a grandchild: see :func:`_graph_main`)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def ask(self, query: str, timeout: float) -> tuple[str, Any]:
        self.conn.send((query, timeout))
        if not self.conn.poll(timeout + KILL_GRACE_SECONDS + HOST_SLACK_SECONDS):
            raise _HostFailed("SPARQL host did not answer")
        return self.conn.recv()  # type: ignore[no-any-return]

    def close(self) -> None:
        # an explicit stop: the host exits at once instead of at the EOF that follows
        with contextlib.suppress(OSError):
            self.conn.send(None)
        self.conn.close()


def _raise_for(status: str, payload: Any) -> SparqlResult:
    if status == "ok":
        return SparqlResult.model_validate(payload)
    if status == "timeout":
        raise SparqlTimeout(payload)
    name, message = payload
    if name == "SparqlMemoryError":
        raise SparqlMemoryError(message)
    known = {cls.__name__: cls for cls in (SparqlError, ReadOnlyError, RemoteAccessError)}
    raise known.get(name, SparqlError)(message)


class SparqlRunner:
    """Admits at most ``max_concurrent`` queries at once, each run by an idle host (see the module docstring).

    :meth:`start` forks the graph process and must run before the server starts request threads
    (the app's lifespan does it); it returns at once, and the hosts are ready when that process has
    built the graph (:attr:`ready`).  :meth:`stop` ends them.
    """

    def __init__(self, max_concurrent: int = DEFAULT_MAX_CONCURRENT) -> None:
        self.max_concurrent = max_concurrent
        self._lock = threading.Lock()
        self._idle: list[_Host] = []
        self._hosts: list[_Host] = []
        self._threads = threading.BoundedSemaphore(max_concurrent)  # fallback without fork
        self._graph: multiprocessing.process.BaseProcess | None = None
        self._ready_conn: Connection | None = None
        self._ready_lock = threading.Lock()  # one reader of the graph process's message at a time
        self._state = "stopped"  # stopped, starting, ready or failed
        self._failure = ""

    @property
    def forking(self) -> bool:
        return "fork" in multiprocessing.get_all_start_methods()

    def start(self, library: Library) -> None:
        if not self.forking or self._graph is not None:
            return
        library.open_graph_store()  # the graph process and its hosts inherit it (Library.open_graph_store)
        context = multiprocessing.get_context("fork")
        pairs = [context.Pipe(duplex=True) for _ in range(self.max_concurrent)]
        ready_read, ready_write = context.Pipe(duplex=False)
        server_ends, host_ends = [a for a, _ in pairs], [b for _, b in pairs]
        with library.forking():
            self._graph = context.Process(target=_graph_main, name="incidentlib-sparql-graph",
                                          args=(library, host_ends, server_ends, ready_write, os.getpid()))
            self._graph.start()
        for end in (*host_ends, ready_write):
            end.close()
        self._ready_conn = ready_read
        self._state = "starting"
        self._hosts = [_Host(end) for end in server_ends]
        self._idle = list(self._hosts)

    def wait_ready(self, timeout: float) -> bool:
        """True once the hosts hold the built graph; False when that takes longer than ``timeout`` seconds.
        A graph process that failed raises :class:`GraphStoreError` with its reason."""
        if self._state == "starting" and self._ready_lock.acquire(timeout=max(timeout, 0.0)):
            try:
                conn = self._ready_conn
                if self._state == "starting" and conn is not None and conn.poll(max(timeout, 0.0)):
                    try:
                        self._state, detail = conn.recv()
                    except (EOFError, OSError, pickle.PickleError):
                        self._state, detail = "failed", "the SPARQL graph process ended before it was ready"
                    self._failure = str(detail)
                    conn.close()
                    self._ready_conn = None
            finally:
                self._ready_lock.release()
        if self._state == "failed":
            raise GraphStoreError(self._failure)
        return self._state != "starting"

    @property
    def ready(self) -> bool:
        """True when a query is answered without waiting for the graph (also without forked hosts, and after a
        failure, which queries report)."""
        try:
            return self.wait_ready(0.0)
        except GraphStoreError:
            return True

    def stop(self) -> None:
        with self._lock:
            hosts, self._hosts, self._idle = self._hosts, [], []
        for host in hosts:
            host.close()
        graph, self._graph = self._graph, None
        with self._ready_lock:
            if self._ready_conn is not None:
                self._ready_conn.close()
                self._ready_conn = None
            self._state = "stopped"
        if graph is not None:
            # it exits once its hosts have (they read the stop just sent), or at once while it still builds
            graph.join(KILL_GRACE_SECONDS)
            if graph.is_alive():
                graph.kill()  # the hosts follow it (PR_SET_PDEATHSIG)
            graph.join()

    def _take(self) -> _Host | None:
        with self._lock:
            return self._idle.pop() if self._idle else None

    def _give_back(self, host: _Host) -> None:
        with self._lock:
            if host in self._hosts:
                self._idle.append(host)

    def _drop(self, host: _Host) -> None:
        with self._lock:
            if host in self._hosts:
                self._hosts.remove(host)
        host.close()

    async def run(self, library: Library, query: str, timeout: float) -> SparqlResult:
        """Answer ``query`` within ``timeout`` seconds.  Before the hosts are ready it waits for them, at most
        ``timeout`` seconds too (a graph built meanwhile is the one the query sees), then refuses with
        :class:`GraphNotReady`; the query's own limit starts when a host takes it."""
        if not await run_in_threadpool(self.wait_ready, timeout):
            raise GraphNotReady(f"the graph for SPARQL is still being built (waited {timeout:g} s, the query's time "
                                "limit); retry later", NOT_READY_RETRY_AFTER_SECONDS)
        if not self._hosts:
            return await self._run_in_thread(library, query, timeout)
        host = self._take()
        if host is None:
            raise SparqlBusy(f"{self.max_concurrent} SPARQL queries are already running; retry later", RETRY_AFTER_SECONDS)
        try:
            status, payload = await run_in_threadpool(host.ask, query, timeout)
        except (EOFError, OSError, _HostFailed):
            self._drop(host)  # a host that died or hung is not reused (forking a new one here would not be safe)
            raise SparqlTimeout("the SPARQL worker failed and was stopped; the query was not answered") from None
        self._give_back(host)
        return _raise_for(status, payload)

    async def _run_in_thread(self, library: Library, query: str, timeout: float) -> SparqlResult:
        if not self._threads.acquire(blocking=False):
            raise SparqlBusy(f"{self.max_concurrent} SPARQL queries are already running; retry later", RETRY_AFTER_SECONDS)
        try:
            return await asyncio.wait_for(run_in_threadpool(library.sparql, query), timeout)
        except TimeoutError:
            raise SparqlTimeout(f"SPARQL query exceeded the {timeout:g} s time limit") from None
        finally:
            self._threads.release()
