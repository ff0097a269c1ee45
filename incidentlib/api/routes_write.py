"""Writes: drafts, merge-patch updates with ETags, review, links, soft delete, import, history and tokens.

Every write needs an editor token (its name is recorded as the actor); token management needs admin.
"""

from __future__ import annotations

import tempfile
from pathlib import Path as FilePath
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Header, Path, Query, Response
from pydantic import BaseModel, Field

from ..library import MEDIA_TYPES, ExportFormat
from ..requests import MAX_ID_CHARS, MAX_IMPORT_CHARS, MAX_REF_CHARS, MAX_TOKEN_DAYS, ImportFormatName, file_suffix
from ..views import CreatedToken, HistoryPage, StoredRecord, TokenView
from .deps import AdminDep, EditorDep, LibraryDep
from .schemas import ErrorBody

router = APIRouter()
IncidentId = Annotated[str, Path(description="Incident id such as IL-0025.", max_length=MAX_ID_CHARS)]
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "No, unknown, revoked or expired token"},
    403: {"model": ErrorBody, "description": "The token's role is too low"},
    404: {"model": ErrorBody, "description": "Unknown id"},
    409: {"model": ErrorBody, "description": "Not allowed in the record's state"},
    422: {"description": "Invalid record: `problems` names every field and reason"},
}


def _stored(response: Response, record: StoredRecord) -> StoredRecord:
    response.headers["ETag"] = record.etag
    return record


@router.post("/incidents", status_code=201, response_model=StoredRecord, responses=ERRORS, tags=["writes"])
def create_draft(library: LibraryDep, actor: EditorDep, response: Response,
                 doc: Annotated[dict[str, Any], Body(description="Incident fields as in data/incidents/*.yaml; `id` optional.")]) -> StoredRecord:
    """Create a draft (status is always `draft`); the id is the next free IL-NNNN unless the body names a free one."""
    record = library.create_draft(doc, actor=actor)
    response.headers["Location"] = f"/incidents/{record.id}"
    return _stored(response, record)


@router.get("/incidents/{incident_id}/record", response_model=StoredRecord, responses=ERRORS, tags=["writes"])
def get_record(incident_id: IncidentId, library: LibraryDep, response: Response) -> StoredRecord:
    """The record as stored (drafts included), with its `ETag` for a later `If-Match`."""
    return _stored(response, library.record(incident_id))


@router.patch("/incidents/{incident_id}", response_model=StoredRecord,
              responses={**ERRORS, 412: {"model": ErrorBody, "description": "Stale If-Match"},
                         428: {"model": ErrorBody, "description": "If-Match missing"}}, tags=["writes"])
def update(incident_id: IncidentId, library: LibraryDep, actor: EditorDep, response: Response,
           patch: Annotated[dict[str, Any], Body(description="A JSON Merge Patch (RFC 7386): null removes a field.")],
           if_match: Annotated[str | None, Header(description="The ETag of the version you edited.")] = None) -> StoredRecord:
    """Change fields of a record; refused with 412 when someone else changed it since you read its ETag."""
    return _stored(response, library.update_incident(incident_id, patch, if_match, actor=actor))


@router.post("/incidents/{incident_id}/publish", response_model=StoredRecord,
             responses={**ERRORS, 412: {"model": ErrorBody, "description": "If-Match names another version"}}, tags=["writes"])
def publish(incident_id: IncidentId, library: LibraryDep, actor: EditorDep, response: Response,
            if_match: Annotated[str | None, Header()] = None) -> StoredRecord:
    """Publish a draft; 422 names each field the published rules still miss."""
    return _stored(response, library.publish(incident_id, actor=actor, if_match=if_match))


@router.post("/incidents/{incident_id}/reject", response_model=StoredRecord,
             responses={**ERRORS, 412: {"model": ErrorBody, "description": "If-Match names another version"}}, tags=["writes"])
def reject(incident_id: IncidentId, library: LibraryDep, actor: EditorDep,
           if_match: Annotated[str | None, Header(description="The ETag of the version you reviewed.")] = None) -> StoredRecord:
    """Reject a draft: it leaves the library (restorable); with `If-Match`, only the version you reviewed (412 when
    someone changed it since)."""
    return library.reject(incident_id, actor=actor, if_match=if_match)


@router.delete("/incidents/{incident_id}", response_model=StoredRecord, responses=ERRORS, tags=["writes"])
def delete(incident_id: IncidentId, library: LibraryDep, actor: EditorDep) -> StoredRecord:
    """Soft delete: the record leaves every view; `POST .../restore` brings it back."""
    return library.delete(incident_id, actor=actor)


@router.post("/incidents/{incident_id}/restore", response_model=StoredRecord, responses=ERRORS, tags=["writes"])
def restore(incident_id: IncidentId, library: LibraryDep, actor: EditorDep, response: Response) -> StoredRecord:
    """Bring back a deleted or rejected record."""
    return _stored(response, library.restore(incident_id, actor=actor))


class LinkBody(BaseModel):
    target: str = Field(max_length=MAX_ID_CHARS, description="The related incident's id.")
    reason: dict[Literal["en", "ko"], str] = Field(description="Why they are related, in en and/or ko.", min_length=1)


@router.post("/incidents/{incident_id}/links", response_model=StoredRecord, responses=ERRORS, tags=["writes"])
def add_link(incident_id: IncidentId, body: LinkBody, library: LibraryDep, actor: EditorDep, response: Response) -> StoredRecord:
    """Add a curated related link (or replace its reason)."""
    return _stored(response, library.add_link(incident_id, body.target, {str(k): v for k, v in body.reason.items()}, actor=actor))


