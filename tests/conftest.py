from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType

import pytest

from incidentlib import Library
from incidentlib.loader import load_library
from incidentlib.paths import resolve_data_dir

REPO = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that need the bundled library embedded with a real model (``search_library``) are slow."""
    for item in items:
        if "search_library" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return resolve_data_dir()  # the bundled library unless INCIDENTLIB_DATA says otherwise


@pytest.fixture(scope="session")
def library(data_dir: Path) -> Library:
    return Library.open(data_dir)


@pytest.fixture()
def library_copy(tmp_path: Path, data_dir: Path) -> Path:
    """A writable copy of the bundled library, for tests that break or extend it."""
    target = tmp_path / "lib"
    shutil.copytree(data_dir, target)
    return target


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One index cache for the whole test session (the e5 index takes minutes to build)."""
    return tmp_path_factory.mktemp("index-cache")


@pytest.fixture(scope="session")
def search_library(data_dir: Path, cache_dir: Path):
    """The bundled library with the default embedder's index built and its concept tagger fitted once.

    Both are cached in ``cache_dir``: the servers and CLI processes the tests start on that cache
    load them instead of fitting the tagger again inside a request (a minute on a loaded machine)."""
    from incidentlib.search.engine import SearchConfig

    lib = Library.open(data_dir, SearchConfig(cache_dir=cache_dir))
    lib.build_index()
    lib.prepare_tagger()
    return lib


@pytest.fixture(scope="session")
def hashed_tagger(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    """The concept classifier fitted once with the hashed test embedder, as its cache file.

    Libraries other than the bundled one train on the bundled records too, so every small test
    library trains the same model: :func:`seed_tagger` copies it into a test's cache directory
    instead of fitting it again (seconds each time)."""
    from fakes import HashEmbedder

    from incidentlib.search.engine import SearchConfig

    root = tmp_path_factory.mktemp("hashed-tagger")
    small = small_library(root / "lib", data_dir, ["IL-0025"])
    library = Library(load_library(small), SearchConfig(cache_dir=root / "cache"), embedder=HashEmbedder())
    _ = library.tagger
    [fitted] = (root / "cache").glob("concept-classifier-*.pkl")
    return fitted


def seed_tagger(fitted: Path, cache: Path) -> Path:
    """``cache`` holding the fitted classifier (see :func:`hashed_tagger`); returns ``cache``."""
    cache.mkdir(parents=True, exist_ok=True)
    shutil.copy2(fitted, cache / fitted.name)
    return cache


def small_library(target: Path, source: Path, ids: list[str]) -> Path:
    """A copy of the bundled library with only ``ids`` (curated links to others dropped)."""
    import yaml

    shutil.copytree(source / "vocab", target / "vocab")
    (target / "incidents").mkdir(parents=True)
    for incident_id in ids:
        doc = yaml.safe_load((source / "incidents" / f"{incident_id}.yaml").read_text(encoding="utf-8"))
        doc["related"] = [link for link in doc.get("related", []) if link["id"] in ids]
        if not doc["related"]:
            doc.pop("related")
        (target / "incidents" / f"{incident_id}.yaml").write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    return target


# ---- graph stores: the in-process graph, an embedded Oxigraph and a real Oxigraph server ----------
# The server runs in the slow subset: the fast one starts no servers or subprocesses (README).
GRAPH_STORES = ("memory", "oxigraph", pytest.param("server", marks=pytest.mark.slow))


@pytest.fixture(scope="session")
def oxigraph_url(tmp_path_factory: pytest.TempPathFactory):
    """A real `oxigraph serve` process for the whole session, its data in a temporary directory."""
    from tests._oxigraph import oxigraph_server

    with oxigraph_server(tmp_path_factory.mktemp("oxigraph-server")) as url:
        yield url


@pytest.fixture(scope="session")
def graph_stores(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Library]:
    """The bundled library in process and on an embedded Oxigraph (loaded once per session): name -> Library."""
    from incidentlib.graph.store import GraphStoreConfig, StoreKind

    library = Library.open(data_dir)  # its own: test modules may rename the session's `library` fixture
    embedded = GraphStoreConfig(kind=StoreKind.oxigraph, location=str(tmp_path_factory.mktemp("oxigraph-embedded")))
    return {"memory": library, "oxigraph": Library(library.data, graph_store=embedded)}


@pytest.fixture(scope="session")
def server_library(graph_stores: dict[str, Library], oxigraph_url: str) -> Library:
    """The bundled library on the session's `oxigraph serve` process."""
    from incidentlib.graph.store import parse_graph_store

    return Library(graph_stores["memory"].data, graph_store=parse_graph_store(oxigraph_url))


def on_store(request: pytest.FixtureRequest, store: str) -> Library:
    """The bundled library on ``store`` (memory, oxigraph or server); the server starts only when asked for."""
    if store == "server":
        return request.getfixturevalue("server_library")  # type: ignore[no-any-return]
    stores: dict[str, Library] = request.getfixturevalue("graph_stores")
    return stores[store]


@pytest.fixture(scope="session", params=GRAPH_STORES)
def graph_library(request: pytest.FixtureRequest) -> Library:
    """The bundled library on one graph store; tests using it run once per store."""
    return on_store(request, request.param)


def mapping_flags(path: Path) -> set[str]:
    """The kernel's flags (``VmFlags`` of ``/proc/self/smaps``) on this process's mappings of ``path``: ``rr`` means
    advised random (``MADV_RANDOM``); empty when nothing maps it."""
    flags: set[str] = set()
    current = ""
    with open("/proc/self/smaps", encoding="utf-8") as smaps:
        for line in smaps:
            fields = line.split()
            if fields and fields[0] == "VmFlags:":
                if current == str(path):
                    flags.update(fields[1:])
            elif fields and "-" in fields[0] and not fields[0].endswith(":"):
                current = " ".join(fields[5:])
    return flags


def eval_script(name: str) -> ModuleType:
    """A script of ``eval/`` (``postmortems_icco``) loaded from its path as a module, as it runs: its siblings found."""
    path = Path(__file__).resolve().parents[1] / "eval" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
