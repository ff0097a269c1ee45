"""The cyclic collector is paused while records are made in bulk, and given back in the state it was in."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from incidentlib import loader
from incidentlib.gc_pause import built_for_process_lifetime, collector_paused
from incidentlib.graph import rdf
from incidentlib.loader import load_library


def test_the_pause_restores_the_state_it_found() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner pause does not end the outer one
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # a caller that turned it off keeps it off
    finally:
        gc.enable()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("a failed load")
    assert gc.isenabled()


def test_loading_and_the_graph_build_run_paused(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []
    real_add = rdf._add_incident

    def watching(graph, incident):  # type: ignore[no-untyped-def]
        seen.append(gc.isenabled())
        real_add(graph, incident)

    monkeypatch.setattr(rdf, "_add_incident", watching)
    data = load_library(data_dir)
    assert gc.isenabled()
    rdf.build_graph(data)
    assert seen and not any(seen) and gc.isenabled()

    loading: list[bool] = []
    real_load = loader._load_incidents

    def watching_load(*args: object):  # type: ignore[no-untyped-def]
        loading.append(gc.isenabled())
        return real_load(*args)

    monkeypatch.setattr(loader, "_load_incidents", watching_load)
    assert len(loader.load_library(data_dir).incidents) == len(data.incidents)
    assert loading == [False] and gc.isenabled()


def test_the_projection_is_built_paused(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from incidentlib.graph import projection
    from incidentlib.graph.knowledge import KnowledgeGraph

    states: list[bool] = []
    real_build = projection.build_projection

    def watching(data):  # type: ignore[no-untyped-def]
        states.append(gc.isenabled())
        return real_build(data)

    monkeypatch.setattr(projection, "build_projection", watching)
    graph = KnowledgeGraph(load_library(data_dir)).nx
    assert graph.number_of_nodes() > 0 and states == [False] and gc.isenabled()


class _Cycle:
    """An object in a reference cycle: only the cyclic collector could free it."""

    def __init__(self) -> None:
        self.me = self


def test_a_lifetime_build_freezes_what_it_built_and_only_after_success() -> None:
    assert gc.isenabled()
    before = gc.get_freeze_count()
    try:
        with built_for_process_lifetime():
            assert not gc.isenabled()
            kept = _Cycle()
        assert gc.isenabled()
        assert gc.get_freeze_count() > before
        # out of the collector's reach: no later pass walks it (gc.get_objects lists the collected generations only)
        assert not any(candidate is kept for candidate in gc.get_objects())
    finally:
        gc.unfreeze()  # give the test session's objects back to the collector
    assert any(candidate is kept for candidate in gc.get_objects())

    with pytest.raises(RuntimeError), built_for_process_lifetime():
        raise RuntimeError("a failed load")
    assert gc.isenabled() and gc.get_freeze_count() == 0  # nothing frozen for a start that failed


_SERVE_WITHOUT_LISTENING = """
import gc, sys, uvicorn
from typer.testing import CliRunner
from incidentlib.cli import app
seen = {}
def listen(asgi, *args, **kwargs):
    library = asgi.state.library
    engine = library._search_engine
    held = [library, library.data, library.data.incidents, library.data.vocab, engine, engine.chunks, engine.lexical]
    tracked = {id(thing) for thing in gc.get_objects()}  # the collector's generations: frozen objects are not in them
    seen.update(frozen=gc.get_freeze_count(), enabled=gc.isenabled(), unfrozen=sum(id(thing) in tracked for thing in held))
uvicorn.run = listen
result = CliRunner().invoke(app, ["serve", "--data", sys.argv[1], "--cache", sys.argv[2], "--no-mcp"])
assert result.exit_code == 0, result.output
print(seen["frozen"], seen["unfrozen"], seen["enabled"])
"""


@pytest.mark.slow  # a serve start on the bundled library (the index is the session's, the query embedder loads)
def test_serve_freezes_its_library_before_it_listens(search_library, data_dir: Path, cache_dir: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _SERVE_WITHOUT_LISTENING, str(data_dir), str(cache_dir)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    frozen, unfrozen, enabled = done.stdout.split()[-3:]
    # the library, its records, its search engine, chunks and BM25 index are frozen with everything loaded with them
    # (tens of thousands of objects for the bundled library: records are validated when first read, chunks stay
    # columns), and the collector is on again
    assert unfrozen == "0" and int(frozen) > 50_000 and enabled == "True"


def test_a_live_write_gives_the_frozen_engine_back_to_the_collector(tmp_path: Path, data_dir: Path) -> None:
    import weakref

    from conftest import small_library
    from fakes import HashEmbedder
    from test_store import draft

    from incidentlib import Library
    from incidentlib.search.engine import SearchConfig

    root = small_library(tmp_path / "lib", data_dir, ["IL-0021", "IL-0025", "IL-0126"])
    try:
        with built_for_process_lifetime():  # as serve loads its library
            library = Library(load_library(root), SearchConfig(cache_dir=tmp_path / "cache"), embedder=HashEmbedder())
            library.search("NCCL watchdog timeout")
        engine = weakref.ref(library._search_engine)
        assert gc.get_freeze_count() > 0
        library.create_draft(draft("quokka"))  # the write replaces the records and drops the engine
        assert gc.get_freeze_count() == 0
        gc.collect()
        assert engine() is None  # an engine sits in reference cycles: frozen, it would have outlived the write
        assert library.search("quokka storage tier", k=1).results  # the new engine answers
    finally:
        gc.unfreeze()
