"""Command-line interface: a thin adapter over :class:`incidentlib.library.Library`.

Every command that prints data takes ``--json``; those shapes are documented in
docs/json.md and are the same models the HTTP API returns.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional, get_args

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from typer.core import TyperGroup

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

from .api.limits import (
    DEFAULT_HEAVY_QUEUE,
    DEFAULT_HEAVY_WORKERS,
    DEFAULT_MAX_CONCURRENT,
    DEFAULT_RATE_BURST,
    DEFAULT_RATE_PER_SECOND,
    MAX_REQUEST_HEAD_BYTES,
)
from .errors import (
    DataError,
    EmbedderUnavailable,
    GraphStoreError,
    ImportInterrupted,
    IncidentlibError,
    InvalidRequest,
    LibraryError,
    SearchBackendError,
)
from .library import (
    CACHE_ENV,
    DATA_ENV,
    DEFAULT_EMBEDDER,
    RESUME_SEGMENT,
    SEARCH_BACKEND_ENV,
    SEARCH_BACKEND_OPTION,
    ExportFormat,
    FusionMethod,
    Library,
    SearchMode,
    atomic_write_bytes,
    atomic_write_text,
    built_for_process_lifetime,
)
from .requests import (
    MAX_DEPTH,
    MAX_DIAGNOSE_LIMIT,
    MAX_K,
    MAX_LIMIT,
    ClusterMethodName,
    FilterParam,
    IncidentFilter,
    with_filter_params,
)
from .views import DRAFT_MARK, ClusterSet, ClusterView, ConceptRef, RelatedItem, SearchResponse

out = Console(soft_wrap=True, highlight=False)
err = Console(stderr=True, soft_wrap=True, highlight=False)


#: The summary line names a dip period only when the dips recur this clearly (the thermal-throttle rule's floor).
PERIODIC_SHOWN = 0.35


def exit_code(exc: IncidentlibError) -> int:
    """1 for a lookup that found nothing or a broken library, 2 for a bad parameter, input or environment."""
    if isinstance(exc, LibraryError):
        return 1
    if isinstance(exc, (InvalidRequest, DataError, EmbedderUnavailable, GraphStoreError, SearchBackendError)):
        return 2
    return 1


def message(exc: IncidentlibError) -> str:
    """The one-line (or, for a broken library, per-problem) message the CLI prints for a package error."""
    if isinstance(exc, LibraryError):
        return f"{exc}\nrun `incidentlib validate` for the full list"
    return str(exc)


class _Commands(TyperGroup):
    """Maps the package's error hierarchy to a message and an exit code, once for every command."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except IncidentlibError as exc:
            raise fail(message(exc), exit_code(exc)) from None
        except KeyboardInterrupt:  # a command with more to say (index, import) said it and raised Exit already
            raise interrupted("stopped before the command finished") from None



