"""The OpenAPI contract, checked by Schemathesis (every check) against a real `incidentlib serve` process."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_hardening_live import _serve

from incidentlib.library import Library

CONFIG = Path(__file__).parent / "schemathesis" / "schemathesis.toml"
# Bounded so CI stays short: a few examples per operation, at most three minutes in all.
MAX_EXAMPLES = 10
MAX_SECONDS = 180
# The heaviest routes (maps, embedding clusters) are built on first use and take tens of seconds on a
# loaded 2-core machine; response time is not what this test is about (see bench/bench_load.py).
REQUEST_TIMEOUT = 300


def _st() -> str:
    exe = shutil.which("st", path=str(Path(sys.executable).parent)) or shutil.which("st")
    assert exe, "schemathesis is not installed (pip install -e '.[test]')"
    return exe


def _writable_copy(search_library: Library, data_dir: Path, cache_dir: Path, target: Path) -> Path:
    """A copy of the bundled library (the writes land in its store, not in the repository) that
    reuses the session's built index: the index cache is keyed by content, so the copy finds it."""
    shutil.copytree(data_dir, target)
    return target


@pytest.mark.slow
def test_schemathesis_all_checks_pass(search_library, data_dir: Path, cache_dir: Path, tmp_path: Path) -> None:
    # The write operations run too, authenticated as admin, against a scratch copy of the library.
    library_dir = _writable_copy(search_library, data_dir, cache_dir, tmp_path / "lib")
    admin = Library.open(library_dir).create_token("contract-test", "admin").token
    # rate limits off: thousands of generated requests from one client are the point here
    process, base = _serve(library_dir, cache_dir, "--rate-limit", "0")
    try:
        result = subprocess.run(
            [_st(), "--no-color", "--config-file", str(CONFIG), "run", f"{base}/openapi.json", "--checks", "all",
             "--max-examples", str(MAX_EXAMPLES), "--max-time", str(MAX_SECONDS), "--request-timeout", str(REQUEST_TIMEOUT),
             "--max-response-time", str(REQUEST_TIMEOUT),
             # one worker: Hypothesis' source inspection is not thread-safe and can raise an internal error
             "--workers", "1", "--seed", "14", "--header", f"Authorization: Bearer {admin}", "--report", "junit", "--report-dir", str(tmp_path)],
            capture_output=True, text=True, check=False, timeout=MAX_SECONDS + 2 * REQUEST_TIMEOUT,
            env={**os.environ, "SCHEMATHESIS_HOOKS": "hooks", "PYTHONPATH": str(CONFIG.parent)},
        )
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:  # a heavy request still running: the answer is already in
            process.kill()
            process.wait(timeout=30)
    output = result.stdout + result.stderr
    summary = re.search(r"Selected: (\d+)/(\d+)", output)
    assert summary and int(summary.group(1)) == int(summary.group(2)) >= 20, output[-3000:]
    assert result.returncode == 0, output[-6000:]
    final = output.strip().splitlines()[-1]
    assert not re.search(r"\d+ (failures?|errors?)\b", final), output[-3000:]
