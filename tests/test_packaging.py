"""The curated library ships inside the wheel and works from a non-editable install."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # servers, subprocesses and wheel builds

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(out), str(REPO)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    wheels = list(out.glob("incidentlib-*.whl"))
    assert len(wheels) == 1
    return wheels[0]


def test_wheel_contains_the_library(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "incidentlib/data/incidents/IL-0025.yaml" in names
    assert "incidentlib/data/vocab/components.yaml" in names
    incidents = [n for n in names if n.startswith("incidentlib/data/incidents/")]
    assert len(incidents) == len(list((REPO / "data" / "incidents").glob("*.yaml")))


def test_plain_install_lists_bundled_incidents(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target), str(wheel)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    env = {k: v for k, v in os.environ.items() if k != "INCIDENTLIB_DATA"}
    env["PYTHONPATH"] = str(target)
    # run from an unrelated directory so nothing can be found through the source tree
    proc = subprocess.run(
        [sys.executable, "-c", "import incidentlib, sys; print(incidentlib.__file__)"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120,
    )
    assert proc.stdout.strip().startswith(str(target))
    proc = subprocess.run(
        [sys.executable, "-m", "incidentlib", "list", "--json"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    page = json.loads(proc.stdout)
    assert page["total"] == len(list((REPO / "data" / "incidents").glob("*.yaml")))
    assert "IL-0025" in {item["id"] for item in page["items"]}
