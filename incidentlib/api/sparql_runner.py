"""Run SPARQL with a hard time limit.

rdflib cannot interrupt a running query, and a thread cannot be killed, so each
query runs in a forked child process that shares the already-built graph
(copy-on-write) and is terminated when the limit passes.  Where ``fork`` is not
available the query runs in a worker thread and only the wait is bounded.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import pickle
from multiprocessing.connection import Connection

from starlette.concurrency import run_in_threadpool

from ..errors import ReadOnlyError, SparqlError, SparqlTimeout
from ..library import Library, SparqlResult


def _child(library: Library, query: str, conn: Connection) -> None:
    try:
        conn.send(("ok", library.sparql(query).model_dump()))
    except SparqlError as exc:
        conn.send(("error", (type(exc).__name__, str(exc))))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
        conn.send(("error", ("SparqlError", f"query failed: {exc}")))
    finally:
        conn.close()


def _run_forked(library: Library, query: str, timeout: float) -> SparqlResult:
    context = multiprocessing.get_context("fork")
    parent, child = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(library, query, child), daemon=True)
    process.start()
    child.close()
    try:
        if not parent.poll(timeout):
            raise SparqlTimeout(f"SPARQL query exceeded the {timeout:g} s time limit and was stopped")
        status, payload = parent.recv()
    except (EOFError, pickle.PickleError):
        raise SparqlError("SPARQL worker ended without an answer") from None
    finally:
        if process.is_alive():
            process.terminate()
        process.join(1)
        parent.close()
    if status == "ok":
        return SparqlResult.model_validate(payload)
    name, message = payload
    raise {cls.__name__: cls for cls in (SparqlError, ReadOnlyError)}.get(name, SparqlError)(message)


async def run_with_time_limit(library: Library, query: str, timeout: float) -> SparqlResult:
    library.warm()  # build the graph in the parent once, so children inherit it
    if "fork" in multiprocessing.get_all_start_methods():
        return await run_in_threadpool(_run_forked, library, query, timeout)
    try:
        return await asyncio.wait_for(run_in_threadpool(library.sparql, query), timeout)
    except TimeoutError:
        raise SparqlTimeout(f"SPARQL query exceeded the {timeout:g} s time limit") from None
