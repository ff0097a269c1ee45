"""A real `incidentlib serve` answers searches before its graph is built, and graph requests once it is."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests._server import STARTUP_SECONDS, executable, free_port

pytestmark = pytest.mark.slow  # a real server process on the bundled library

ASK = 'ASK { ?i dcterms:identifier "IL-0025" }'
#: How often the test looks for the server's graph process: far shorter than building the bundled graph.
POLL_SECONDS = 0.005


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the graph process through /proc")
def test_serve_answers_search_before_the_graph_is_ready(search_library, data_dir: Path, cache_dir: Path) -> None:
    port = free_port()
    process = subprocess.Popen([executable(), "serve", "--port", str(port), "--data", str(data_dir), "--cache",
                                str(cache_dir), "--no-mcp", "--sparql-timeout", "1"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    graph_process: int | None = None
    try:
        # the server forks its graph process when it starts listening: hold that process still, so the graph
        # stays unbuilt for as long as the test needs (a slow build of a large library, made deterministic)
        deadline = time.monotonic() + STARTUP_SECONDS
        while graph_process is None:
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            assert time.monotonic() < deadline, "serve did not fork its graph process"
            # a fork of the server (same command line), not a program it runs
            forks = [pid for pid in _children(process.pid) if _cmdline(pid) == _cmdline(process.pid)]
            if forks:
                graph_process = forks[0]
                os.kill(graph_process, signal.SIGSTOP)
            time.sleep(POLL_SECONDS)
        while True:
            try:
                health = httpx.get(f"{base}/health", timeout=5).json()
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "serve did not listen"
                time.sleep(0.1)
        assert health["graph_ready"] is False
        found = httpx.get(f"{base}/search", params={"q": "NCCL watchdog timeout", "k": 5}, timeout=60).json()
        assert [r["id"] for r in found["results"]] == [r.id for r in search_library.search("NCCL watchdog timeout", k=5).results]
        refused = httpx.post(f"{base}/sparql", content=ASK, headers={"content-type": "application/sparql-query"}, timeout=30)
        assert refused.status_code == 503 and int(refused.headers["retry-after"]) > 0
        assert "still being built" in refused.json()["detail"]
        assert httpx.get(f"{base}/health", timeout=5).json()["graph_ready"] is False

        os.kill(graph_process, signal.SIGCONT)
        deadline = time.monotonic() + STARTUP_SECONDS
        while not httpx.get(f"{base}/health", timeout=5).json()["graph_ready"]:
            assert time.monotonic() < deadline, "the graph was never ready"
            time.sleep(0.1)
        answer = httpx.post(f"{base}/sparql", content=ASK, headers={"content-type": "application/sparql-query"}, timeout=30)
        assert answer.status_code == 200 and answer.json()["boolean"] is True
        related = httpx.get(f"{base}/incidents/IL-0025/related", params={"limit": 5}, timeout=30).json()["items"]
        assert [item["id"] for item in related] == [item.id for item in search_library.related("IL-0025", limit=5)]
    finally:
        if graph_process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(graph_process, signal.SIGCONT)
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
