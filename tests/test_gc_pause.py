"""The cyclic collector is paused while records are made in bulk, and given back in the state it was in."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from incidentlib import loader
from incidentlib.gc_pause import collector_paused
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
