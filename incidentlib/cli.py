"""Command-line interface: a thin adapter over :class:`incidentlib.library.Library`.

Every command that prints data takes ``--json``; those shapes are documented in
docs/json.md and are the same models the HTTP API returns.
"""

from __future__ import annotations

import json
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from pydantic import BaseModel, TypeAdapter, ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .embeddings import DEFAULT_BACKEND, EmbedderConfig
from .graph.export import ExportFormat
from .graph.knowledge import UnknownNodeError
from .graph.sparql import SparqlError
from .library import FilterError, IncidentFilter, IncidentNotFound, Library
from .loader import LibraryError
from .paths import CACHE_ENV, DATA_ENV, resolve_data_dir
from .search.engine import SearchConfig, SearchMode
from .search.fusion import FusionMethod
from .search.service import QueryError

app = typer.Typer(
    help="incidentlib: a bilingual knowledge graph of infrastructure incidents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
out = Console(soft_wrap=True, highlight=False)
err = Console(stderr=True, soft_wrap=True, highlight=False)


class LangChoice(str, Enum):
    en = "en"
    ko = "ko"


DataOpt = Annotated[
    Optional[Path], typer.Option("--data", envvar=DATA_ENV, help="Library directory (default: the bundled library).")
]
LangOpt = Annotated[LangChoice, typer.Option("--lang", "-l", help="Language of labels and text.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON (see docs/json.md).")]
EmbedderOpt = Annotated[
    str, typer.Option("--embedder", "-e", envvar="INCIDENTLIB_EMBEDDER", help="e5-small, use-m3 or st:<model path>.")
]
CacheOpt = Annotated[
    Optional[Path], typer.Option("--cache", envvar=CACHE_ENV, help="Index cache directory (default: ~/.cache/incidentlib).")
]
KOpt = Annotated[int, typer.Option("-k", "--k", min=1, max=100, help="Number of results (at most 100).")]


def fail(message: str, code: int = 1) -> typer.Exit:
    err.print(f"[red]error:[/red] {escape(message)}")
    return typer.Exit(code)


def open_library(data: Path | None, embedder: str = DEFAULT_BACKEND, cache: Path | None = None,
                 fusion: FusionMethod | None = None) -> Library:
    try:
        config = SearchConfig(embedder=EmbedderConfig(backend=embedder), cache_dir=cache,
                              **({"fusion": fusion} if fusion else {}))
    except ValueError as exc:
        raise fail(str(exc), 2) from None
    try:
        return Library.open(data, config)
    except LibraryError as exc:
        raise fail(f"{exc}\nrun `incidentlib validate` for the full list") from None


def build_with_progress(library: Library, quiet: bool = False) -> None:
    """Make the dense index fresh, with a progress bar on stderr when embedding is needed."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), console=err, transient=True, disable=quiet) as bar:
        task = bar.add_task(f"embedding chunks ({library.search_config.embedder.backend})", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        report = library.build_index(progress)
    if not quiet and report.action != "reused":
        err.print(f"index {report.action}: {report.chunks} chunks, {report.embedded} embedded, "
                  f"{report.reused} reused, {report.index_kind}, {report.seconds:.1f}s")


def emit_json(value: BaseModel | list | dict) -> None:
    if isinstance(value, BaseModel):
        text = value.model_dump_json(indent=2)
    elif isinstance(value, list) and value and isinstance(value[0], BaseModel):
        text = TypeAdapter(list[type(value[0])]).dump_json(value, indent=2).decode()
    else:
        text = json.dumps(value, ensure_ascii=False, indent=2)
    sys.stdout.write(text + "\n")


@app.callback()
def _root() -> None:
    """incidentlib: a bilingual knowledge graph of infrastructure incidents."""


@app.command()
def validate(
    data: DataOpt = None,
    as_json: JsonOpt = False,
    strict: Annotated[bool, typer.Option(
        "--strict", help="Also apply the editorial rules: both languages in title, summary and body; symptoms; "
                         "source kinds; Korean particle spacing; duplicates.")] = False,
) -> None:
    """Check a library directory and list every problem at once (exit 1 if any)."""
    root = resolve_data_dir(data)
    loaded, problems = Library.check(root, strict=strict)
    if as_json:
        emit_json({"root": str(root), "ok": not problems, "problems": [p.model_dump() for p in problems],
                   "incidents": len(loaded.incidents) if loaded else 0})
        if problems:
            raise typer.Exit(1)
        return
    if problems:
        for problem in problems:
            err.print(f"[red]✗[/red] {escape(str(problem))}")
        err.print(f"{len(problems)} problem(s) in {root}")
        raise typer.Exit(1)
    assert loaded is not None
    out.print(f"✓ {root}: {len(loaded.incidents)} incidents, {len(loaded.vocab)} concepts, no problems")


@app.command("list")
def list_cmd(
    data: DataOpt = None,
    lang: LangOpt = LangChoice.en,
    org: Annotated[Optional[str], typer.Option(help="Organization id or name.")] = None,
    component: Annotated[Optional[str], typer.Option(help="Component id or label (narrower ones match too).")] = None,
    cause: Annotated[Optional[str], typer.Option(help="Cause id or label.")] = None,
    symptom: Annotated[Optional[str], typer.Option(help="Symptom id or label.")] = None,
    tag: Annotated[Optional[str], typer.Option(help="Tag id or label.")] = None,
    year: Annotated[Optional[int], typer.Option(help="Only this year.")] = None,
    year_from: Annotated[Optional[int], typer.Option(help="From this year.")] = None,
    year_to: Annotated[Optional[int], typer.Option(help="Up to this year.")] = None,
    severity: Annotated[Optional[str], typer.Option(help="sev1..sev4")] = None,
    limit: Annotated[Optional[int], typer.Option(min=0, help="At most this many (default: all).")] = None,
    offset: Annotated[int, typer.Option(min=0)] = 0,
    as_json: JsonOpt = False,
) -> None:
    """List incidents, optionally filtered."""
    library = open_library(data)
    try:
        filters = IncidentFilter(
            org=org, component=component, cause=cause, symptom=symptom, tag=tag, severity=severity,
            year_from=year if year is not None else year_from, year_to=year if year is not None else year_to,
        )
        page = library.list_incidents(filters, lang=lang.value, limit=limit, offset=offset)
    except (FilterError, ValueError) as exc:
        raise fail(str(exc), 2) from None
    if as_json:
        emit_json(page)
        return
    table = Table(title=f"{page.total} incident(s)", show_lines=False)
    for column in ("id", "date", "org", "title"):
        table.add_column(column, overflow="fold")
    for item in page.items:
        table.add_row(item.id, item.date or "—", item.org_label, item.title + (" [draft]" if item.status == "draft" else ""))
    out.print(table)


@app.command()
def show(
    incident_id: Annotated[str, typer.Argument(help="Incident id, e.g. IL-0025.")],
    data: DataOpt = None,
    lang: LangOpt = LangChoice.en,
    as_json: JsonOpt = False,
) -> None:
    """Show one incident in full."""
    library = open_library(data)
    try:
        detail = library.detail(incident_id, lang=lang.value)
    except IncidentNotFound as exc:
        raise fail(str(exc)) from None
    if as_json:
        emit_json(detail)
        return
    out.print(f"[bold]{detail.id}[/bold] {escape(detail.org.label)} · {detail.date or 'date unknown'}" + (f" · {detail.severity}" if detail.severity else ""))
    out.print(f"[bold]{escape(detail.title)}[/bold]")
    out.print(escape(detail.summary) + "\n")
    out.print(escape(detail.body) + "\n")
    for name, refs in (("components", detail.components), ("causes", detail.causes), ("symptoms", detail.symptoms)):
        if refs:
            out.print(f"[dim]{name}:[/dim] " + ", ".join(escape(r.label) for r in refs))
    if detail.signals:
        out.print("[dim]signals:[/dim]")
        for signal in detail.signals:
            out.print(f"  {escape(signal.text)}")
    if detail.lessons:
        out.print("[dim]lessons:[/dim]")
        for lesson in detail.lessons:
            out.print(f"  - {escape(lesson)}")
    out.print("[dim]sources:[/dim]")
    for source in detail.sources:
        out.print(f"  {escape(source.title)} — {source.url}")
    _print_related(detail.related, lang.value)


def _print_related(items: list, lang: str) -> None:
    if not items:
        out.print("no related incidents")
        return
    cause_word, shared_word = ("같은 원인", "공통") if lang == "ko" else ("same cause", "shared")
    out.print(f"[dim]related ({cause_word} · {shared_word} …):[/dim]")
    for item in items:
        components = [c.label for c in item.shared_concepts if c.kind == "component"]
        causes = [c.label for c in item.shared_concepts if c.kind == "cause"]
        parts = []
        if causes:
            parts.append(f"{cause_word} {', '.join(causes)}")
        if components:
            parts.append(f"{shared_word} {', '.join(components)}")
        mark = " ✎" if item.curated_reason else ""
        out.print(f"  {item.id} [{item.score:.2f}]{mark} {escape(item.title)} — {escape(' · '.join(parts) or item.curated_reason or '')}")


@app.command()
def related(
    incident_id: Annotated[str, typer.Argument(help="Incident id, e.g. IL-0025.")],
    data: DataOpt = None,
    lang: LangOpt = LangChoice.en,
    limit: Annotated[int, typer.Option(min=1, max=500)] = 10,
    as_json: JsonOpt = False,
) -> None:
    """Incidents that share components or causes, rarer shared concepts weighing more."""
    library = open_library(data)
    try:
        items = library.related(incident_id, lang=lang.value, limit=limit)
    except IncidentNotFound as exc:
        raise fail(str(exc)) from None
    if as_json:
        emit_json([item.model_dump(mode="json") for item in items])
        return
    _print_related(items, lang.value)


@app.command()
def topic(
    concept: Annotated[str, typer.Argument(help="Concept id or label, e.g. nccl or 'InfiniBand'.")],
    data: DataOpt = None,
    lang: LangOpt = LangChoice.en,
    as_json: JsonOpt = False,
) -> None:
    """A concept's page: definition, incidents, co-occurring concepts, organizations."""
    library = open_library(data)
    try:
        page = library.topic(concept, lang=lang.value)
    except UnknownNodeError as exc:
        raise fail(str(exc)) from None
    if as_json:
        emit_json(page)
        return
    out.print(f"[bold]{escape(page.label)}[/bold] ({page.kind} {page.id})")
    if page.definition:
        out.print(escape(page.definition))
    if page.alt_labels:
        out.print("[dim]also:[/dim] " + escape(", ".join(page.alt_labels)))
    out.print(f"[dim]{len(page.incidents)} incident(s):[/dim]")
    for item in page.incidents:
        out.print(f"  {item.id} {item.date or '—'} {escape(item.title)}")
    if page.co_occurring:
        out.print("[dim]seen with:[/dim] " + escape(", ".join(f"{c.label} ({c.count})" for c in page.co_occurring)))
    if page.organizations:
        out.print("[dim]organizations:[/dim] " + escape(", ".join(f"{o.label} ({o.count})" for o in page.organizations)))


@app.command()
def neighbors(
    node: Annotated[str, typer.Argument(help="Incident id, concept id or label.")],
    depth: Annotated[int, typer.Option(min=1, max=3)] = 1,
    data: DataOpt = None,
    lang: LangOpt = LangChoice.en,
) -> None:
    """Node-link JSON of everything within DEPTH hops of a node."""
    library = open_library(data)
    try:
        emit_json(library.neighbors(node, depth=depth, lang=lang.value))
    except UnknownNodeError as exc:
        raise fail(str(exc)) from None


@app.command()
def path(
    source: Annotated[str, typer.Argument(help="Start: incident id, concept id or label.")],
    target: Annotated[str, typer.Argument(help="End: incident id, concept id or label.")],
    data: DataOpt = None,
    lang: LangOpt = LangChoice.en,
    as_json: JsonOpt = False,
) -> None:
    """The shortest path between two nodes, and the concepts on the way."""
    library = open_library(data)
    try:
        result = library.path(source, target, lang=lang.value)
    except UnknownNodeError as exc:
        raise fail(str(exc)) from None
    if result is None:
        raise fail(f"no path between {source} and {target}")
    if as_json:
        emit_json(result)
        return
    out.print(" → ".join(f"{escape(n.label)} [dim]({n.type})[/dim]" for n in result.nodes))


@app.command()
def export(
    fmt: Annotated[ExportFormat, typer.Option("--format", "-f", help="Output format.")] = ExportFormat.turtle,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="File to write (default: stdout).")] = None,
    data: DataOpt = None,
) -> None:
    """Export the library as Turtle, JSON-LD, N-Triples, GraphML or JSON Lines."""
    library = open_library(data)
    text = library.export(fmt)
    if output is None:
        sys.stdout.write(text)
        return
    from .storage import atomic_write_text

    atomic_write_text(output, text)
    err.print(f"wrote {output} ({len(text.encode()):,} bytes, {fmt.value})")


