from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from incidentlib.cli import app
from incidentlib.evaluation import default_queries_path, load_queries


def test_bundled_queries_are_valid_and_bilingual(library) -> None:
    items = load_queries(default_queries_path(), library)
    assert len(items) >= 80
    langs = {q.lang for q in items}
    assert {"ko", "en", "log"} <= langs
    covered = {i for q in items for i in q.expected}
    assert len(covered) >= 100


def test_bad_query_file_is_reported(tmp_path: Path, library) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"query": "x", "lang": "en", "expected": ["IL-9999"]}) + "\n{oops\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"q\.jsonl:1") as info:
        load_queries(path, library)
    assert "q.jsonl:1" in str(info.value) and "IL-9999" in str(info.value) and "q.jsonl:2" in str(info.value)


@pytest.mark.slow
def test_eval_command_prints_a_table(tmp_path: Path, cache_dir: Path, search_library) -> None:
    path = tmp_path / "q.jsonl"
    rows = [
        {"query": "정규 표현식 때문에 엣지 서버 CPU 가 100% 가 된 장애", "lang": "ko", "expected": ["IL-0101"]},
        {"query": "a mistyped command took S3 down in us-east-1", "lang": "en", "expected": ["IL-0076"]},
        {"query": "limited width: x4 < x16", "lang": "log", "expected": ["IL-0025"]},
    ]
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["eval", "--queries", str(path), "--embedders", "use-m3", "--cache", str(cache_dir), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    modes = {m["mode"]: m for m in report["modes"]}
    assert {"lexical (BM25)", "dense use-m3", "hybrid-rrf use-m3", "hybrid-weighted use-m3", "similar use-m3"} <= modes.keys()
    for mode in modes.values():
        assert 0.0 <= mode["overall"]["recall_at_5"] <= 1.0
        assert set(mode["by_lang"]) >= {"ko", "en", "log"}
    table = CliRunner().invoke(app, ["eval", "--queries", str(path), "--embedders", "use-m3", "--cache", str(cache_dir)])
    assert "| mode | R@1 | R@5 | R@10 | MRR | nDCG@10 |" in table.stdout
