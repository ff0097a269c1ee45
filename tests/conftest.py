from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from incidentlib import Library
from incidentlib.paths import bundled_data_dir

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return bundled_data_dir()


@pytest.fixture(scope="session")
def library(data_dir: Path) -> Library:
    return Library.open(data_dir)


@pytest.fixture()
def library_copy(tmp_path: Path, data_dir: Path) -> Path:
    """A writable copy of the bundled library, for tests that break or extend it."""
    target = tmp_path / "lib"
    shutil.copytree(data_dir, target)
    return target
