"""XXH3-128 checksums of the persisted caches, and the move from format-3 (SHA-256) dense builds."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from conftest import small_library
from fakes import HashEmbedder

from incidentlib.checksum import ALGORITHM, checksum_bytes, checksum_file
from incidentlib.library import SearchConfig
from incidentlib.loader import load_library
from incidentlib.search import store
from incidentlib.search.engine import SearchEngine

IDS = ["IL-0025", "IL-0126", "IL-0021"]


def test_a_checksum_names_its_algorithm_and_sees_one_flipped_bit(tmp_path: Path) -> None:
    data = bytes(range(256)) * 40_000  # 10 MB: several read blocks
    path = tmp_path / "blob"
    path.write_bytes(data)
    value = checksum_file(path)
    assert value == checksum_bytes(data) and value.startswith(f"{ALGORITHM}:") and len(value) == len(ALGORITHM) + 1 + 32
    damaged = bytearray(data)
    damaged[5_000_001] ^= 1
    path.write_bytes(bytes(damaged))
    assert checksum_file(path) != value


def _engine(root: Path, cache: Path, embedder: HashEmbedder) -> SearchEngine:
    return SearchEngine(load_library(root), SearchConfig(cache_dir=cache), embedder)


def _as_format_3(cache: Path, engine: SearchEngine) -> Path:
    """Turn the engine's build into what format 3 wrote: SHA-256 checksums, in format 3's content folder."""
    folder = store.store_dir(cache, engine.data.content_hash, engine.embedder)
    meta = json.loads((folder / "meta.json").read_text())
    build = folder / meta["build"]
    meta["format_version"] = 3
    meta["checksums"] = {name: hashlib.sha256((build / name).read_bytes()).hexdigest() for name in meta["checksums"]}
    (folder / "meta.json").write_text(json.dumps(meta))
    key = f"3\0{engine.embedder.name}\0{engine.embedder.dim}\0{engine.data.content_hash}"
    old = folder.parent / hashlib.sha256(key.encode()).hexdigest()[:32]
    folder.rename(old)
    return old


def test_a_format_3_build_gives_its_vectors_to_format_4(tmp_path: Path, data_dir: Path) -> None:
    root, cache, embedder = small_library(tmp_path / "lib", data_dir, IDS), tmp_path / "cache", HashEmbedder()
    first = _engine(root, cache, embedder)
    assert first.build().action == "built"
    old = _as_format_3(cache, first)
    encoded = embedder.documents_encoded
    again = _engine(root, cache, embedder)
    report = again.build()
    assert report.action == "refreshed" and report.embedded == 0 and embedder.documents_encoded == encoded
    meta = json.loads((Path(report.path) / "meta.json").read_text())
    assert meta["format_version"] == store.FORMAT_VERSION == 5
    assert all(value.startswith(f"{ALGORITHM}:") for value in meta["checksums"].values())
    assert not old.exists()  # superseded: the same directory's earlier build
    assert [h.incident_id for h in again.search("NCCL watchdog timeout", k=3)] == \
        [h.incident_id for h in first.search("NCCL watchdog timeout", k=3)]


@pytest.mark.parametrize("damage", ["flipped-byte", "unknown-algorithm"])
def test_a_damaged_format_3_donor_is_not_trusted(tmp_path: Path, data_dir: Path, damage: str) -> None:
    root, cache, embedder = small_library(tmp_path / "lib", data_dir, IDS), tmp_path / "cache", HashEmbedder()
    first = _engine(root, cache, embedder)
    first.build()
    old = _as_format_3(cache, first)
    meta = json.loads((old / "meta.json").read_text())
    vectors = old / meta["build"] / "vectors.npy"
    if damage == "flipped-byte":
        blob = bytearray(vectors.read_bytes())
        blob[-1] ^= 1
        vectors.write_bytes(bytes(blob))
    else:
        meta["checksums"]["vectors.npy"] = "md5:" + hashlib.md5(vectors.read_bytes()).hexdigest()
        (old / "meta.json").write_text(json.dumps(meta))
    encoded = embedder.documents_encoded
    report = _engine(root, cache, embedder).build()
    assert report.action == "built" and report.embedded == embedder.documents_encoded - encoded > 0


def test_a_build_with_a_checksum_of_another_algorithm_is_rebuilt(tmp_path: Path, data_dir: Path) -> None:
    root, cache, embedder = small_library(tmp_path / "lib", data_dir, IDS), tmp_path / "cache", HashEmbedder()
    report = _engine(root, cache, embedder).build()
    meta = json.loads((Path(report.path) / "meta.json").read_text())
    build = Path(report.path) / meta["build"]
    meta["checksums"] = {name: "md5:" + hashlib.md5((build / name).read_bytes()).hexdigest() for name in meta["checksums"]}
    (Path(report.path) / "meta.json").write_text(json.dumps(meta))
    rebuilt = _engine(root, cache, embedder).build()
    assert rebuilt.action == "built" and rebuilt.warning and "checksum" in rebuilt.warning


def _row(number: int) -> str:
    return json.dumps({"id": f"IL-0001/body/en/{number}", "digest": f"{number:016x}", "incident": "IL-0001"})


@pytest.mark.parametrize(("line", "bad"), [("", 3), ("{\"id\": \"x\"", 3), (_row(7) + ", " + _row(8), 3),
                                          ("{\"id\": 1, \"digest\": \"d\", \"incident\": \"i\"}", 3), ("[]", 3)])
def test_index_rows_are_read_in_one_call_and_a_bad_line_is_named(line: str, bad: int) -> None:
    good = [_row(n) for n in range(5)]
    ids, digests = store._row_columns(good)
    assert ids == [f"IL-0001/body/en/{n}" for n in range(5)] and digests == [f"{n:016x}" for n in range(5)]
    with pytest.raises(store.CacheDamaged, match=f"line {bad} is not a row"):
        store._row_columns([*good[:bad - 1], line, *good[bad - 1:]])
