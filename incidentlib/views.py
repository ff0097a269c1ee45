"""Response shapes shared by the CLI's ``--json`` output, the HTTP API and MCP.

These models are the public JSON contract (see docs/json.md): fields may be added,
never renamed or removed without a version bump.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class ConceptRef(BaseModel):
    id: str
    kind: str
    label: str


class SourceView(BaseModel):
    url: str
    title: str
    publisher: str | None = None
    kind: str
    published: str | None = None


class SignalView(BaseModel):
    text: str
    note: str | None = None


class IncidentSummary(BaseModel):
    id: str
    title: str
    org: str
    org_label: str
    date: str | None
    severity: str | None = None
    status: str = "published"
    tags: list[str]
    components: list[str]


class RelatedItem(BaseModel):
    id: str
    title: str
    org: str
    date: str | None
    shared: list[str] = Field(description="Labels of the shared components and causes, in the requested language.")
    shared_concepts: list[ConceptRef]
    score: float
    curated_reason: str | None = Field(default=None, description="Why a curator linked the two, when they did.")


class IncidentDetail(BaseModel):
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
    signals: list[SignalView]
    detection: str | None = None
    mitigation: str | None = None
    lessons: list[str]
    sources: list[SourceView]
    related: list[RelatedItem]


class IncidentPage(BaseModel):
    total: int
    items: list[IncidentSummary]


class ConceptCount(BaseModel):
    id: str
    kind: str
    label: str
    count: int


class TopicPage(BaseModel):
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


class GraphNode(BaseModel):
    id: str
    type: str
    label: str


class GraphLink(BaseModel):
    source: str
    target: str
    type: str


class NodeLinkGraph(BaseModel):
    """Node-link JSON, the shape d3 and networkx.node_link_graph understand."""

    directed: bool = False
    nodes: list[GraphNode]
    links: list[GraphLink]


class GraphPath(BaseModel):
    source: str
    target: str
    length: int
    nodes: list[GraphNode]
    concepts: list[str] = Field(description="Labels of the concepts the path passes through.")
    links: list[GraphLink]


class MatchedChunk(BaseModel):
    id: str
    kind: str
    lang: str
    text: str


class Why(BaseModel):
    """Why a result was returned: the passage that matched, the query terms in it, shared concepts."""

    chunk: MatchedChunk
    matched_terms: list[str]
    shared_concepts: list[ConceptRef]
    lexical_rank: int | None = None
    dense_rank: int | None = None
    graph_score: float | None = None


class SearchResult(BaseModel):
    id: str
    score: float
    title: str
    org: str
    date: str | None
    snippet: str
    why: Why


class SearchResponse(BaseModel):
    query: str
    mode: str
    results: list[SearchResult]


class RagPassage(BaseModel):
    text: str
    incident_id: str
    title: str
    source_urls: list[str]
    lang: str
    score: float


class ClusterView(BaseModel):
    id: str
    method: str
    label: str = Field(description="Built from the cluster's defining concepts, in the requested language.")
    labels: dict[str, str]
    size: int
    representative: str
    defining_concepts: list[ConceptCount]
    terms: list[str]
    members: list[IncidentSummary]


class ClusterQuality(BaseModel):
    """Agreement with the library's own cause annotations (see docs/clusters.md)."""

    purity: float
    nmi: float
    clusters: int
    singletons: int


class ClusterSet(BaseModel):
    method: str
    quality: ClusterQuality
    clusters: list[ClusterView]


class MapPoint(BaseModel):
    """One incident placed on the 2-D map of the library (t-SNE of its embedding)."""

    id: str
    title: str
    x: float
    y: float
    cluster: str | None = Field(default=None, description="Graph cluster id, when the incident is in one.")


class EvidenceIncident(BaseModel):
    id: str
    title: str
    score: float


class Candidate(BaseModel):
    id: str
    kind: str
    label: str
    score: float
    support: int = Field(description="How many evidence incidents carry this concept.")
    evidence: list[EvidenceIncident]


class SignalExplanation(BaseModel):
    signal: str
    incident_id: str
    explanation: str
    matched: float = Field(description="Share of the signal's tokens found in the pasted text.")


class Diagnosis(BaseModel):
    symptoms: list[ConceptRef] = Field(description="Symptoms given or recognised in the text.")
    recognised: list[ConceptRef] = Field(description="Other concepts recognised in the text.")
    causes: list[Candidate]
    components: list[Candidate]
    similar: list[EvidenceIncident]
    signals: list[SignalExplanation]
    confidence: str = Field(description="high, medium or low")
    note: str


class TopicSummary(BaseModel):
    id: str
    kind: str
    label: str
    incidents: int


class TopicList(BaseModel):
    items: list[TopicSummary]


class VocabConcept(BaseModel):
    id: str
    kind: str
    labels: dict[str, str]
    alt_labels: dict[str, list[str]]
    broader: str | None = None
    definition: dict[str, str] = Field(default_factory=dict)
    url: str | None = None


class VocabResponse(BaseModel):
    total: int
    concepts: list[VocabConcept]


class OrganizationSummary(BaseModel):
    id: str
    label: str
    url: str | None = None
    incidents: int


class OrganizationList(BaseModel):
    items: list[OrganizationSummary]
