"""Response shapes shared by the CLI's ``--json`` output, the HTTP API and MCP.

These models are the public JSON contract (see docs/json.md): fields may be added,
never renamed or removed without a version bump.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

#: How text output (CLI, MCP tools) marks a draft: a record awaiting review, whose claims no curator has checked.
DRAFT_MARK = "[draft]"


class View(BaseModel):
    """The base of every response shape. Pydantic builds a model's validator and serializer on first use
    (``defer_build``) instead of at import, so a command pays only for the shapes it answers with: building
    all of them took about half of this module's import time (``python -X importtime``)."""

    model_config = ConfigDict(defer_build=True)


class CompactReport(View):
    """What :meth:`Library.compact` did."""

    dense: str = Field(description="compacted (the carried index written: anew, or appended to the HNSW graph or "
                       "inverted file on disk), reused (another process had written it) or none (nothing carried)")
    dense_rows: int = Field(description="Live rows of the dense index written (one per chunk).")
    dead_rows_dropped: int = Field(description="Rows of removed or edited chunks the carried index held and the index "
                                   "written no longer holds (an HNSW graph or inverted file extended keeps them).")
    wal_bytes_before: int = Field(description="Size of the write store's write-ahead log before the checkpoint.")
    wal_bytes_after: int = Field(description="Its size after (0 once truncated; unchanged while a reader held it).")
    seconds: float


class SparqlResult(View):
    """The outcome of a query: rows for SELECT, a boolean for ASK, a graph for CONSTRUCT/DESCRIBE."""

    type: Literal["SELECT", "ASK", "CONSTRUCT", "DESCRIBE"]
    variables: list[str] = []
    rows: list[dict[str, str | None]] = []
    boolean: bool | None = None
    turtle: str | None = None
    json_results: dict[str, Any] | None = None


class ConceptRef(View):
    id: str
    kind: str
    label: str
    inferred: bool = False  # recognised in the text, not asserted by a curator
    # in similar's why: shared only through narrower concepts (a driver bug and a firmware bug share software-bug)
    broader: bool = False

    def marked_label(self) -> str:
        """The label with ``(broader)`` and ``(inferred)`` when they apply, as the CLI and the MCP tools print it."""
        marks = [mark for mark, flag in (("broader", self.broader), ("inferred", self.inferred)) if flag]
        return f"{self.label} ({', '.join(marks)})" if marks else self.label


class InferredView(View):
    """An inferred (not curated) concept link, with its provenance."""

    concept: ConceptRef
    evidence: str
    method: str
    confidence: float
    status: str = "proposed"


class TagResult(View):
    """The inferred links ``incidentlib tag`` found for one record."""

    id: str
    inferred: list[InferredView]
    problem: str | None = None  # why nothing was stored for this record (a record the write rules refuse)


class ReviewResult(View):
    id: str
    accepted: list[str]
    rejected: list[str]
    remaining: list[InferredView]


class SourceView(View):
    url: str
    title: str
    publisher: str | None = None
    kind: str
    published: str | None = None


class SignalView(View):
    text: str
    note: str | None = None


class IncidentSummary(View):
    id: str
    title: str
    org: str
    org_label: str
    date: str | None
    severity: str | None = None
    status: str = "published"
    tags: list[str]
    components: list[str]


class RelatedItem(View):
    id: str
    title: str
    org: str
    date: str | None
    shared: list[str] = Field(description="Labels of the shared components and causes, in the requested language.")
    shared_concepts: list[ConceptRef]
    score: float
    curated_reason: str | None = Field(default=None, description="Why a curator linked the two, when they did.")

    def shared_phrase(self, lang: str) -> str:
        """The seed's form, ``같은 원인 X · 공통 Y`` (``same cause X · shared Y``): the shared causes, then the shared
        components, an inferred one marked; empty when the two share neither.  The CLI, MCP and the web page say it
        so."""
        cause_word, shared_word, mark = ("같은 원인", "공통", "추론") if lang == "ko" else ("same cause", "shared", "inferred")

        def labels(kind: str) -> str:
            return ", ".join(f"{c.label} ({mark})" if c.inferred else c.label for c in self.shared_concepts if c.kind == kind)

        causes, parts = labels("cause"), labels("component")
        return " · ".join([*([f"{cause_word} {causes}"] if causes else []), *([f"{shared_word} {parts}"] if parts else [])])


class IncidentDetail(View):
    id: str
    lang: str
    title: str
    summary: str
    body: str
    body_lang: str = Field(description="The language the body is actually in (it falls back when missing).")
    org: ConceptRef
    date: str | None
    date_kind: str
    status: str = "published"
    severity: str | None = None
    tags: list[ConceptRef]
    components: list[ConceptRef]
    causes: list[ConceptRef]
    symptoms: list[ConceptRef]
    inferred: list[InferredView] = []  # proposed links, not curated: shown apart, marked inferred
    signals: list[SignalView]
    detection: str | None = None
    mitigation: str | None = None
    lessons: list[str]
    sources: list[SourceView]
    related: list[RelatedItem]


class IncidentPage(View):
    total: int
    items: list[IncidentSummary]


