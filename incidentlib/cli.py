"""Command-line interface: a thin adapter over :class:`incidentlib.library.Library`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from .loader import check_library
from .paths import DATA_ENV, resolve_data_dir

app = typer.Typer(help="incidentlib: a bilingual knowledge graph of infrastructure incidents.", no_args_is_help=True)
out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

DataOpt = Annotated[Optional[Path], typer.Option("--data", envvar=DATA_ENV, help="Library directory (default: the bundled library).")]


@app.callback()
def _root() -> None:
    """incidentlib: a bilingual knowledge graph of infrastructure incidents."""


@app.command()
def validate(data: DataOpt = None) -> None:
    """Check a library directory and list every problem at once."""
    root = resolve_data_dir(data)
    loaded, problems = check_library(root)
    if problems:
        for problem in problems:
            err.print(f"[red]✗[/red] {problem}", markup=True, highlight=False)
        err.print(f"{len(problems)} problem(s) in {root}")
        raise typer.Exit(1)
    assert loaded is not None
    out.print(f"✓ {root}: {len(loaded.incidents)} incidents, {len(loaded.vocab)} concepts, no problems", highlight=False)


def main() -> None:
    app()