@router.delete("/incidents/{incident_id}/links/{target}", response_model=StoredRecord, responses=ERRORS, tags=["writes"])
def remove_link(incident_id: IncidentId, target: IncidentId, library: LibraryDep, actor: EditorDep,
                response: Response) -> StoredRecord:
    """Remove a curated related link."""
    return _stored(response, library.remove_link(incident_id, target, actor=actor))


@router.post("/incidents/{incident_id}/concepts/{concept}/{decision}", response_model=StoredRecord,
             responses={**ERRORS, 412: {"model": ErrorBody, "description": "If-Match names another version"}}, tags=["writes"])
def review_concept(incident_id: IncidentId, concept: Annotated[str, Path(max_length=MAX_REF_CHARS)],
                   decision: Literal["accept", "reject"], library: LibraryDep, actor: EditorDep, response: Response,
                   if_match: Annotated[str | None, Header(description="The ETag of the version you reviewed.")] = None,
                   ) -> StoredRecord:
    """Accept a proposed inferred concept into its curated field, or mark it rejected (as `incidentlib review`); with
    `If-Match`, only on the version you reviewed (412 when someone changed it since)."""
    return _stored(response, library.review_concept(incident_id, concept, decision == "accept", actor=actor,
                                                    if_match=if_match))


@router.get("/drafts", response_model=list[StoredRecord], tags=["writes"])
def drafts(library: LibraryDep) -> list[StoredRecord]:
    """The review queue: every draft with its ETag."""
    return library.drafts()


@router.get("/incidents/{incident_id}/history", response_model=HistoryPage, responses=ERRORS, tags=["writes"])
def history(incident_id: IncidentId, library: LibraryDep) -> HistoryPage:
    """Every change: who (token name), when, a JSON Patch and the before/after documents."""
    return library.history(incident_id)


@router.get("/history", tags=["writes"], response_class=Response,
            responses={200: {"content": {MEDIA_TYPES[ExportFormat(fmt)]: {} for fmt in ("ttl", "jsonld", "nt")}}})
def provenance(library: LibraryDep, fmt: Annotated[Literal["ttl", "jsonld", "nt"], Query(alias="format")] = "ttl",
               incident: Annotated[str | None, Query(max_length=MAX_ID_CHARS)] = None) -> Response:
    """The change log as PROV-O (prov:Activity, prov:wasAssociatedWith, prov:generatedAtTime ...)."""
    return Response(library.history_rdf(fmt, incident), media_type=MEDIA_TYPES[ExportFormat(fmt)])


class ImportBody(BaseModel):
    format: ImportFormatName = Field(
        description="As `incidentlib import --format`; `document`: the content is one postmortem (Markdown, text or "
                    "HTML, optional YAML front matter).")
    content: str = Field(max_length=MAX_IMPORT_CHARS, description="The collection's text, as the CLI would read it from a file.")
    maps: list[str] = Field(default_factory=list, description="FIELD=SOURCE, as `incidentlib import --map`.")
    sets: list[str] = Field(default_factory=list, description="FIELD=VALUE for every record, `{path}` filled from "
                                                              "each record, as `incidentlib import --set`.")
    id_prefix: str = "IL"
    lang: Literal["en", "ko"] = "en"
    dry_run: bool = False
    keep_near_duplicates: bool = False
    date_format: str | None = Field(default=None, max_length=64,
                                    description="The file's date form for strptime (e.g. %m/%d/%Y), as `--date-format`.")


@router.post("/import", responses=ERRORS, tags=["writes"])
def import_records(body: ImportBody, library: LibraryDep, actor: EditorDep) -> dict[str, Any]:
    """Import a collection as drafts (same formats and mapping as the CLI), all or nothing; `dry_run` writes nothing."""
    with tempfile.TemporaryDirectory(prefix="incidentlib-upload-") as folder:
        source = FilePath(folder) / f"upload{file_suffix(body.format)}"
        source.write_text(body.content, encoding="utf-8")
        report = library.import_drafts(source, body.format, body.maps, id_prefix=body.id_prefix, lang=body.lang,
                                       dry_run=body.dry_run, keep_near_duplicates=body.keep_near_duplicates,
                                       date_format=body.date_format, sets=body.sets, actor=actor)
    result: dict[str, Any] = report.model_dump(mode="json")
    return result


class TokenRequest(BaseModel):
    name: str = Field(min_length=1, max_length=64)
    role: Literal["reader", "editor", "admin"]
    expires_days: int | None = Field(default=None, ge=1, le=MAX_TOKEN_DAYS)


@router.post("/tokens", status_code=201, response_model=CreatedToken, responses=ERRORS, tags=["tokens"])
def create_token(body: TokenRequest, library: LibraryDep, _: AdminDep) -> CreatedToken:
    """A new token; the secret is in this response only."""
    return library.create_token(body.name, body.role, body.expires_days)


@router.get("/tokens", response_model=list[TokenView], responses=ERRORS, tags=["tokens"])
def list_tokens(library: LibraryDep, _: AdminDep) -> list[TokenView]:
    return library.tokens()


@router.delete("/tokens/{token_id}", response_model=TokenView, responses=ERRORS, tags=["tokens"])
def revoke_token(token_id: Annotated[str, Path(max_length=16)], library: LibraryDep, _: AdminDep) -> TokenView:
    return library.revoke_token(token_id)
