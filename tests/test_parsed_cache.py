"""The parsed-YAML cache (incidentlib.parsed_cache): reused when the bytes are the same, never a source of truth."""

from __future__ import annotations

import logging
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from incidentlib import parsed_cache
from incidentlib.checksum import digest
from incidentlib.loader import LibraryData, Problem, check_library, content_hash

INCIDENTS_KEPT = 12  # a few incidents keep each load fast; links to the others become problems, which is fine here


@pytest.fixture()
def small(tmp_path: Path, data_dir: Path) -> Path:
    root = tmp_path / "lib"
    shutil.copytree(data_dir / "vocab", root / "vocab")
    (root / "incidents").mkdir()
    for path in sorted((data_dir / "incidents").glob("*.yaml"))[:INCIDENTS_KEPT]:
        shutil.copy2(path, root / "incidents" / path.name)
    return root


@pytest.fixture()
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the files PyYAML parses from now on."""
    names: list[str] = []
    real = parsed_cache.parse_yaml

    def counting(data: bytes, name: str) -> object:
        names.append(name)
        return real(data, name)

    monkeypatch.setattr(parsed_cache, "parse_yaml", counting)
    return names


def _files(root: Path) -> int:
    return len([*(root / "vocab").glob("*.yaml"), *(root / "incidents").glob("*.yaml")])


def _snapshot(result: tuple[LibraryData | None, list[Problem]]) -> tuple[Any, ...]:
    data, problems = result
    assert data is not None
    return ({key: incident.model_dump() for key, incident in data.incidents.items()},
            [concept.model_dump() for concept in data.vocab], data.content_hash, [str(p) for p in problems])


def _cache_files(cache: Path) -> list[Path]:
    return sorted((cache / parsed_cache.PARSED_DIR).glob("*.pkl"))


def test_a_warm_load_parses_nothing_and_gives_the_same_library(small: Path, tmp_path: Path, parsed: list[str]) -> None:
    cache = tmp_path / "cache"
    first = check_library(small, cache)
    assert len(parsed) == _files(small) > INCIDENTS_KEPT
    assert len(_cache_files(cache)) == 1
    parsed.clear()
    warm = check_library(small, cache)
    assert parsed == []
    assert _snapshot(warm) == _snapshot(first) == _snapshot(check_library(small))
    assert warm[0] is not None and warm[0].content_hash == content_hash(small)
    assert warm[1]  # the dropped incidents' links are reported on a warm load too


def test_a_changed_data_file_is_parsed_again(small: Path, tmp_path: Path, parsed: list[str]) -> None:
    cache = tmp_path / "cache"
    before, _ = check_library(small, cache)
    assert before is not None
    path = sorted((small / "incidents").glob("*.yaml"))[0]
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    doc["title"]["en"] += " (edited)"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False), encoding="utf-8")
    parsed.clear()
    after, _ = check_library(small, cache)
    assert after is not None and str(path) in parsed
    assert after.incidents[path.stem].title.en == before.incidents[path.stem].title.en + " (edited)"
    assert after.content_hash != before.content_hash
    assert len(_cache_files(cache)) == 2  # one per content: the same library at another place reuses either


def test_a_new_format_version_is_parsed_again(small: Path, tmp_path: Path, parsed: list[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    first = check_library(small, cache)
    monkeypatch.setattr(parsed_cache, "PARSED_FORMAT_VERSION", parsed_cache.PARSED_FORMAT_VERSION + 1)
    parsed.clear()
    again = check_library(small, cache)
    assert len(parsed) == _files(small)
    assert _snapshot(again) == _snapshot(first)
    assert len(_cache_files(cache)) == 2


def _flip_last_byte(blob: bytes) -> bytes:
    return blob[:-1] + bytes([blob[-1] ^ 0x01])


def _garbage(blob: bytes) -> bytes:
    return b"not a cache"


@pytest.mark.parametrize("damage", [_flip_last_byte, _garbage])  # a truncated file fails the same checksum as a flipped byte
def test_a_damaged_cache_falls_back_to_the_yaml_and_is_rewritten(small: Path, tmp_path: Path, parsed: list[str], damage: Any,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    cache = tmp_path / "cache"
    first = check_library(small, cache)
    [saved] = _cache_files(cache)
    saved.write_bytes(damage(saved.read_bytes()))
    parsed.clear()
    with caplog.at_level(logging.WARNING, logger="incidentlib.parsed_cache"):
        again = check_library(small, cache)
    assert len(parsed) == _files(small)
    assert _snapshot(again) == _snapshot(first)
    assert "corrupt" in caplog.text
    parsed.clear()
    check_library(small, cache)
    assert parsed == []  # rewritten whole


def test_a_cache_naming_any_other_global_is_refused(small: Path, tmp_path: Path, parsed: list[str],
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """Even with a valid checksum, a file that would make pickle import something is not loaded."""
    cache = tmp_path / "cache"
    first = check_library(small, cache)
    [saved] = _cache_files(cache)
    payload = pickle.dumps({"vocab/causes.yaml": os.getcwd})
    saved.write_bytes(b"incidentlib-parsed\0" + digest(payload) + payload)
    parsed.clear()
    with caplog.at_level(logging.WARNING, logger="incidentlib.parsed_cache"):
        again = check_library(small, cache)
    assert "may not name posix.getcwd" in caplog.text
    assert len(parsed) == _files(small) and _snapshot(again) == _snapshot(first)


def test_problems_are_the_same_with_a_warm_cache(small: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    check_library(small, cache)  # warm
    (small / "incidents" / "IL-9998.yaml").mkdir()  # not a regular file: no bytes, so not in the key
    warm = check_library(small, cache)[1]
    assert warm == check_library(small)[1]
    assert any("not a regular file" in p.message for p in warm)
    (small / "incidents" / "IL-9999.yaml").write_text("id: [unclosed\n", encoding="utf-8")
    broken = check_library(small, cache)[1]
    assert broken == check_library(small)[1]
    assert any(p.file == "incidents/IL-9999.yaml" and "not valid YAML" in p.message and "IL-9999.yaml" in p.message
               for p in broken)


def test_an_unwritable_cache_costs_only_time(small: Path, tmp_path: Path, parsed: list[str]) -> None:
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder would be", encoding="utf-8")
    data, _ = check_library(small, blocked / "cache")
    assert data is not None and len(data.incidents) == INCIDENTS_KEPT
    assert not (blocked / "cache").exists()