@app.command()
def sparql(
    query: Annotated[str, typer.Argument(help="A SPARQL query, or @FILE to read it from a file, or - for stdin.")],
    data: DataOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run a read-only SPARQL query (SELECT, ASK, CONSTRUCT, DESCRIBE). Prefixes il:, skos:, dcterms:, schema: are predefined."""
    if query == "-":
        query = sys.stdin.read()
    elif query.startswith("@"):
        query = Path(query[1:]).read_text(encoding="utf-8")
    library = open_library(data)
    try:
        result = library.sparql(query)
    except SparqlError as exc:
        raise fail(str(exc), 2) from None
    if as_json:
        if result.json_results is not None:
            emit_json(result.json_results)
        else:
            sys.stdout.write(result.turtle or "")
        return
    if result.type == "ASK":
        out.print("yes" if result.boolean else "no")
    elif result.type == "SELECT":
        table = Table(*result.variables)
        for row in result.rows:
            table.add_row(*[escape(row.get(v) or "") for v in result.variables])
        out.print(table)
        out.print(f"{len(result.rows)} row(s)")
    else:
        sys.stdout.write(result.turtle or "")


def _filters(org, component, cause, symptom, tag, year_from, year_to, severity) -> IncidentFilter:
    return IncidentFilter(org=org, component=component, cause=cause, symptom=symptom, tag=tag,
                          year_from=year_from, year_to=year_to, severity=severity)


OrgOpt = Annotated[Optional[str], typer.Option(help="Filter: organization.")]
ComponentOpt = Annotated[Optional[str], typer.Option(help="Filter: component (narrower ones match too).")]
CauseOpt = Annotated[Optional[str], typer.Option(help="Filter: cause.")]
SymptomOpt = Annotated[Optional[str], typer.Option(help="Filter: symptom.")]
TagOpt = Annotated[Optional[str], typer.Option(help="Filter: tag.")]
YearFromOpt = Annotated[Optional[int], typer.Option(help="Filter: from this year.")]
YearToOpt = Annotated[Optional[int], typer.Option(help="Filter: up to this year.")]
SeverityOpt = Annotated[Optional[str], typer.Option(help="Filter: sev1..sev4.")]


@app.command()
def index(data: DataOpt = None, embedder: EmbedderOpt = DEFAULT_BACKEND, cache: CacheOpt = None,
          as_json: JsonOpt = False) -> None:
    """Build (or refresh) the search index for an embedder, with a progress bar."""
    library = open_library(data, embedder, cache)
    build_with_progress(library, quiet=as_json)
    report = library.search_engine.last_build
    assert report is not None
    if as_json:
        emit_json(report)
    else:
        out.print(f"✓ {report.embedder}: {report.chunks} chunks ({report.action}, {report.index_kind}) in {report.path}")


def _print_results(response, show_why: bool = True) -> None:
    if not response.results:
        out.print("no results")
    for rank, result in enumerate(response.results, 1):
        out.print(f"{rank:>2}. [bold]{result.id}[/bold] {escape(result.title)} [dim]({result.org}, {result.date}, score {result.score:.3f})[/dim]")
        out.print(f"    {escape(result.snippet)}")
        if show_why:
            why = result.why
            parts = []
            if why.matched_terms:
                parts.append("terms: " + ", ".join(why.matched_terms[:8]))
            if why.shared_concepts:
                parts.append("concepts: " + ", ".join(c.label for c in why.shared_concepts))
            parts.append(f"passage: {why.chunk.kind}/{why.chunk.lang}")
            out.print(f"    [dim]{escape(' · '.join(parts))}[/dim]")


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="A question, a description or a pasted error line, in Korean or English.")],
    k: KOpt = 10,
    mode: Annotated[SearchMode, typer.Option(help="lexical (BM25), dense (vectors) or hybrid (both, fused).")] = SearchMode.hybrid,
    fusion: Annotated[Optional[FusionMethod], typer.Option(help="Hybrid fusion: rrf or weighted.")] = None,
    data: DataOpt = None, lang: LangOpt = LangChoice.en, embedder: EmbedderOpt = DEFAULT_BACKEND, cache: CacheOpt = None,
    org: OrgOpt = None, component: ComponentOpt = None, cause: CauseOpt = None, symptom: SymptomOpt = None,
    tag: TagOpt = None, year_from: YearFromOpt = None, year_to: YearToOpt = None, severity: SeverityOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Search incidents in Korean or English; filters apply before ranking."""
    library = open_library(data, embedder, cache, fusion)
    try:
        filters = _filters(org, component, cause, symptom, tag, year_from, year_to, severity)
        library.resolve_filter(filters)
        if mode is not SearchMode.lexical:
            build_with_progress(library, quiet=as_json)
        response = library.search(query, k=k, mode=mode, filters=filters, lang=lang.value)
    except (FilterError, QueryError, ValueError) as exc:
        raise fail(str(exc), 2) from None
    if as_json:
        emit_json(response)
    else:
        _print_results(response)


@app.command()
def similar(
    incident_id: Annotated[Optional[str], typer.Argument(help="Find incidents like this one (an id).")] = None,
    text: Annotated[Optional[str], typer.Option("--text", "-t", help="…or like this text: an error, a log line, a description.")] = None,
    k: KOpt = 10,
    data: DataOpt = None, lang: LangOpt = LangChoice.en, embedder: EmbedderOpt = DEFAULT_BACKEND, cache: CacheOpt = None,
    org: OrgOpt = None, component: ComponentOpt = None, cause: CauseOpt = None, symptom: SymptomOpt = None,
    tag: TagOpt = None, year_from: YearFromOpt = None, year_to: YearToOpt = None, severity: SeverityOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """"Have we seen this before?": incidents like an incident or a pasted text, with the reasons."""
    if (incident_id is None) == (text is None):
        raise fail("give an incident id or --text, not both and not neither", 2)
    library = open_library(data, embedder, cache)
    try:
        filters = _filters(org, component, cause, symptom, tag, year_from, year_to, severity)
        library.resolve_filter(filters)
        build_with_progress(library, quiet=as_json)
        response = library.similar(incident_id=incident_id, text=text, k=k, filters=filters, lang=lang.value)
    except IncidentNotFound as exc:
        raise fail(str(exc)) from None
    except (FilterError, QueryError, ValueError) as exc:
        raise fail(str(exc), 2) from None
    if as_json:
        emit_json(response)
    else:
        _print_results(response)


@app.command("eval")
def eval_cmd(
    queries: Annotated[Optional[Path], typer.Option(help="Query file (default: eval/queries.jsonl of the library).")] = None,
    embedders: Annotated[str, typer.Option(help="Comma-separated embedders to compare.")] = "e5-small,use-m3",
    data: DataOpt = None, cache: CacheOpt = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Also write the Markdown report here.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Retrieval quality per mode and query language: recall@1/5/10, MRR, nDCG@10."""
    from .evaluation import default_queries_path, load_queries, run_evaluation

    library = open_library(data, DEFAULT_BACKEND, cache)
    path = queries or default_queries_path()
    try:
        items = load_queries(path, library)
    except ValueError as exc:
        raise fail(str(exc), 2) from None
    names = [name.strip() for name in embedders.split(",") if name.strip()]
    for name in names:
        build_with_progress(open_library(data, name, cache), quiet=as_json)
    report = run_evaluation(library, items, names, cache_dir=cache)
    if as_json:
        emit_json(report)
        return
    markdown = report.to_markdown()
    sys.stdout.write(markdown)
    if output is not None:
        from .storage import atomic_write_text

        atomic_write_text(output, markdown)


@app.command("import")
def import_cmd(
    path: Annotated[Path, typer.Argument(help="The collection to import.")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="yaml, json, jsonl, csv or markdown.")],
    into: Annotated[Optional[Path], typer.Option("--into", help="Library directory to add to (created if missing).")] = None,
    maps: Annotated[Optional[list[str]], typer.Option("--map", "-m", help="FIELD=SOURCE, e.g. title=headline, source_url=links[0].href (repeatable).")] = None,
    id_prefix: Annotated[str, typer.Option(help="Prefix of new ids (uppercase letters).")] = "IL",
    lang: LangOpt = LangChoice.en,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Report what would happen; write nothing.")] = False,
    keep_near_duplicates: Annotated[bool, typer.Option(help="Accept records that only look similar to existing ones.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Import incidents as drafts, with concept suggestions, duplicate checks and a report. All or nothing."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from .importing import ImportFailed, ImportFormat, ImportOptions, run_import

    target = into or (Path(os.environ[DATA_ENV]) if os.environ.get(DATA_ENV) else None)
    if target is None:
        raise fail("say where to import with --into DIR (or set INCIDENTLIB_DATA)", 2)
    try:
        options = ImportOptions(format=ImportFormat(fmt), maps=maps or [], id_prefix=id_prefix, lang=lang.value,
                                dry_run=dry_run, keep_near_duplicates=keep_near_duplicates)
    except ValidationError as exc:
        raise fail("; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors()), 2) from None
    except ValueError as exc:
        raise fail(str(exc), 2) from None
    with Progress(TextColumn("importing"), BarColumn(), MofNCompleteColumn(), console=err, transient=True,
                  disable=as_json) as bar:
        task = bar.add_task("import", total=None)
        try:
            report = run_import(path, target, options, lambda done, total: bar.update(task, completed=done, total=total))
        except ImportFailed as exc:
            raise fail(str(exc), 2) from None
    if as_json:
        emit_json(report)
    else:
        for item in report.accepted:
            out.print(f"[green]✓[/green] {item.id} ← {item.location}: {escape(item.title)} [dim]({item.status}; "
                      f"{len(item.suggestions)} suggestion(s))[/dim]")
            for warning in item.warnings:
                out.print(f"    [yellow]![/yellow] {escape(warning)}")
        for item in report.rejected:
            out.print(f"[red]✗[/red] {item.location}: {escape('; '.join(item.reasons))}")
        if report.new_organizations or report.new_tags:
            out.print(f"new organizations: {', '.join(report.new_organizations) or '—'}; new tags: {', '.join(report.new_tags) or '—'}")
        verb = "would add" if report.dry_run else ("added" if report.written else "added nothing to")
        out.print(f"{verb} {len(report.accepted)} incident(s) to {report.into}; rejected {len(report.rejected)}")
    if not report.accepted and report.rejected:
        raise typer.Exit(1)


@app.command()
def clusters(
    method: Annotated[str, typer.Option(help="graph (community detection) or embedding (agglomerative).")] = "graph",
    cluster_id: Annotated[Optional[str], typer.Option("--id", help="Show one cluster, e.g. g-03.")] = None,
    data: DataOpt = None, lang: LangOpt = LangChoice.en, embedder: EmbedderOpt = DEFAULT_BACKEND, cache: CacheOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Root-cause clusters with labels, sizes, representatives and their agreement with cause annotations."""
    from .analysis import ClusterMethod, UnknownClusterError

    library = open_library(data, embedder, cache)
    try:
        chosen = ClusterMethod(method)
    except ValueError:
        raise fail(f"--method must be graph or embedding, got {method!r}", 2) from None
    if chosen is ClusterMethod.embedding:
        build_with_progress(library, quiet=as_json)
    try:
        result = library.analysis.cluster(cluster_id, lang.value) if cluster_id else library.analysis.clusters(chosen, lang.value)
    except UnknownClusterError as exc:
        raise fail(str(exc)) from None
    if as_json:
        emit_json(result)
        return
    views = [result] if cluster_id else result.clusters
    if not cluster_id:
        q = result.quality
        out.print(f"{q.clusters} {chosen.value} clusters · purity {q.purity:.3f} · NMI {q.nmi:.3f} (against first-listed causes)")
    for cluster in views:
        out.print(f"[bold]{cluster.id}[/bold] ({cluster.size}) {escape(cluster.label)} [dim]— e.g. {cluster.representative}; "
                  f"terms: {escape(', '.join(cluster.terms))}[/dim]")
        if cluster_id:
            for member in cluster.members:
                out.print(f"  {member.id} {member.date or '—'} {escape(member.title)}")


@app.command()
def diagnose(
    text: Annotated[Optional[str], typer.Argument(help="Pasted error text, log lines or a description.")] = None,
    symptom: Annotated[Optional[list[str]], typer.Option("--symptom", "-s", help="A symptom id or label (repeatable).")] = None,
    limit: Annotated[int, typer.Option(min=1, max=20)] = 5,
    data: DataOpt = None, lang: LangOpt = LangChoice.en, embedder: EmbedderOpt = DEFAULT_BACKEND, cache: CacheOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Rank likely causes and components for symptoms and/or pasted error text, with the incidents behind each."""
    library = open_library(data, embedder, cache)
    if text == "-":
        text = sys.stdin.read()
    try:
        if text:
            build_with_progress(library, quiet=as_json)
        result = library.analysis.diagnose(symptoms=symptom or [], text=text, lang=lang.value, limit=limit)
    except (FilterError, QueryError, ValueError) as exc:
        raise fail(str(exc), 2) from None
    if as_json:
        emit_json(result)
        return
    if result.symptoms:
        out.print("[dim]symptoms:[/dim] " + escape(", ".join(s.label for s in result.symptoms)))
    out.print(f"[bold]{escape(result.note)}[/bold] [dim](confidence: {result.confidence})[/dim]")
    for title, candidates in (("likely causes", result.causes), ("components involved", result.components)):
        out.print(f"[dim]{title}:[/dim]")
        for candidate in candidates:
            evidence = ", ".join(e.id for e in candidate.evidence)
            out.print(f"  {candidate.score:.2f} {escape(candidate.label)} [dim]({candidate.support} incident(s): {evidence})[/dim]")
    for explanation in result.signals:
        out.print(f"[dim]signal:[/dim] {escape(explanation.signal)}\n  {escape(explanation.explanation)}")


@app.command("map")
def map_cmd(
    output: Annotated[Path, typer.Option("--output", "-o", help="File to write: .png or .html.")] = Path("incident-map.png"),
    incident: Annotated[Optional[str], typer.Option("--incident", help="Draw this incident's neighbourhood graph instead (PNG).")] = None,
    data: DataOpt = None, lang: LangOpt = LangChoice.en, embedder: EmbedderOpt = DEFAULT_BACKEND, cache: CacheOpt = None,
) -> None:
    """Write the 2D incident map (PNG or interactive HTML), or one incident's neighbourhood graph."""
    from .storage import atomic_write_bytes

    library = open_library(data, embedder, cache)
    suffix = output.suffix.lower()
    if suffix not in (".png", ".html"):
        raise fail("--output must end in .png or .html", 2)
    if incident and suffix != ".png":
        raise fail("a neighbourhood graph is a PNG: use --output NAME.png", 2)
    try:
        if incident:
            payload = library.analysis.neighbourhood_png(incident, lang.value)
        else:
            build_with_progress(library)
            payload = library.analysis.map_png(lang.value) if suffix == ".png" else library.analysis.map_html(lang.value).encode()
    except IncidentNotFound as exc:
        raise fail(str(exc)) from None
    atomic_write_bytes(output, payload)
    err.print(f"wrote {output} ({len(payload):,} bytes)")


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535)] = 8000,
    data: DataOpt = None, embedder: EmbedderOpt = DEFAULT_BACKEND, cache: CacheOpt = None,
    sparql_timeout: Annotated[float, typer.Option(min=0.1, help="Seconds a SPARQL query may run.")] = 10.0,
    no_mcp: Annotated[bool, typer.Option("--no-mcp", help="Do not mount the MCP endpoint at /mcp.")] = False,
) -> None:
    """Serve the HTTP API (and MCP at /mcp). The first start builds the index; later starts reuse it."""
    import uvicorn

    from .api import ServiceSettings, create_app

    library = open_library(data, embedder, cache)
    build_with_progress(library)
    _ = library.rdf, library.search_service.recognizer  # warm what the first requests would build
    err.print(f"serving {len(library)} incidents on http://{host}:{port} (docs at /docs, MCP at /mcp)")
    application = create_app(library, ServiceSettings(sparql_timeout=sparql_timeout, mount_mcp=not no_mcp, host=host))
    uvicorn.run(application, host=host, port=port, log_level="info")


@app.command()
def mcp(data: DataOpt = None, embedder: EmbedderOpt = DEFAULT_BACKEND, cache: CacheOpt = None) -> None:
    """Run the MCP server over stdio (for Claude Desktop, IDEs and other MCP clients)."""
    from .mcp_server import build_mcp_server

    library = open_library(data, embedder, cache)
    build_with_progress(library)  # progress goes to stderr; stdout belongs to the protocol
    build_mcp_server(library).run("stdio")


def main() -> None:
    app()