app = typer.Typer(
    cls=_Commands,
    help="incidentlib: a bilingual knowledge graph of infrastructure incidents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


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
GraphStoreOpt = Annotated[Optional[str], typer.Option(
    "--graph-store", envvar="INCIDENTLIB_GRAPH_STORE",
    help="Where the RDF graph lives: memory (default), oxigraph:PATH or a SPARQL 1.1 endpoint URL (docs/scaling.md).")]
SearchBackendOpt = Annotated[Optional[str], typer.Option(
    SEARCH_BACKEND_OPTION, envvar=SEARCH_BACKEND_ENV,
    help="Where ranking runs: local (default), milvus:PATH.db (embedded Milvus) or milvus:http://HOST:19530 (docs/scaling.md).")]
KOpt = Annotated[int, typer.Option("-k", "--k", min=1, max=MAX_K, help=f"Number of results (at most {MAX_K}).")]


def _option(param: FilterParam) -> Any:
    return Annotated[Optional[param.type], typer.Option(help=f"Filter: {param.help}", min=param.ge, max=param.le)]


filter_options = with_filter_params(_option)


def fail(message: str, code: int = 1) -> typer.Exit:
    err.print(f"[red]error:[/red] {escape(message)}")
    return typer.Exit(code)


#: The exit status of a command stopped by Ctrl-C: 128 + SIGINT, as a shell reports a process the signal ended.
INTERRUPTED_EXIT = 130


def interrupted(message: str) -> typer.Exit:
    """Say what a Ctrl-C left behind (on stderr) and end with :data:`INTERRUPTED_EXIT`."""
    err.print(f"[yellow]interrupted:[/yellow] {escape(message)}")
    return typer.Exit(INTERRUPTED_EXIT)


def open_library(data: Path | None, embedder: str = DEFAULT_EMBEDDER, cache: Path | None = None,
                 fusion: FusionMethod | None = None, graph_store: str | None = None,
                 search_backend: str | None = None) -> Library:
    return Library.open(data, embedder=embedder, cache_dir=cache, fusion=fusion, graph_store=graph_store,
                        search_backend=search_backend)


def progress_bar(quiet: bool) -> Progress:
    """The progress bar of long CLI work, on stderr, gone when done (none when ``quiet``)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeRemainingColumn(), console=err, transient=True, disable=quiet)


def step_bars(bar: Progress, prefix: str) -> Callable[[str, int, int], None]:
    """A ``progress(step, done, total)`` callback that draws one bar on ``bar`` per step, named ``prefix: step``."""
    tasks: dict[str, TaskID] = {}

    def progress(step: str, done: int, total: int) -> None:
        if step not in tasks:
            tasks[step] = bar.add_task(f"{prefix}: {step}", total=total)
        bar.update(tasks[step], completed=done, total=total)

    return progress


def build_with_progress(library: Library, quiet: bool = False, save_snapshot: bool = True, rebuild: bool = False) -> None:
    """Make the dense index fresh, with a progress bar on stderr when embedding is needed (``save_snapshot``:
    :meth:`Library.build_index`)."""
    with progress_bar(quiet) as bar:
        # embedding the new chunks, then (at ``ivf_threshold`` vectors or more) adding every row to the inverted file
        task = bar.add_task(f"indexing chunks ({library.embedder})", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        try:
            report = library.build_index(progress, save_snapshot=save_snapshot, rebuild=rebuild)
        except KeyboardInterrupt:
            raise interrupted(
                f"the index is not built. A build keeps the vectors it embedded every {RESUME_SEGMENT:,} chunks: "
                "run the same command again to resume from the last of them") from None
    if report.warning:  # a damaged cache was rebuilt: say so even when quiet (stderr only)
        err.print(f"[yellow]warning:[/yellow] {escape(report.warning)}")
    if not quiet and report.action != "reused":
        resumed = f", {report.resumed} from an interrupted build" if report.resumed else ""
        err.print(f"index {report.action}: {report.chunks} chunks, {report.embedded} embedded, "
                  f"{report.reused} reused{resumed}, {report.index_kind}, {report.seconds:.1f}s")


def prepare_similar_with_progress(library: Library, quiet: bool = False) -> None:
    """:meth:`Library.prepare_similar` with a progress bar on stderr for each pass of a build."""
    started = time.perf_counter()
    with progress_bar(quiet) as bar:
        source = library.prepare_similar(step_bars(bar, "similar"))
    if source == "unsaved":  # the warning logged says why; a server would build it again
        raise fail("similar: the artefact was built but could not be saved in the index cache (the warning above says "
                   "why); the first `similar` of a server would build it again")
    if not quiet:
        err.print(f"similar: artefact {source} in {time.perf_counter() - started:.1f}s")


def emit_json(value: BaseModel | list[Any] | dict[str, Any]) -> None:
    if isinstance(value, BaseModel):
        text = value.model_dump_json(indent=2)
    elif isinstance(value, list) and value and isinstance(value[0], BaseModel):
        # Each model dumps itself in JSON mode, so dates, enums and nested models serialise exactly
        # as model_dump_json would, without a run-time generic TypeAdapter.
        items = [item.model_dump(mode="json") if isinstance(item, BaseModel) else item for item in value]
        text = json.dumps(items, ensure_ascii=False, indent=2)
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
    root, loaded, problems = Library.check(data, strict=strict)
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
@filter_options
def list_cmd(
    data: DataOpt = None,
    lang: LangOpt = LangChoice.en,
    filters: IncidentFilter | None = None,
    year: Annotated[Optional[int], typer.Option(help="Only this year (sets --year-from and --year-to).")] = None,
    limit: Annotated[Optional[int], typer.Option(min=0, help="At most this many (default: all).")] = None,
    offset: Annotated[int, typer.Option(min=0)] = 0,
    as_json: JsonOpt = False,
) -> None:
    """List incidents, optionally filtered."""
    library = open_library(data)
    filters = filters or IncidentFilter()
    if year is not None:
        filters = IncidentFilter.of(**{**filters.model_dump(), "year_from": year, "year_to": year})
    page = library.list_incidents(filters, lang=lang.value, limit=limit, offset=offset)
    if as_json:
        emit_json(page)
        return
    table = Table(title=f"{page.total} incident(s)", show_lines=False)
    for column in ("id", "date", "org", "title"):
        table.add_column(column, overflow="fold")
    for item in page.items:
        # escaped: a title is the record's text, not console markup (the draft mark was swallowed, "[/x]" raised an error)
        table.add_row(*map(escape, (item.id, item.date or "—", item.org_label,
                                    item.title + (f" {DRAFT_MARK}" if item.status == "draft" else ""))))
    out.print(table)
    if not page.total:
        _hint_inferred(library, filters)


def _hint_inferred(library: Library, filters: IncidentFilter) -> None:
    """When concept filters matched nothing on curated links, say how many incidents they match through inferred
    links still proposed (an imported archive has no curated links until reviewed)."""
    if filters.with_inferred or not filters.names_inferable_concept:
        return
    if library.list_incidents(filters, limit=0).total:  # the filters matched: the query found nothing among them
        return
    widened = library.list_incidents(filters.model_copy(update={"inferred": True}), limit=0).total
    if widened:
        err.print(f"{widened} incident(s) match through concepts inferred from their text and not yet reviewed: "
                  "add --inferred to include them.")


@app.command()
def show(
    incident_id: Annotated[str, typer.Argument(help="Incident id, e.g. IL-0025.")],
    data: DataOpt = None, graph_store: GraphStoreOpt = None,
    lang: LangOpt = LangChoice.en,
    as_json: JsonOpt = False,
) -> None:
    """Show one incident in full."""
    library = open_library(data, graph_store=graph_store)
    detail = library.detail(incident_id, lang=lang.value)
    if as_json:
        emit_json(detail)
        return
    unknown = "날짜 미상" if lang.value == "ko" else "date unknown"
    out.print(f"[bold]{detail.id}[/bold] {escape(detail.org.label)} · {detail.date or unknown}" + (f" · {detail.severity}" if detail.severity else ""))
    draft = escape(f" {DRAFT_MARK}") if detail.status == "draft" else ""  # not published yet: said, as search says it
    out.print(f"[bold]{escape(detail.title)}[/bold]{draft}")
    out.print(escape(detail.summary) + "\n")
    out.print(escape(detail.body) + "\n")
    for name, refs in (("components", detail.components), ("causes", detail.causes), ("symptoms", detail.symptoms)):
        if refs:
            out.print(f"[dim]{name}:[/dim] " + ", ".join(escape(r.label) for r in refs))
    if detail.inferred:
        out.print("[dim]inferred (not curated; incidentlib review accepts or rejects):[/dim]")
        for view in detail.inferred:
            out.print(f"  {view.concept.kind} {escape(view.concept.label)} ({view.concept.id}) "
                      f"[dim]{view.method} {view.confidence:.2f} — {escape(view.evidence)}[/dim]")
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


def _print_related(items: list[RelatedItem], lang: str) -> None:
    if not items:
        out.print("no related incidents")
        return
    cause_word, shared_word = ("같은 원인", "공통") if lang == "ko" else ("same cause", "shared")
    out.print(f"[dim]related ({cause_word} · {shared_word} …):[/dim]")
    for item in items:
        mark = " ✎" if item.curated_reason else ""
        out.print(f"  {item.id} [{item.score:.2f}]{mark} {escape(item.title)} — {escape(item.shared_phrase(lang) or item.curated_reason or '')}")


@app.command()
def related(
    incident_id: Annotated[str, typer.Argument(help="Incident id, e.g. IL-0025.")],
    data: DataOpt = None, graph_store: GraphStoreOpt = None,
    lang: LangOpt = LangChoice.en,
    limit: Annotated[int, typer.Option(min=1, max=MAX_LIMIT)] = 10,
    as_json: JsonOpt = False,
) -> None:
    """Incidents that share components or causes, rarer shared concepts weighing more."""
    library = open_library(data, graph_store=graph_store)
    items = library.related(incident_id, lang=lang.value, limit=limit)
    if as_json:
        emit_json([item.model_dump(mode="json") for item in items])
        return
    _print_related(items, lang.value)


@app.command()
def topic(
    concept: Annotated[str, typer.Argument(help="Concept id or label, e.g. nccl or 'InfiniBand'.")],
    data: DataOpt = None, graph_store: GraphStoreOpt = None,
    lang: LangOpt = LangChoice.en,
    as_json: JsonOpt = False,
) -> None:
    """A concept's page: definition, incidents, co-occurring concepts, organizations."""
    library = open_library(data, graph_store=graph_store)
    page = library.topic(concept, lang=lang.value)
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
    depth: Annotated[int, typer.Option(min=1, max=MAX_DEPTH)] = 1,
    data: DataOpt = None, graph_store: GraphStoreOpt = None,
    lang: LangOpt = LangChoice.en,
) -> None:
    """Node-link JSON of everything within DEPTH hops of a node."""
    library = open_library(data, graph_store=graph_store)
    emit_json(library.neighbors(node, depth=depth, lang=lang.value))


