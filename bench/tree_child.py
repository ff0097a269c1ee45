"""Running one measurement in a fresh interpreter that imports ``incidentlib`` from a given checkout.

The side-by-side benchmarks (``bench_projection.py``, ``bench_write_large.py``, ``bench_analysis_large.py``) compare
trees: each run is a ``python -c`` child whose script starts with :data:`PRELUDE` and goes on with its own steps.
The prelude puts the tree first on ``sys.path``, checks that ``incidentlib`` really comes from it, and defines
``memory()`` (``VmRSS``, ``RssAnon`` and ``VmHWM`` of ``/proc/self/status``, in MB).  The child is started from ``/``
so that no working directory shadows the tree.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PRELUDE = r"""
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])

def memory():
    values = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name = line.split(":")[0]
        if name in ("VmRSS", "RssAnon", "VmHWM"):
            values[name] = int(line.split()[1]) // 1024
    return values

import incidentlib
assert Path(incidentlib.__file__).resolve().is_relative_to(Path(sys.argv[1]).resolve()), incidentlib.__file__
"""


class Unfinished(Exception):
    """The child was still running after its timeout and was stopped."""


def run_in_tree(tree: Path, script: str, *args: str, timeout: float | None = None) -> list[dict[str, object]]:
    """Run :data:`PRELUDE` + ``script`` with ``sys.argv[1:] = [tree, *args]``; the JSON lines it printed, in order.

    A child that exits non-zero stops the benchmark with the end of its standard error; one still running after
    ``timeout`` seconds raises :class:`Unfinished`.
    """
    try:
        answer = subprocess.run([sys.executable, "-c", PRELUDE + script, str(tree), *args], capture_output=True,
                                text=True, check=False, cwd="/", timeout=timeout)
    except subprocess.TimeoutExpired as stopped:
        raise Unfinished(f"{tree}: still running after {timeout} s") from stopped
    if answer.returncode != 0:
        raise SystemExit(f"{tree}: the run failed:\n{answer.stderr[-3000:]}")
    return [json.loads(line) for line in answer.stdout.splitlines() if line.startswith("{")]