class ConceptCount(View):
    id: str
    kind: str
    label: str
    count: int


class TopicPage(View):
    id: str
    kind: str
    label: str
    labels: dict[str, str]
    alt_labels: list[str]
    definition: str | None = None
    broader: list[ConceptRef]
    narrower: list[ConceptRef]
    incidents: list[IncidentSummary]
    co_occurring: list[ConceptCount]
    organizations: list[ConceptCount]


class GraphNode(View):
    id: str
    type: str
    label: str


class GraphLink(View):
    source: str
    target: str
    type: str


class NodeLinkGraph(View):
    """Node-link JSON, the shape d3 and networkx.node_link_graph understand."""

    directed: bool = False
    nodes: list[GraphNode]
    links: list[GraphLink]


class GraphPath(View):
    source: str
    target: str
    length: int
    nodes: list[GraphNode]
    concepts: list[str] = Field(description="Labels of the concepts the path passes through.")
    links: list[GraphLink]


class MatchedChunk(View):
    id: str
    kind: str
    lang: str
    text: str


class Why(View):
    """Why a result was returned: the passage that matched, the query terms in it, shared concepts."""

    chunk: MatchedChunk
    matched_terms: list[str]
    shared_concepts: list[ConceptRef]
    lexical_rank: int | None = None
    dense_rank: int | None = None
    graph_score: float | None = None
    evidence: dict[str, float] | None = None  # similar: raw lexical / dense / graph evidence before fusion
    neighbours: list[str] = []  # similar: its nearest incidents that match the query better and raised its score


class SearchResult(View):
    id: str
    score: float
    title: str
    org: str
    date: str | None
    snippet: str
    why: Why
    status: str = Field(description="The record's review state: published, or draft (imported or filed, awaiting a "
                                    "curator's review; its claims are unchecked).")


class SearchResponse(View):
    query: str
    mode: str
    results: list[SearchResult]


class RagPassage(View):
    text: str = Field(description="A passage of the incident's own text (never its list of vocabulary names).")
    incident_id: str
    title: str
    source_urls: list[str]
    lang: str = Field(description="The language the text is in: en or ko, or raw for a log line or error string "
                                  "quoted verbatim (the same in either language).")
    score: float
    kind: str = Field(description="Where in the record the text is: title (title and summary), body, detail "
                                  "(detection, mitigation, lessons) or signal (a verbatim log line).")
    chunk_id: str = Field(description="The passage's id, as in a search result's why.chunk.id.")
    status: str = Field(description="The record's review state: published, or draft (awaiting review).")


class ClusterView(View):
    id: str
    method: str
    label: str = Field(description="Built from the cluster's defining concepts, in the requested language.")
    labels: dict[str, str]
    size: int
    representative: str
    defining_concepts: list[ConceptCount]
    terms: list[str]
    members: list[IncidentSummary]


class ClusterQuality(View):
    """Agreement with the library's own cause annotations (see docs/clusters.md)."""

    purity: float
    nmi: float
    clusters: int
    singletons: int


class ClusterSet(View):
    method: str
    quality: ClusterQuality
    clusters: list[ClusterView]


class MapPoint(View):
    """One incident placed on the 2-D map of the library (t-SNE of its embedding)."""

    id: str
    title: str
    x: float
    y: float
    cluster: str | None = Field(default=None, description="Graph cluster id, when the incident is in one.")


class EvidenceIncident(View):
    id: str
    title: str
    score: float


class Candidate(View):
    id: str
    kind: str
    label: str
    score: float
    support: int = Field(description="How many evidence incidents carry this concept.")
    evidence: list[EvidenceIncident]


class SignalExplanation(View):
    signal: str
    incident_id: str
    explanation: str
    matched: float = Field(description="Share of the signal's tokens found in the pasted text.")


class Diagnosis(View):
    symptoms: list[ConceptRef] = Field(description="Symptoms given or recognised in the text.")
    recognised: list[ConceptRef] = Field(description="Other concepts recognised in the text.")
    causes: list[Candidate]
    components: list[Candidate]
    similar: list[EvidenceIncident]
    signals: list[SignalExplanation]
    confidence: str = Field(description="high, medium or low")
    note: str
    explained: list[SignalMatch] = Field(default_factory=list,
                                         description="Known error-signal families (Xid, NCCL, IB, PCIe, ECC, k8s) found in the text.")


class TopicSummary(View):
    id: str
    kind: str
    label: str
    incidents: int


class TopicList(View):
    items: list[TopicSummary]


class VocabConcept(View):
    id: str
    kind: str
    labels: dict[str, str]
    alt_labels: dict[str, list[str]]
    broader: str | None = None
    definition: dict[str, str] = Field(default_factory=dict)
    url: str | None = None


class VocabResponse(View):
    total: int
    concepts: list[VocabConcept]


class OrganizationSummary(View):
    id: str
    label: str
    url: str | None = None
    incidents: int


class OrganizationList(View):
    items: list[OrganizationSummary]