@app.command()
def path(
    source: Annotated[str, typer.Argument(help="Start: incident id, concept id or label.")],
    target: Annotated[str, typer.Argument(help="End: incident id, concept id or label.")],
    data: DataOpt = None, graph_store: GraphStoreOpt = None,
    lang: LangOpt = LangChoice.en,
    as_json: JsonOpt = False,
) -> None:
    """The shortest path between two nodes, and the concepts on the way."""
    library = open_library(data, graph_store=graph_store)
    result = library.path(source, target, lang=lang.value)
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
    data: DataOpt = None, graph_store: GraphStoreOpt = None,
) -> None:
    """Export the library as Turtle, JSON-LD, N-Triples, GraphML or JSON Lines."""
    library = open_library(data, graph_store=graph_store)
    text = library.export(fmt)
    if output is None:
        sys.stdout.write(text)
        return
    atomic_write_text(output, text)
    err.print(f"wrote {output} ({len(text.encode()):,} bytes, {fmt.value})")


@app.command()
def sparql(
    query: Annotated[str, typer.Argument(help="A SPARQL query, or @FILE to read it from a file, or - for stdin.")],
    data: DataOpt = None, graph_store: GraphStoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run a read-only SPARQL query (SELECT, ASK, CONSTRUCT, DESCRIBE). Prefixes il:, skos:, dcterms:, schema: are predefined."""
    if query == "-":
        query = sys.stdin.read()
    elif query.startswith("@"):
        query = Path(query[1:]).read_text(encoding="utf-8")
    library = open_library(data, graph_store=graph_store)
    result = library.sparql(query)
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


@app.command()
def index(data: DataOpt = None, embedder: EmbedderOpt = DEFAULT_EMBEDDER, cache: CacheOpt = None,
          stats: Annotated[bool, typer.Option("--stats", help="Also show index sizes and the dense index kind chosen.")] = False,
          rebuild: Annotated[bool, typer.Option(
              "--rebuild", help="Build the dense index again from the vectors it holds (nothing is embedded again): "
                                "drops the dead rows edits leave in an HNSW graph or inverted file.")] = False,
          similar: Annotated[bool, typer.Option(
              "--similar", help="Also build now what the first `similar` builds over every record (saved beside the "
                                "index), so that no request waits for it: minutes at 100k incidents.")] = False,
          as_json: JsonOpt = False) -> None:
    """Build (or refresh) the search index for an embedder, with a progress bar."""
    library = open_library(data, embedder, cache)
    build_with_progress(library, quiet=as_json, rebuild=rebuild)
    report = library.last_build
    assert report is not None
    if similar:
        prepare_similar_with_progress(library, quiet=as_json)
    if stats:
        numbers = library.index_stats()
        if as_json:
            emit_json(numbers)
            return
        out.print(f"✓ {report.embedder}: {report.chunks} chunks ({report.action}) in {report.path}")
        out.print(f"  dense:   {numbers.dense_index}; {numbers.vectors_mb} MB of vectors "
                  f"(HNSW from {numbers.hnsw_threshold:,} vectors, inverted file from {numbers.ivf_threshold:,})")
        if numbers.dense_dead_rows:
            out.print(f"           {numbers.dense_rows:,} rows, {numbers.dense_dead_rows:,} of them dead (edited or "
                      "removed chunks; dropped when the index is built again)")
        out.print(f"  lexical: BM25 over {numbers.lexical_terms:,} terms, {numbers.lexical_postings:,} postings, "
                  f"{numbers.lexical_mb} MB ({numbers.lexical_source})")
    elif as_json:
        emit_json(report)
    else:
        out.print(f"✓ {report.embedder}: {report.chunks} chunks ({report.action}, {report.index_kind}) in {report.path}")


def _local_actor() -> str:
    """The name a write from this shell is recorded under in the history, as the write commands record it."""
    from .cli_write import _actor

    return _actor(None)


def _concept_label(ref: ConceptRef) -> str:
    """A concept's label, with ``(inferred)`` when no curator asserted the link (and ``(broader)``, see
    :meth:`ConceptRef.marked_label`)."""
    return ref.marked_label()


def _print_results(response: SearchResponse, show_why: bool = True) -> None:
    if not response.results:
        out.print("no results")
    for rank, result in enumerate(response.results, 1):
        draft = escape(f" {DRAFT_MARK}") if result.status == "draft" else ""
        out.print(f"{rank:>2}. [bold]{result.id}[/bold] {escape(result.title)}{draft} [dim]({result.org}, {result.date or 'date unknown'}, score {result.score:.3f})[/dim]")
        out.print(f"    {escape(result.snippet)}")
        if show_why:
            why = result.why
            parts = []
            if why.matched_terms:
                parts.append("terms: " + ", ".join(why.matched_terms[:8]))
            if why.shared_concepts:
                parts.append("concepts: " + ", ".join(_concept_label(c) for c in why.shared_concepts))
            if why.neighbours:
                parts.append("near: " + ", ".join(why.neighbours))
            parts.append(f"passage: {why.chunk.kind}/{why.chunk.lang}")
            out.print(f"    [dim]{escape(' · '.join(parts))}[/dim]")


@app.command()
@filter_options
def search(
    query: Annotated[str, typer.Argument(help="A question, a description or a pasted error line, in Korean or English.")],
    k: KOpt = 10,
    mode: Annotated[SearchMode, typer.Option(help="lexical (BM25), dense (vectors) or hybrid (both, fused).")] = SearchMode.hybrid,
    fusion: Annotated[Optional[FusionMethod], typer.Option(help="Hybrid fusion: rrf or weighted.")] = None,
    data: DataOpt = None, lang: LangOpt = LangChoice.en, embedder: EmbedderOpt = DEFAULT_EMBEDDER, cache: CacheOpt = None,
    filters: IncidentFilter | None = None,
    as_json: JsonOpt = False, search_backend: SearchBackendOpt = None,
) -> None:
    """Search incidents in Korean or English; filters apply before ranking."""
    library = open_library(data, embedder, cache, fusion, search_backend=search_backend)
    filters = filters or IncidentFilter()
    library.resolve_filter(filters)
    if mode is not SearchMode.lexical:
        build_with_progress(library, quiet=as_json)
    response = library.search(query, k=k, mode=mode, filters=filters, lang=lang.value)
    if as_json:
        emit_json(response)
    else:
        _print_results(response)
        if not response.results:
            _hint_inferred(library, filters)


def _read_text_file(path: Path, option: str) -> str:
    """The text of ``path`` (``-``: standard input) as UTF-8; a clear error naming the file otherwise."""
    if str(path) == "-":
        return sys.stdin.read()
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise fail(f"{option} {path}: no such file", 2) from None
    except UnicodeDecodeError as error:
        raise fail(f"{option} {path}: not UTF-8 text ({error.reason} at byte {error.start})", 2) from None
    except OSError as error:
        raise fail(f"{option} {path}: {error.strerror or error}", 2) from None


@app.command()
@filter_options
def similar(
    incident_id: Annotated[Optional[str], typer.Argument(help="Find incidents like this one (an id).")] = None,
    text: Annotated[Optional[str], typer.Option("--text", "-t", help="…or like this text: an error, a log line, a description.")] = None,
    text_file: Annotated[Optional[Path], typer.Option("--text-file", "-f", help="…or like the text of this file ('-': "
                                                      "standard input), such as a whole postmortem write-up.")] = None,
    k: KOpt = 10,
    data: DataOpt = None, lang: LangOpt = LangChoice.en, embedder: EmbedderOpt = DEFAULT_EMBEDDER, cache: CacheOpt = None,
    filters: IncidentFilter | None = None,
    as_json: JsonOpt = False,
) -> None:
    """"Have we seen this before?": incidents like an incident or a pasted text, with the reasons."""
    if sum(given is not None for given in (incident_id, text, text_file)) != 1:
        raise fail("give one of an incident id, --text or --text-file", 2)
    if text_file is not None:
        text = _read_text_file(text_file, "--text-file")
    library = open_library(data, embedder, cache)
    filters = filters or IncidentFilter()
    library.resolve_filter(filters)
    build_with_progress(library, quiet=as_json)
    response = library.similar(incident_id=incident_id, text=text, k=k, filters=filters, lang=lang.value)
    if as_json:
        emit_json(response)
    else:
        _print_results(response)
        if not response.results:
            _hint_inferred(library, filters)


eval_app = typer.Typer(cls=_Commands, help="Measure retrieval and similarity quality.", invoke_without_command=True)
app.add_typer(eval_app, name="eval")


@eval_app.callback()
def eval_cmd(
    ctx: typer.Context,
    queries: Annotated[Optional[Path], typer.Option(help="Query file (default: eval/queries.jsonl of the library).")] = None,
    embedders: Annotated[str, typer.Option(help="Comma-separated embedders to compare.")] = "e5-small,use-m3",
    data: DataOpt = None, cache: CacheOpt = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Also write the Markdown report here.")] = None,
    as_json: JsonOpt = False, search_backend: SearchBackendOpt = None,
) -> None:
    """Retrieval quality per mode and query language: recall@1/5/10, MRR, nDCG@10 (`eval similar`: label agreement)."""
    if ctx.invoked_subcommand is not None:
        return
    library = open_library(data, DEFAULT_EMBEDDER, cache, search_backend=search_backend)
    items = library.eval_queries(queries)
    names = [name.strip() for name in embedders.split(",") if name.strip()]
    for name in names:
        build_with_progress(library.with_embedder(name), quiet=as_json)
    report = library.evaluate(items, names, cache_dir=cache)
    if as_json:
        emit_json(report)
        return
    markdown = report.to_markdown()
    sys.stdout.write(markdown)
    if output is not None:
        atomic_write_text(output, markdown)


@eval_app.command("similar")
def eval_similar_cmd(
    labels: Annotated[Optional[str], typer.Option(help="A record field (causes, components, symptoms, tags, org) or a labels file (JSONL id+labels, or CSV id,label).")] = None,
    leave_concepts_out: Annotated[bool, typer.Option("--leave-concepts-out", help="Strip concepts, re-infer them (5-fold), judge by the held-out causes.")] = False,
    k: Annotated[int, typer.Option(help="Neighbours judged per query (P@k).")] = 5,
    data: DataOpt = None, embedder: EmbedderOpt = DEFAULT_EMBEDDER, cache: CacheOpt = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Also write the Markdown report here.")] = None,
    per_query: Annotated[Optional[Path], typer.Option("--per-query", help="Also write each query's P@k and first k records by method here (JSON Lines).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Label agreement (P@k, MAP) of `similar` by incident and by text, next to random, BM25 and dense baselines."""
    if (labels is None) == (not leave_concepts_out):
        raise fail("give --labels or --leave-concepts-out (one of them)", 2)
    for option, path in (("--output", output), ("--per-query", per_query)):
        if path is not None and not path.parent.is_dir():  # said before a run of minutes, not after it
            raise fail(f"{option} {path}: no directory {path.parent}", 2)
    library = open_library(data, embedder, cache)
    build_with_progress(library, quiet=as_json)
    detail = per_query is not None
    report = (library.evaluate_leave_concepts_out(k=k, per_query=detail) if leave_concepts_out
              else library.evaluate_similar(labels or "", k=k, per_query=detail))
    if per_query is not None and report.per_query is not None:
        atomic_write_text(per_query, "".join(row.model_dump_json() + "\n" for row in report.per_query))
        report = report.model_copy(update={"per_query": None})  # in the file, not in the report as well
    if as_json:
        emit_json(report)
        return
    markdown = report.to_markdown()
    sys.stdout.write(markdown)
    if output is not None:
        atomic_write_text(output, markdown)


