"""The file memo (incidentlib.file_memo): a start whose data files are unchanged reads none of them, and any
change a write can make to a file (bytes, name, a file added) is seen, never answered from the memo."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest
import yaml
from conftest import small_library

from incidentlib import file_memo, parsed_cache
from incidentlib.library import Library
from incidentlib.loader import check_library, load_library
from incidentlib.search.engine import SearchConfig

IDS = ["IL-0021", "IL-0025", "IL-0126"]


@pytest.fixture
def started(tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A small library after a first start (records chunked, start snapshot written), files not racy."""
    monkeypatch.setattr(file_memo, "RACY_SECONDS", 0.0)  # the files were just written; the racy rule has its own test
    root, cache = small_library(tmp_path / "lib", data_dir, IDS), tmp_path / "cache"
    library = Library.open(root, SearchConfig(cache_dir=cache))
    _ = library._search_engine.chunks
    assert library.save_start_snapshot()
    return root, cache


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    read: list[Path] = []
    real = parsed_cache.DataFiles.read.__func__  # type: ignore[attr-defined]

    def counting(cls, root, paths, cache_dir=None, written=None):  # type: ignore[no-untyped-def]
        files = real(cls, root, paths, cache_dir, written)
        read.extend(files.files)
        return files

    monkeypatch.setattr(parsed_cache.DataFiles, "read", classmethod(counting))
    return read


def test_an_unchanged_library_starts_without_reading_its_files(started: tuple[Path, Path],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    root, cache = started
    memos = list((cache / file_memo.MEMO_DIR).glob("*.json"))
    assert len(memos) == 1
    read = _count_reads(monkeypatch)
    data, problems = check_library(root, cache)
    assert not problems and data is not None and data.chunks is not None  # from the start snapshot
    assert read == []
    fresh = load_library(root)  # no cache: every file read and parsed
    assert data.content_hash == fresh.content_hash and data.incidents == fresh.incidents


def test_a_file_rewritten_with_the_same_size_and_mtime_is_read_again(started: tuple[Path, Path],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    root, cache = started
    path = root / "incidents" / f"{IDS[0]}.yaml"
    before = path.stat()
    text = path.read_text(encoding="utf-8")
    at = text.index("en: ", text.index("title:")) + len("en: ")
    at = next(n for n in range(at, len(text)) if text[n].isascii() and text[n].isalpha())
    path.write_text(text[:at] + text[at].swapcase() + text[at + 1:], encoding="utf-8")  # same size, other bytes
    assert path.stat().st_size == before.st_size
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # mtime set back; the ctime cannot be
    read = _count_reads(monkeypatch)
    data, problems = check_library(root, cache)
    assert not problems and data is not None
    assert path in read  # the memo did not answer
    assert data.content_hash == load_library(root).content_hash


def test_a_file_added_or_renamed_is_seen(started: tuple[Path, Path], data_dir: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    root, cache = started
    doc = yaml.safe_load((data_dir / "incidents" / "IL-0133.yaml").read_text(encoding="utf-8"))
    doc.pop("related", None)  # links to incidents this small library does not hold
    (root / "incidents" / "IL-0133.yaml").write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    read = _count_reads(monkeypatch)
    data, problems = check_library(root, cache)
    assert not problems and data is not None and "IL-0133" in data.incidents and read
    # the new memo answers the next start; a rename is a different set of names
    read.clear()
    assert check_library(root, cache)[0] is not None and read != []  # no snapshot of the new files yet: parsed
    (root / "incidents" / "IL-0133.yaml").rename(root / "incidents" / "IL-0133.yml")
    read.clear()
    data, problems = check_library(root, cache)
    assert not problems and data is not None and read


def test_a_damaged_memo_is_ignored_with_a_warning(started: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    root, cache = started
    memo = next((cache / file_memo.MEMO_DIR).glob("*.json"))
    memo.write_bytes(b'{"format": 1, "root": ')  # cut short
    read = _count_reads(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="incidentlib.file_memo"):
        data, problems = check_library(root, cache)
    assert not problems and data is not None and read
    assert any("cannot be read" in record.message for record in caplog.records)
    assert data.content_hash == load_library(root).content_hash
    # rewritten whole by that start: the next one reads nothing
    read.clear()
    assert check_library(root, cache)[0] is not None and read == []


def test_a_memo_of_another_library_or_format_is_not_used(started: tuple[Path, Path], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    root, cache = started
    names = {f"incidents/{i}.yaml": root / "incidents" / f"{i}.yaml" for i in IDS}
    names |= {parsed_cache.relative_name(root, p): p for p in (root / "vocab").glob("*.yaml")}
    assert file_memo.recall(cache, root, names) is not None
    assert file_memo.recall(cache, tmp_path / "elsewhere", names) is None
    monkeypatch.setattr(file_memo, "MEMO_FORMAT_VERSION", file_memo.MEMO_FORMAT_VERSION + 1)
    assert file_memo.recall(cache, root, names) is None


def test_no_memo_while_a_file_is_newer_than_the_racy_window(tmp_path: Path) -> None:
    root = tmp_path / "lib"
    (root / "incidents").mkdir(parents=True)
    fresh = root / "incidents" / "a.yaml"
    fresh.write_text("id: a\n", encoding="utf-8")
    status = fresh.stat()
    signatures = {"incidents/a.yaml": file_memo.signature(status)}
    hashes = file_memo.FileHashes("key", "hash")
    assert not file_memo.remember(tmp_path / "cache", root, signatures, hashes)  # changed just now
    assert not file_memo.memo_path(tmp_path / "cache", root).exists()
    old = time.time_ns() - int(10 * file_memo.RACY_SECONDS * 1e9)
    aged = {"incidents/a.yaml": (status.st_size, old, old, status.st_ino, status.st_dev)}
    assert file_memo.remember(tmp_path / "cache", root, aged, hashes)
    # the signature on disk (ctime now) is not the remembered one
    assert file_memo.recall(tmp_path / "cache", root, {"incidents/a.yaml": fresh}) is None


def test_the_listing_for_the_memo_is_the_loaders_listing(tmp_path: Path) -> None:
    from incidentlib.loader import _data_file_names, _data_files

    root = tmp_path / "lib"
    for sub in ("vocab", "incidents"):
        (root / sub).mkdir(parents=True)
        for name in ("a.yaml", "b.yml", ".hidden.yaml", "notes.txt", "c.yaml.bak"):
            (root / sub / name).write_text("x: 1\n", encoding="utf-8")
        (root / sub / "folder.yaml").mkdir()
        (root / sub / "dangling.yml").symlink_to(root / "nowhere")
    expected = {parsed_cache.relative_name(root, path): str(path) for path in _data_files(root)}
    assert _data_file_names(root) == expected
    assert set(expected) == {f"{sub}/{name}" for sub in ("vocab", "incidents")
                             for name in ("a.yaml", "b.yml", ".hidden.yaml", "folder.yaml", "dangling.yml")}