class SignalMatch(View):
    """One error signal recognised by family and code (data/diagnosis/signals.yaml)."""

    family: str = Field(description="xid, sxid, nccl-watchdog, nccl-error, ib-completion, pcie, ecc, k8s-event, ...")
    family_label: str
    code: str
    name: str | None = None
    known: bool = Field(description="False when the family is known but this code is not in the table.")
    severity: str = Field(description="info, warning or critical")
    meaning: str
    excerpt: str = Field(description="The part of the text that matched.")
    symptoms: list[ConceptRef]
    causes: list[ConceptRef]
    components: list[ConceptRef]


class RankedIncident(View):
    id: str
    title: str
    score: float
    pinned: bool = Field(default=False, description="Named by the shape table (the incident that describes the pattern).")
    shared: list[ConceptRef] = Field(default_factory=list, description="Concepts it shares with the shape or signal.")


class SeriesFeatures(View):
    points: int = Field(description="Usable points after cleaning.")
    duration_s: float
    step_s: float = Field(description="Median sampling interval.")
    warmup_s: float = Field(description="Seconds dropped as warm-up at the start.")
    pauses: int = Field(description="Runs of near-zero points dropped (checkpoints, restarts).")
    dropped_share: float = Field(description="Share of input points missing, in warm-up or paused.")
    level: float | None = Field(description="Median MFU as a fraction of expected.")
    good_level: float | None = Field(description="90th percentile of MFU as a fraction of expected.")
    drift: float | None = Field(description="Share of the good level lost over a run segment (Theil–Sen slope).")
    recovery: float | None = Field(description="Mean rise at restarts as a share of the good level.")
    restarts: list[float] = Field(description="Times (s) of restarts, marked or detected.")
    restarts_marked: int
    dip_period_s: float | None
    periodicity: float | None = Field(description="Autocorrelation peak of the detrended curve (0-1).")
    dip_depth: float | None = Field(description="(median - p5) of the detrended curve over the good level.")
    throttle_overlap: float | None = Field(description="Share of dip samples with a heat/power throttle bit, above the share elsewhere.")


class ShapeScore(View):
    id: str
    label: str
    score: float


class CurvePoint(View):
    t: float = Field(description="Seconds, on the series' own clock (as features.restarts).")
    v: float = Field(description="MFU as a fraction of expected.")


class SeriesDiagnosis(View):
    shape: str | None = Field(description="fabric-down, gdr-misconfig, degraded-links, gc-drift, thermal-throttle, healthy, or null when it cannot tell.")
    label: str | None
    description: str | None
    confidence: float
    cannot_tell: str | None = Field(description="Why no shape was named, when shape is null.")
    evidence: list[str] = Field(description="The rules that held, with their reasons.")
    likely: str | None = Field(description="The usual cause of this shape.")
    features: SeriesFeatures
    scores: list[ShapeScore]
    symptoms: list[ConceptRef]
    causes: list[ConceptRef]
    components: list[ConceptRef]
    incidents: list[RankedIncident]
    chart: str = Field(description="A small text chart of the curve; the marker line shows dips (v), restarts (|) and drift (\\\\).")
    curve: list[CurvePoint] = Field(default_factory=list, description="The cleaned curve for plotting: per time bucket its lowest "
                                    "and highest point, so dips survive the thinning.")
    dips: list[float] = Field(default_factory=list, description="Times (s, as curve) of the time buckets holding dip samples.")


class AlertAnswer(View):
    alertname: str
    status: str
    labels: dict[str, str]
    text: str = Field(description="What was diagnosed: alert name, annotations and log lines.")
    signals: list[SignalMatch]
    causes: list[Candidate]
    components: list[Candidate]
    incidents: list[RankedIncident]
    confidence: str
    markdown: str = Field(description="A short message ready to post to a chat channel.")


class AlertsAnswer(View):
    receiver: str | None = None
    status: str | None = None
    answered: int
    skipped: list[str] = Field(description="Alerts not diagnosed (resolved), by name.")
    alerts: list[AlertAnswer]


class WatchAnswer(View):
    key: str = Field(description="family:code of the problem.")
    line: str = Field(description="The first line that showed it.")
    line_number: int
    answer: AlertAnswer


# ---- writes, history and tokens (docs/api.md "Writing") ---------------------------------
class StoredRecord(View):
    """An incident document as stored, with the ETag to send back in ``If-Match``."""

    id: str
    status: str
    etag: str
    record: dict[str, Any]


class HistoryEntry(View):
    """One change: who (token name), when, what (a JSON Patch, plus the whole before/after)."""

    seq: int
    action: str
    actor: str
    at: str
    patch: list[dict[str, Any]]
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None


class HistoryPage(View):
    id: str
    items: list[HistoryEntry]


class TokenView(View):
    """A token as listed; its secret is never shown again."""

    id: str
    name: str
    role: str
    created: str
    expires: str | None
    revoked: str | None
    active: bool


class CreatedToken(TokenView):
    """A new token: ``token`` is shown this once and stored only as a salted hash."""

    token: str


class ExportReport(View):
    """What ``export-yaml`` wrote back into the YAML library."""

    written: list[str]
    removed: list[str]