@app.command()
def tag(
    ids: Annotated[Optional[list[str]], typer.Argument(help="Records to tag (default: every draft).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be stored; write nothing.")] = False,
    data: DataOpt = None, lang: LangOpt = LangChoice.en, embedder: EmbedderOpt = DEFAULT_EMBEDDER, cache: CacheOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Infer components, causes and symptoms for untagged records; store them as inferred links (never curated)."""
    library = open_library(data, embedder, cache)
    with progress_bar(as_json) as bar:
        results = library.tag(ids or None, write=not dry_run, lang=lang.value, actor=_local_actor(),
                              progress=step_bars(bar, "tag"))
    if as_json:
        emit_json(results)
        return
    for result in results:
        if result.problem:
            out.print(f"[red]✗[/red] [bold]{result.id}[/bold] {escape(result.problem)}")
            continue
        labels = ", ".join(f"{v.concept.kind} {v.concept.label} {v.confidence:.2f} ({v.method})" for v in result.inferred)
        out.print(f"[bold]{result.id}[/bold] {escape(labels) or '—'}")
    stored = [result for result in results if not result.problem]
    out.print(f"{'would store' if dry_run else 'stored'} inferred links for {len(stored)} record(s)"
              + (f"; {len(results) - len(stored)} refused (above)" if len(stored) < len(results) else ""))
    if len(stored) < len(results):
        raise typer.Exit(1)


@app.command()
def review(
    incident_id: Annotated[str, typer.Argument(help="The record whose inferred links to review.")],
    accept: Annotated[Optional[list[str]], typer.Option("--accept", "-a", help="Concept id to accept (becomes curated).")] = None,
    reject: Annotated[Optional[list[str]], typer.Option("--reject", "-r", help="Concept id to reject (not proposed again).")] = None,
    data: DataOpt = None, lang: LangOpt = LangChoice.en, as_json: JsonOpt = False,
) -> None:
    """List a record's inferred links, or accept / reject them."""
    library = open_library(data, DEFAULT_EMBEDDER, None)
    if accept or reject:
        result = library.review(incident_id, accept=accept, reject=reject, lang=lang.value, actor=_local_actor())
        remaining = result.remaining
    else:
        remaining = library.detail(incident_id, lang=lang.value).inferred
        result = None
    if as_json:
        emit_json(result if result is not None else {"id": incident_id, "remaining": [v.model_dump() for v in remaining]})
        return
    if result is not None:
        out.print(f"accepted: {', '.join(result.accepted) or '—'}; rejected: {', '.join(result.rejected) or '—'}")
    for view in remaining:
        # the label in the asked language to read, the id to pass to --accept / --reject
        out.print(f"  {view.concept.kind} {escape(view.concept.label)} ({view.concept.id}) {view.confidence:.2f} "
                  f"({view.method}) [dim]{escape(view.evidence)}[/dim]")
    if not remaining:
        out.print("no proposed inferred links")


#: Records an import's report shows with the same problem before it counts the rest (``--json`` lists every one).
REPEATS_SHOWN = 3
#: The option of ``import`` that sets each parameter :meth:`Library.import_records` may name in an error.
IMPORT_OPTIONS = {"format": "--format", "maps": "--map", "id_prefix": "--id-prefix", "lang": "--lang",
                  "date_format": "--date-format", "sets": "--set"}


def _as_option(exc: InvalidRequest, options: dict[str, str]) -> str:
    """The error's message with the parameter it names written as the command's option (``id_prefix: …`` is
    ``--id-prefix: …``); a message that already quotes the option keeps only that."""
    text = str(exc)
    option = options.get(exc.parameter or "")
    if option is None or not text.startswith(f"{exc.parameter}: "):
        return text
    rest = text[len(f"{exc.parameter}: "):]
    return rest if rest.startswith(option) else f"{option}: {rest}"


def _place(location: str) -> int:
    """A report row's place in its file: the line (``file:12``) or the item (``file#3``)."""
    number = location.rsplit(":", 1)[-1].rsplit("#", 1)[-1]
    return int(number) if number.isdigit() else 0


@app.command("import")
def import_cmd(
    path: Annotated[Path, typer.Argument(help="The collection to import: a file, or a folder of documents.")],
    fmt: Annotated[Optional[str], typer.Option(
        "--format", "-f", help="yaml, json, jsonl, csv, markdown (a list of postmortems) or document (one "
                               "postmortem per file; a folder of them); by default the file's suffix says, and a "
                               "folder is documents.")] = None,
    into: Annotated[Optional[Path], typer.Option("--into", help="Library directory to add to (created if missing).")] = None,
    maps: Annotated[Optional[list[str]], typer.Option("--map", "-m", help="FIELD=SOURCE, e.g. title=headline, source_url=links[0].href (repeatable).")] = None,
    id_prefix: Annotated[str, typer.Option(help="Prefix of new ids (uppercase letters).")] = "IL",
    lang: LangOpt = LangChoice.en,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Report what would happen; write nothing.")] = False,
    keep_near_duplicates: Annotated[bool, typer.Option(help="Accept records that only look similar to existing ones.")] = False,
    sets: Annotated[Optional[list[str]], typer.Option(
        "--set", help="FIELD=VALUE for every record, {path} filled from each record, e.g. org=Acme, "
                            "source_url=https://tickets.example/browse/{key} (repeatable).")] = None,
    date_format: Annotated[Optional[str], typer.Option(
        "--date-format", help="The file's date form, for dates whose day and month could be swapped "
                              "(strptime codes: %m/%d/%Y, %d.%m.%Y %H:%M).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Import incidents as drafts, with concept suggestions, duplicate checks and a report. All or nothing."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    target = into or (Path(os.environ[DATA_ENV]) if os.environ.get(DATA_ENV) else None)
    if target is None:
        raise fail("say where to import with --into DIR (or set INCIDENTLIB_DATA)", 2)
    with Progress(TextColumn("importing"), BarColumn(), MofNCompleteColumn(), console=err, transient=True,
                  disable=as_json) as bar:
        task = bar.add_task("import", total=None)
        try:
            report = Library.import_records(
                path, target, fmt, maps or [], id_prefix=id_prefix, lang=lang.value, dry_run=dry_run,
                keep_near_duplicates=keep_near_duplicates, date_format=date_format, sets=sets or [],
                progress=lambda done, total: bar.update(task, completed=done, total=total),
            )
        except InvalidRequest as exc:
            raise fail(_as_option(exc, IMPORT_OPTIONS), exit_code(exc)) from None
        except ImportInterrupted as stopped:
            if stopped.completed:
                raise interrupted(f"the import had been committed and is now complete in {target}") from None
            raise interrupted(f"nothing was imported; {target} is as it was") from None
    if as_json:
        emit_json(report)
    else:
        # in the file's order, accepted and rejected records together, as a reader goes through the file
        places = sorted([(_place(row.location), False, n) for n, row in enumerate(report.accepted)]
                        + [(_place(row.location), True, n) for n, row in enumerate(report.rejected)])
        # a problem every record of an export shares (no organisation column, an unknown status) is said a few
        # times, then counted: fifty identical lines hide the one record that differs
        said: Counter[str] = Counter()
        for _, rejected, n in places:
            if rejected:
                refused = report.rejected[n]
                reasons = "; ".join(refused.reasons)
                said[reasons] += 1
                if said[reasons] <= REPEATS_SHOWN:
                    out.print(f"[red]✗[/red] {refused.location}: {escape(reasons)}")
                continue
            item = report.accepted[n]
            out.print(f"[green]✓[/green] {item.id} ← {item.location}: {escape(item.title)} [dim]({item.status}; "
                      f"{len(item.suggestions)} suggestion(s))[/dim]")
            for warning in item.warnings:
                said[warning] += 1
                if said[warning] <= REPEATS_SHOWN:
                    out.print(f"    [yellow]![/yellow] {escape(warning)}")
        for problem, count in said.items():
            if count > REPEATS_SHOWN:
                out.print(f"[yellow]…[/yellow] {count - REPEATS_SHOWN} more record(s) with: {escape(problem)} "
                          "[dim](--json lists every record)[/dim]")
        if report.unread_columns:
            out.print(f"not imported (no field is taken from them): {escape(', '.join(report.unread_columns))} "
                      "[dim](--map FIELD=COLUMN takes one, e.g. --map body=description)[/dim]")
        if report.new_organizations or report.new_tags:
            out.print(f"new organizations: {', '.join(report.new_organizations) or '—'}; new tags: {', '.join(report.new_tags) or '—'}")
        if report.dry_run or report.written:
            verb = "would add" if report.dry_run else "added"
            out.print(f"{verb} {len(report.accepted)} incident(s) to {report.into}; rejected {len(report.rejected)}")
        else:
            out.print(f"added nothing to {report.into}; rejected {len(report.rejected)}")
    if not report.accepted and report.rejected:
        raise typer.Exit(1)


@app.command()
def clusters(
    method: Annotated[str, typer.Option(help="graph (community detection) or embedding (agglomerative).")] = "graph",
    cluster_id: Annotated[Optional[str], typer.Option("--id", help="Show one cluster, e.g. g-03.")] = None,
    data: DataOpt = None, graph_store: GraphStoreOpt = None, lang: LangOpt = LangChoice.en, embedder: EmbedderOpt = DEFAULT_EMBEDDER, cache: CacheOpt = None,
    as_json: JsonOpt = False,
    members: Annotated[Optional[int], typer.Option(min=0, help="List at most this many members of each cluster "
                                                   "(--json; its size still counts all).")] = None,
) -> None:
    """Root-cause clusters with labels, sizes, representatives and their agreement with cause annotations."""
    library = open_library(data, embedder, cache, graph_store=graph_store)
    methods = get_args(ClusterMethodName)
    if method not in methods:
        raise fail(f"--method must be {' or '.join(methods)}, got {method!r}", 2)
    if method == "embedding":
        build_with_progress(library, quiet=as_json)
    result: ClusterView | ClusterSet = (library.cluster(cluster_id, lang.value) if cluster_id
                                        else library.clusters(method, lang.value, members))
    if as_json:
        emit_json(result)
        return
    views = [result] if isinstance(result, ClusterView) else result.clusters
    if isinstance(result, ClusterSet):
        q = result.quality
        out.print(f"{q.clusters} {method} clusters · purity {q.purity:.3f} · NMI {q.nmi:.3f} (against first-listed causes)")
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
    series: Annotated[Optional[Path], typer.Option("--series", help="An MFU curve: CSV or JSON with seconds,mfu[,throttle,event] "
                                                   "(or a Prometheus range-query answer).")] = None,
    expected: Annotated[Optional[float], typer.Option("--expected", help="The MFU the run should reach, when --series "
                                                      "holds absolute values.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=MAX_DIAGNOSE_LIMIT)] = 5,
    data: DataOpt = None, lang: LangOpt = LangChoice.en, embedder: EmbedderOpt = DEFAULT_EMBEDDER, cache: CacheOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Rank likely causes and components for symptoms and/or pasted error text, with the incidents behind each;
    or, with --series, read the shape of an MFU curve."""
    library = open_library(data, embedder, cache)
    if series is not None:
        if text or symptom:
            raise fail("--series reads a curve; give text and --symptom in a separate call", 2)
        _diagnose_series(library, series, expected, lang.value, limit, as_json)
        return
    if expected is not None:
        raise fail("--expected only applies with --series", 2)
    if text == "-":
        text = sys.stdin.read()
    if text:
        build_with_progress(library, quiet=as_json)
    result = library.diagnose(symptoms=symptom or [], text=text, lang=lang.value, limit=limit)
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
    for match in result.explained:
        out.print(f"[dim]{escape(match.family_label)} {escape(match.code)}:[/dim] {escape(match.meaning)}")


def _diagnose_series(library: Library, path: Path, expected: float | None, lang: str, limit: int, as_json: bool) -> None:
    result = library.diagnose_series(path=path, expected=expected, lang=lang, limit=limit)
    if as_json:
        emit_json(result)
        return
    out.print(escape(result.chart))
    f = result.features
    periodic = f.dip_period_s and (f.periodicity or 0) >= PERIODIC_SHOWN and f.dip_depth
    measured = [f"level {f.level:.2f}" if f.level is not None else None,
                f"drift {f.drift:+.2f}" if f.drift is not None else None,
                f"dips every {f.dip_period_s:.0f} s, depth {f.dip_depth:.2f}" if periodic else None,
                f"{len(f.restarts)} restart(s), recovery {f.recovery:+.2f}" if f.restarts and f.recovery is not None else None,
                f"throttle overlap {f.throttle_overlap:.2f}" if f.throttle_overlap is not None else None]
    out.print("[dim]" + escape(" · ".join(m for m in measured if m)) + f" ({f.points} points, {f.duration_s:.0f} s)[/dim]")
    if result.shape is None:
        out.print(f"[bold]{escape(result.cannot_tell or '')}[/bold]")
        return
    out.print(f"[bold]{escape(result.shape)}[/bold]: {escape(result.label or '')} [dim](confidence {result.confidence:.2f})[/dim]")
    if result.likely:
        out.print(escape(result.likely))
    for line in result.evidence:
        out.print(f"  [dim]·[/dim] {escape(line)}")
    if result.incidents:
        out.print("[dim]incidents:[/dim]")
        for item in result.incidents:
            out.print(f"  {item.id} {escape(item.title)}" + (" [dim](describes this pattern)[/dim]" if item.pinned else f" [dim]({item.score:.2f})[/dim]"))


@app.command()
def watch(
    source: Annotated[str, typer.Argument(help="A log file (dmesg, NCCL, kubelet events) or - for standard input.")],
    limit: Annotated[int, typer.Option(min=1, max=MAX_DIAGNOSE_LIMIT, help="Incidents per answer.")] = 3,
    data: DataOpt = None, lang: LangOpt = LangChoice.en, embedder: EmbedderOpt = DEFAULT_EMBEDDER, cache: CacheOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Read a log stream and answer each distinct problem once (a flood of the same line gives one answer)."""
    library = open_library(data, embedder, cache)
    if source == "-":
        handle = sys.stdin
    else:
        path = Path(source)
        if not path.is_file():
            raise fail(f"{source}: no such file", 2)
        handle = path.open(encoding="utf-8", errors="replace")
    build_with_progress(library, quiet=as_json)
    suppressed: dict[str, int] = {}
    try:
        for item in library.watch(handle, lang=lang.value, limit=limit, suppressed=suppressed):
            if as_json:
                sys.stdout.write(item.model_dump_json() + "\n")
                sys.stdout.flush()
                continue
            out.print(f"[bold]line {item.line_number}[/bold] [dim]{escape(item.key)}[/dim]")
            out.print(escape(item.answer.markdown))
            out.print("")
    finally:
        if handle is not sys.stdin:
            handle.close()
    if suppressed and not as_json:
        err.print("repeats held back: " + ", ".join(f"{k} ×{v}" for k, v in sorted(suppressed.items())))


@app.command("map")
def map_cmd(
    output: Annotated[Path, typer.Option("--output", "-o", help="File to write: .png or .html.")] = Path("incident-map.png"),
    incident: Annotated[Optional[str], typer.Option("--incident", help="Draw this incident's neighbourhood graph instead (PNG).")] = None,
    data: DataOpt = None, lang: LangOpt = LangChoice.en, embedder: EmbedderOpt = DEFAULT_EMBEDDER, cache: CacheOpt = None,
) -> None:
    """Write the 2D incident map (PNG or interactive HTML), or one incident's neighbourhood graph."""
    library = open_library(data, embedder, cache)
    suffix = output.suffix.lower()
    if suffix not in (".png", ".html"):
        raise fail("--output must end in .png or .html", 2)
    if incident and suffix != ".png":
        raise fail("a neighbourhood graph is a PNG: use --output NAME.png", 2)
    if incident:
        payload = library.neighbourhood_png(incident, lang.value)
    else:
        build_with_progress(library)
        payload = library.map_png(lang.value) if suffix == ".png" else library.map_html(lang.value).encode()
    atomic_write_bytes(output, payload)
    err.print(f"wrote {output} ({len(payload):,} bytes)")


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535)] = 8000,
    data: DataOpt = None, graph_store: GraphStoreOpt = None, embedder: EmbedderOpt = DEFAULT_EMBEDDER, cache: CacheOpt = None,
    sparql_timeout: Annotated[float, typer.Option(min=0.1, help="Seconds a SPARQL query may run.")] = 10.0,
    no_mcp: Annotated[bool, typer.Option("--no-mcp", help="Do not mount the MCP endpoint at /mcp.")] = False,
    allow_host: Annotated[list[str] | None, typer.Option(
        help="Host name clients may use besides loopback and --host (repeatable; '*' accepts any, e.g. behind a proxy that checks it).")] = None,
    cors_origin: Annotated[list[str] | None, typer.Option(
        help="Origin (scheme://host[:port]) allowed to call the API from a browser (repeatable). CORS is off without it.")] = None,
    rate_limit: Annotated[float, typer.Option(min=0.0, help="Requests a second per client on search/similar/sparql/diagnose/rag (0: off).")] = DEFAULT_RATE_PER_SECOND,
    rate_burst: Annotated[int, typer.Option(min=1, help="Requests a client may send at once before the rate limit applies.")] = DEFAULT_RATE_BURST,
    workers: Annotated[int, typer.Option(min=1, help="CPU-heavy requests (search, similar, diagnose, maps) running at once.")] = DEFAULT_HEAVY_WORKERS,
    queue: Annotated[int, typer.Option(min=0, help="CPU-heavy requests waiting for a worker; more get 503 at once.")] = DEFAULT_HEAVY_QUEUE,
    sparql_concurrency: Annotated[int, typer.Option(min=1, help="SPARQL queries running at once; more get 503 at once.")] = DEFAULT_MAX_CONCURRENT,
    require_auth: Annotated[bool, typer.Option("--require-auth", help="Reads need a token too (writes always do).")] = False,
    processes: Annotated[int, typer.Option(min=1, help="Server processes on one port; they share the library's write store.")] = 1,
    no_follow: Annotated[bool, typer.Option("--no-follow", help="No background thread applying other processes' writes: "
                                            "the first request after a change applies it and pays for the re-index.")] = False,
    search_backend: SearchBackendOpt = None,
) -> None:
    """Serve the HTTP API (and MCP at /mcp). The first start builds the index; later starts reuse it.

    Only loopback host names (and --host) are accepted in the Host header, browsers on other
    sites are refused, and CORS is off; see docs/security.md before exposing the service.
    """
    import uvicorn

    from .api import SERVE_ENV, ServiceSettings, create_app
    from .api.guards import GuardSettings

    with built_for_process_lifetime():  # what is loaded here lives as long as the server (incidentlib.gc_pause)
        library = open_library(data, embedder, cache, graph_store=graph_store, search_backend=search_backend)
        # the graph and the start snapshot are built after the server listens (GET /health says when: graph_ready);
        # with several processes the snapshot is written first: each process then opens the library from it
        build_with_progress(library, save_snapshot=processes > 1)
        library.warm_search(save_snapshot=processes > 1)
    err.print(f"serving {len(library)} incidents on http://{host}:{port} (docs at /docs, MCP at /mcp)")
    guards = GuardSettings(allowed_hosts=tuple(allow_host or ()), cors_origins=tuple(cors_origin or ()),
                           rate_per_second=rate_limit, rate_burst=rate_burst, heavy_workers=workers, heavy_queue=queue)
    settings = ServiceSettings(sparql_timeout=sparql_timeout, mount_mcp=not no_mcp, host=host,
                               sparql_max_concurrent=sparql_concurrency, guards=guards, require_auth=require_auth,
                               follow_changes=not no_follow)
    if processes > 1:
        # each process opens the library itself (the index is built and cached above) and follows the shared store
        os.environ[SERVE_ENV] = json.dumps({"data": str(library.root), "embedder": embedder,
                                            "cache": str(cache) if cache else None, "graph_store": graph_store,
                                            "search_backend": search_backend,
                                            **{**settings.__dict__, "guards": guards.model_dump(mode="json")}})
        uvicorn.run("incidentlib.api:app_from_env", factory=True, host=host, port=port, workers=processes, log_level="info",
                    h11_max_incomplete_event_size=MAX_REQUEST_HEAD_BYTES)
        return
    uvicorn.run(create_app(library, settings), host=host, port=port, log_level="info", h11_max_incomplete_event_size=MAX_REQUEST_HEAD_BYTES)


@app.command()
def mcp(data: DataOpt = None, graph_store: GraphStoreOpt = None, embedder: EmbedderOpt = DEFAULT_EMBEDDER, cache: CacheOpt = None) -> None:
    """Run the MCP server over stdio (for Claude Desktop, IDEs and other MCP clients)."""
    from .mcp_server import build_mcp_server

    with built_for_process_lifetime():  # the library lives as long as the MCP session (incidentlib.gc_pause)
        library = open_library(data, embedder, cache, graph_store=graph_store)
        build_with_progress(library)  # progress goes to stderr; stdout belongs to the protocol
    build_mcp_server(library, local_writes=True).run("stdio")


def main() -> None:
    app()


def _register_write_commands() -> None:
    from .cli_write import register

    register(app)


_register_write_commands()
