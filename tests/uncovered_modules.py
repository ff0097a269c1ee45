"""List the package modules a coverage run executed no line of; exit 1 if there is one.

Run after the fast subset, e.g.::

    python -m pytest -q -m "not slow" --cov=incidentlib --cov-report= && python tests/uncovered_modules.py

It prints every module with its executed/total statements, so the table shows how far the fast
subset reaches; a module with statements and none executed fails the check.
"""

from __future__ import annotations

import sys
from pathlib import Path

import coverage

PACKAGE = Path(__file__).resolve().parent.parent / "incidentlib"


def table(data_file: str = ".coverage") -> list[tuple[str, int, int]]:
    """(module path, executed statements, statements) for every ``.py`` file of the package."""
    cov = coverage.Coverage(data_file=data_file)
    cov.load()
    rows = []
    for path in sorted(PACKAGE.rglob("*.py")):
        _, statements, _, missing, _ = cov.analysis2(str(path))
        rows.append((path.relative_to(PACKAGE.parent).as_posix(), len(statements) - len(missing), len(statements)))
    return rows


def main() -> int:
    rows = table(sys.argv[1] if len(sys.argv) > 1 else ".coverage")
    width = max(len(name) for name, _, _ in rows)
    for name, executed, total in rows:
        print(f"{name:<{width}}  {executed:>4}/{total:<4}")
    dark = [name for name, executed, total in rows if total and not executed]
    if dark:
        print(f"no line executed in {len(dark)} module(s): {', '.join(dark)}", file=sys.stderr)
        return 1
    print(f"every module of {len(rows)} ran at least one line")
    return 0


if __name__ == "__main__":
    sys.exit(main())
