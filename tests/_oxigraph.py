"""Start and stop a real `oxigraph serve` process (the `oxigraph` package from PyPI) for graph-store tests."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests._server import free_port

# A fresh server answers within a second; a loaded 2-core machine gets ten.
STARTUP_SECONDS = 10.0
STOP_SECONDS = 10.0


def oxigraph_binary() -> str:
    """The `oxigraph` executable installed by `pip install oxigraph` beside this interpreter."""
    for folder in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        found = shutil.which("oxigraph", path=folder)
        if found:
            return found
    found = shutil.which("oxigraph")
    assert found, "the oxigraph server is not installed (pip install oxigraph, part of the test extra)"
    return found


@contextmanager
def oxigraph_server(location: Path, *extra: str) -> Iterator[str]:
    """``oxigraph serve`` on a free loopback port with its data in ``location``; yields the base URL, then stops it."""
    port = free_port()
    process = subprocess.Popen([oxigraph_binary(), "serve", "--location", str(location), "--bind", f"127.0.0.1:{port}", *extra],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_SECONDS
    try:
        while True:
            if process.poll() is not None:
                pytest.fail(f"oxigraph serve exited early:\n{process.stderr.read() if process.stderr else ''}")
            try:
                with urllib.request.urlopen(f"{base}/query?query=ASK%7B%7D", timeout=2) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"oxigraph serve did not answer within {STARTUP_SECONDS} s")
            time.sleep(0.1)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
