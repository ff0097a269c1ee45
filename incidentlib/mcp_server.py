"""MCP server: the library's tools for LLM agents, over stdio or streamable HTTP.

Tool names follow the reference incident library (search_incidents,
get_incident, list_incidents, get_topic, vocab) plus similar_incidents and
related_incidents.  Every tool answers readable text that names incident ids,
with the same data as structured content beside it.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, Field, ValidationError

from . import __version__
from .errors import IncidentlibError
from .library import Library
from .requests import (
    MAX_AGENT_K,
    MAX_AGENT_LIMIT,
    MAX_QUERY_CHARS,
    MAX_RAG_K,
    MAX_SIMILAR_TEXT_CHARS,
    MCP_CLUSTER_MEMBERS,
    ClusterMethodName,
    ConceptKindName,
    FilterParam,
    IncidentFilter,
    Lang,
    SearchModeName,
    with_filter_params,
)
from .views import (
    DRAFT_MARK,
    ClusterSet,
    Diagnosis,
    IncidentDetail,
    IncidentPage,
    RagPassage,
    RelatedItem,
    SearchResponse,
    SeriesDiagnosis,
    StoredRecord,
    TopicPage,
)

INSTRUCTIONS = """incidentlib: real, publicly documented infrastructure incidents (GPU/AI training clusters,
GPU clouds, inference services, cloud/CDN/DNS outages) in Korean and English.
Use search_incidents for questions, similar_incidents for a pasted error or log line,
cited_passages for passages to quote with the incident ids and source URLs to cite them by,
get_incident for the full record with sources, related_incidents for incidents sharing
components or causes, get_topic and vocab to explore the controlled vocabulary.
Cite incident ids (IL-NNNN) and their source URLs."""


class PassageList(BaseModel):
    query: str
    passages: list[RagPassage]


class RelatedList(BaseModel):
    incident_id: str
    items: list[RelatedItem]


class VocabEntry(BaseModel):
    id: str
    kind: str
    label: str
    alt_labels: list[str]
    definition: str | None = None


class VocabList(BaseModel):
    kind: str | None
    concepts: list[VocabEntry]


def _field(param: FilterParam) -> Any:
    return Annotated[param.type | None, Field(description=f"Filter: {param.help}", ge=param.ge, le=param.le)]


LangArg = Annotated[Lang, Field(description="Language of titles and text: 'en' or 'ko'.")]


_Fn = TypeVar("_Fn", bound=Callable[..., Any])


def clear_errors(fn: _Fn) -> _Fn:
    """Report bad ids and arguments to the client in plain words (the SDK hides other exceptions' text)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except IncidentlibError as exc:
            raise ToolError(str(exc)) from exc

    return wrapper  # type: ignore[return-value]


class StrictTool(Tool):
    """A tool that refuses arguments it does not take (as the HTTP API's JSON bodies do), naming them.

    The SDK's tools drop unknown keys without a word, so an agent that misspells a filter (``orgg``) or nests it
    (``{"filters": {"org": …}}``) gets unfiltered results that look filtered.  The input schema says so too
    (``additionalProperties: false``), and a bad value is reported as ``argument: reason``, not as pydantic's dump
    of the input."""

    @classmethod
    def from_function(cls, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> StrictTool:
        tool = super().from_function(fn, *args, **kwargs)
        tool.parameters["additionalProperties"] = False
        return tool  # type: ignore[return-value]

    @property
    def argument_names(self) -> list[str]:
        """The arguments the tool takes, as a client spells them (aliases where the SDK gave one)."""
        return [field.alias or name for name, field in self.fn_metadata.arg_model.model_fields.items()]

    async def run(self, arguments: dict[str, Any], context: Any, convert_result: bool = False) -> Any:
        taken = self.argument_names
        unknown = [name for name in arguments if name not in taken]
        if unknown:
            hints = [f"{name!r} (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(name, taken, n=1))
                     else repr(name) for name in unknown]
            raise ToolError(f"Error executing tool {self.name}: unknown argument{'s' if len(unknown) > 1 else ''} "
                            f"{', '.join(hints)}; {self.name} takes {', '.join(taken)}")
        try:
            self.fn_metadata.validate_arguments(arguments)
        except ValidationError as exc:
            reasons = "; ".join(f"{'.'.join(str(part) for part in error['loc']) or 'arguments'}: {error['msg']}"
                                for error in exc.errors(include_url=False, include_input=False))
            raise ToolError(f"Error executing tool {self.name}: {reasons}") from exc
        return await super().run(arguments, context, convert_result=convert_result)


def _result(text: str, model: BaseModel) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=model.model_dump(mode="json"))


def _search_text(response: SearchResponse) -> str:
    if not response.results:
        return f"No incidents found for: {response.query}"
    lines = [f"{len(response.results)} incident(s) for: {response.query}"]
    for rank, r in enumerate(response.results, 1):
        draft = f" {DRAFT_MARK}" if r.status == "draft" else ""
        lines.append(f"{rank}. {r.id} — {r.title}{draft} ({r.org}, {r.date or 'date unknown'}; score {r.score:.3f})")
        lines.append(f"   {r.snippet}")
        reasons = []
        if r.why.matched_terms:
            reasons.append("terms: " + ", ".join(r.why.matched_terms[:8]))
        if r.why.shared_concepts:
            reasons.append("concepts: " + ", ".join(c.marked_label() for c in r.why.shared_concepts))
        if r.why.neighbours:
            reasons.append("near: " + ", ".join(r.why.neighbours))
        if reasons:
            lines.append("   why: " + "; ".join(reasons))
    return "\n".join(lines)


def build_mcp_server(library: Library, local_writes: bool = False) -> MCPServer:
    """The MCP tools over ``library``; ``local_writes`` lets ``create_draft`` run without a token (stdio: the
    caller is the local user, as with the CLI). Over HTTP every draft needs an editor token."""
    tools: list[Tool] = []

    def tool(description: str) -> Callable[[_Fn], _Fn]:
        def register(fn: _Fn) -> _Fn:
            tools.append(StrictTool.from_function(clear_errors(fn), description=description))
            return fn

        return register

    @tool(description="Search incidents with a question, a description or an error message, in Korean or "
                             "English. Returns ranked incidents with the passage that matched and why.")
    @with_filter_params(_field)
    def search_incidents(
        query: Annotated[str, Field(description="What to look for, in Korean or English.", min_length=1,
                                    max_length=MAX_QUERY_CHARS)],
        k: Annotated[int, Field(description=f"How many incidents (1-{MAX_AGENT_K}).", ge=1, le=MAX_AGENT_K)] = 5,
        mode: Annotated[SearchModeName, Field(description="hybrid (default), lexical or dense.")] = "hybrid",
        filters: IncidentFilter | None = None, lang: LangArg = "en",
    ) -> Annotated[CallToolResult, SearchResponse]:
        response = library.search(query, k=k, mode=mode, filters=filters, lang=lang)
        return _result(_search_text(response), response)

    @tool(description="Passages to quote in an answer: for a question in Korean or English, the best passage of "
                             "each matching incident, with its incident id, title and the source URLs to cite.")
    @with_filter_params(_field)
    def cited_passages(
        query: Annotated[str, Field(description="The question, in Korean or English.", min_length=1,
                                    max_length=MAX_QUERY_CHARS)],
        k: Annotated[int, Field(description=f"How many passages (1-{MAX_RAG_K}).", ge=1, le=MAX_RAG_K)] = 5,
        filters: IncidentFilter | None = None, lang: LangArg = "en",
    ) -> Annotated[CallToolResult, PassageList]:
        passages = library.rag_context(query, k=k, lang=lang, filters=filters)
        blocks = [f"[{rank}] {p.incident_id} — {p.title}" + (f" {DRAFT_MARK}" if p.status == "draft" else "")
                  + f"\nsources: {', '.join(p.source_urls) or 'none recorded'}\n{p.text}" for rank, p in enumerate(passages, 1)]
        return _result("\n\n".join(blocks) if blocks else f"No passages found for: {query}",
                       PassageList(query=query, passages=passages))

    @tool(description="Find incidents like a pasted error, log line or description, or like a known incident "
                             "id. Combines text similarity with shared components, causes and symptoms.")
    @with_filter_params(_field)
    def similar_incidents(
        text: Annotated[str | None, Field(description="Error message, log excerpt, description or a whole write-up.",
                                          max_length=MAX_SIMILAR_TEXT_CHARS)] = None,
        incident_id: Annotated[str | None, Field(description="Or an incident id such as IL-0025.")] = None,
        k: Annotated[int, Field(ge=1, le=MAX_AGENT_K)] = 5, filters: IncidentFilter | None = None, lang: LangArg = "en",
    ) -> Annotated[CallToolResult, SearchResponse]:
        response = library.similar(incident_id=incident_id, text=text, k=k, filters=filters, lang=lang)
        return _result(_search_text(response), response)

    @tool(description="The full record of one incident: summary, narrative, components, causes, symptoms, "
                             "verbatim error signals, lessons, sources and related incidents.")
    def get_incident(
        incident_id: Annotated[str, Field(description="Incident id such as IL-0025.")], lang: LangArg = "en",
    ) -> Annotated[CallToolResult, IncidentDetail]:
        d = library.detail(incident_id, lang=lang)
        lines = [f"{d.id} — {d.title}" + (f" {DRAFT_MARK}" if d.status == "draft" else ""), f"{d.org.label} · {d.date or 'date unknown'}" + (f" · {d.severity}" if d.severity else ""), "", d.summary, "", d.body]
        for name, refs in (("Components", d.components), ("Causes", d.causes), ("Symptoms", d.symptoms)):
            if refs:
                lines.append(f"{name}: " + ", ".join(r.label for r in refs))
        if d.signals:
            lines.append("Signals:\n" + "\n".join(f"  {s.text}" for s in d.signals))
        if d.lessons:
            lines.append("Lessons:\n" + "\n".join(f"  - {lesson}" for lesson in d.lessons))
        lines.append("Sources:\n" + "\n".join(f"  {s.title}: {s.url}" for s in d.sources))
        if d.related:
            lines.append("Related: " + ", ".join(f"{r.id} ({', '.join(r.shared[:3])})" for r in d.related[:5]))
        return _result("\n".join(lines), d)

    @tool(description="List incidents, optionally filtered by organization, component, cause, symptom, tag, "
                             "years or severity.")
    @with_filter_params(_field)
    def list_incidents(
        filters: IncidentFilter | None = None,
        limit: Annotated[int, Field(ge=1, le=MAX_AGENT_LIMIT)] = 20, offset: Annotated[int, Field(ge=0)] = 0,
        lang: LangArg = "en",
    ) -> Annotated[CallToolResult, IncidentPage]:
        page = library.list_incidents(filters, lang=lang, limit=limit, offset=offset)
        lines = [f"{page.total} incident(s); showing {len(page.items)} from {offset}:"]
        lines += [f"{i.id} {i.date or 'date unknown'} {i.org_label}: {i.title}" + (f" {DRAFT_MARK}" if i.status == "draft" else "")
                  for i in page.items]
        return _result("\n".join(lines), page)

    @tool(description="Incidents that share components or causes with one incident; rarer shared concepts weigh more.")
    def related_incidents(
        incident_id: Annotated[str, Field(description="Incident id such as IL-0025.")],
        limit: Annotated[int, Field(ge=1, le=MAX_AGENT_K)] = 10, lang: LangArg = "en",
    ) -> Annotated[CallToolResult, RelatedList]:
        items = library.related(incident_id, lang=lang, limit=limit)
        lines = [f"Related to {incident_id.upper()}:"] + [
            f"{r.id} — {r.title} ({r.shared_phrase(lang) or r.curated_reason or ''}; score {r.score:.2f})" for r in items]
        return _result("\n".join(lines), RelatedList(incident_id=incident_id.upper(), items=items))

    @tool(description="A topic page for a component, cause, symptom, tag or organization (id or label, either "
                             "language): definition, incidents, co-occurring concepts, organizations.")
    def get_topic(
        topic: Annotated[str, Field(description="Concept id or label, e.g. 'nccl', 'InfiniBand', '설정 변경'.")], lang: LangArg = "en",
    ) -> Annotated[CallToolResult, TopicPage]:
        page = library.topic(topic, lang=lang)
        lines = [f"{page.label} ({page.kind} {page.id})"]
        if page.definition:
            lines.append(page.definition)
        lines.append(f"{len(page.incidents)} incident(s): " + ", ".join(f"{i.id} {i.title}" for i in page.incidents[:15]))
        if page.co_occurring:
            lines.append("Seen with: " + ", ".join(f"{c.label} ({c.count})" for c in page.co_occurring))
        return _result("\n".join(lines), page)

    @tool(description="The controlled vocabulary: components, causes, symptoms, tags and organizations with "
                             "labels and aliases. Use the ids as filters.")
    def vocab(
        kind: Annotated[ConceptKindName | None, Field(description="Only this kind; all kinds when omitted.")] = None,
        lang: LangArg = "en",
    ) -> Annotated[CallToolResult, VocabList]:
        entries = [
            VocabEntry(id=c.id, kind=c.kind.value, label=c.label.get(lang), alt_labels=c.alt.get(lang),
                       definition=c.definition.get(lang) if c.definition else None)
            for c in library.concepts(kind)
        ]
        text = "\n".join(f"{e.kind}:{e.id} — {e.label}" + (f" ({', '.join(e.alt_labels[:4])})" if e.alt_labels else "") for e in entries)
        return _result(text, VocabList(kind=kind, concepts=entries))

    @tool(description="Root-cause clusters of the library (graph communities or embedding clusters), each with a "
                      f"bilingual label, size, representative incident and its first {MCP_CLUSTER_MEMBERS} members "
                      "(size counts all; HTTP GET /clusters/{id} lists every one).")
    def list_clusters(
        method: Annotated[ClusterMethodName, Field(description="graph (default) or embedding.")] = "graph",
        lang: LangArg = "en",
    ) -> Annotated[CallToolResult, ClusterSet]:
        result = library.clusters(method, lang, MCP_CLUSTER_MEMBERS)
        lines = [f"{result.quality.clusters} clusters (purity {result.quality.purity:.2f}, NMI {result.quality.nmi:.2f}):"]
        lines += [f"{c.id} ({c.size}) {c.label} — e.g. {c.representative}: " + ", ".join(m.id for m in c.members[:8])
                  for c in result.clusters]
        return _result("\n".join(lines), result)

    @tool(description="Likely causes and components for observed symptoms and/or pasted error text (NCCL watchdog "
                      "messages, Xid lines, 'MFU drops every 15 seconds'), with the incidents behind each.")
    def diagnose(
        text: Annotated[str | None, Field(description="Pasted error text, log lines or a description.", max_length=MAX_QUERY_CHARS)] = None,
        symptoms: Annotated[list[str] | None, Field(description="Symptom ids or labels, e.g. ['collective-timeout'].")] = None,
        lang: LangArg = "en",
    ) -> Annotated[CallToolResult, Diagnosis]:
        result = library.diagnose(symptoms=symptoms or [], text=text, lang=lang)
        lines = [f"{result.note} (confidence: {result.confidence})"]
        lines += [f"cause {c.label} {c.score:.2f}: " + ", ".join(e.id for e in c.evidence) for c in result.causes]
        lines += [f"component {c.label} {c.score:.2f}: " + ", ".join(e.id for e in c.evidence) for c in result.components]
        lines += [f"signal {e.signal} — {e.explanation}" for e in result.signals]
        return _result("\n".join(lines), result)

    @tool(description="Read the shape of a training run's MFU curve (points of seconds and MFU as a fraction of expected, "
                      "optional DCGM throttle bitmask and restart events) and name it: fabric-down, gdr-misconfig, "
                      "degraded-links, gc-drift, thermal-throttle or healthy, with features, likely causes and incidents.")
    def diagnose_series(
        points: Annotated[list[dict[str, Any]] | None,
                          Field(description="[{'seconds': 0, 'mfu': 0.98, 'throttle': 0, 'event': null}, ...]")] = None,
        text: Annotated[str | None, Field(description="Or the series as CSV (seconds,mfu[,throttle,event]) or JSON text.")] = None,
        expected: Annotated[float | None, Field(description="The MFU the run should reach, when values are absolute.", gt=0)] = None,
        lang: LangArg = "en",
    ) -> Annotated[CallToolResult, SeriesDiagnosis]:
        result = library.diagnose_series(points=points, text=text, expected=expected, lang=lang)
        if result.shape is None:
            lines = [result.cannot_tell or "cannot tell"]
        else:
            lines = [f"{result.shape}: {result.label} (confidence {result.confidence:.2f})", result.likely or ""]
            lines += [f"- {line}" for line in result.evidence]
            lines += [f"{i.id} — {i.title}" for i in result.incidents]
        lines.append(result.chart)
        return _result("\n".join(lines), result)

    @tool(description="File a new DRAFT incident for a human reviewer (it is not published). `record` holds incident "
                      "fields as in the YAML library: org, title {en, ko}, summary, body, sources [{url, title}], and "
                      "optionally date, components, causes, symptoms, signals. Invalid fields are named in the error.")
    def create_draft(
        record: Annotated[dict[str, Any], Field(description="Incident fields; the next free id is assigned unless the record names a free one (`id`).")],
        token: Annotated[str | None, Field(description="An editor API token (required over HTTP).")] = None,
    ) -> Annotated[CallToolResult, StoredRecord]:
        actor = "mcp:local" if local_writes and token is None else library.authorize(token, "editor")
        stored = library.create_draft(record, actor=actor)
        return _result(f"Filed draft {stored.id} (etag {stored.etag}); a reviewer publishes it.", stored)

    return MCPServer(name="incidentlib", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING",
                     tools=tools)
