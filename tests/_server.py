"""Start and stop a real `incidentlib serve` process for end-to-end tests."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

# Generous: the first start on a busy machine may load the embedder and the index.
STARTUP_SECONDS = 180


def executable() -> str:
    exe = shutil.which("incidentlib", path=str(Path(sys.executable).parent))
    assert exe, "the incidentlib console script is not installed next to this interpreter"
    return exe


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def running_server(*args: str) -> Iterator[str]:
    """``incidentlib serve ARGS`` on a free loopback port; yields its base URL and stops it."""
    port = free_port()
    process = subprocess.Popen([executable(), "serve", "--port", str(port), *args],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_SECONDS
    try:
        while True:
            if process.poll() is not None:
                pytest.fail(f"serve exited early:\n{process.stdout.read() if process.stdout else ''}")
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"serve did not become healthy within {STARTUP_SECONDS} s")
            time.sleep(0.5)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


def wait_for_tagger(base: str, timeout_s: float = 300.0) -> None:
    """Wait until the server's concept tagger is ready: until then pasted text is answered 503 (docs/api.md)."""
    import json
    import time
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{base}/health") as answer:
            if json.load(answer).get("tagger_ready"):
                return
        time.sleep(0.5)
    raise AssertionError(f"the concept tagger of {base} was not ready after {timeout_s:g} s")
