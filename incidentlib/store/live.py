"""Writes through the overlay, and the merged view every process reads.

Every write is: read the current document inside the write transaction, apply the change,
validate the result by the rules of ``incidentlib validate`` (shape and references, against
the live set of ids), then store the document and a change-log entry in the same commit.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..errors import (
    IncidentNotFound,
    InvalidRequest,
    PreconditionFailed,
    PreconditionRequired,
    StateConflict,
    ValidationFailed,
)
from ..loader import INCIDENTS_DIR, LibraryData, Problem, check_incident
from ..models import INCIDENT_ID_RE, Incident, InferredLink
from .overlay import OverlayRecord, OverlayStore, Transaction

#: Digits in a new id's number (IL-0001); the models accept 4 to 6.
ID_DIGITS = 4
DEFAULT_PREFIX = "IL"
#: Fields a client may not set through an update: the id names the record, the status moves by publish/reject.
FIXED_FIELDS = ("id", "status")
Doc = dict[str, Any]


def dump(incident: Incident) -> Doc:
    """The stored form of an incident: JSON types, fields left at their defaults omitted (as a curator writes YAML)."""
    doc = incident.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
    return {"id": incident.id, "status": incident.status.value, **doc}  # the status is always explicit


def etag(doc: Doc) -> str:
    """A strong ETag: the first 16 hex digits of SHA-256 over the canonical JSON of the document."""
    canonical = json.dumps(doc, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return '"' + hashlib.sha256(canonical.encode()).hexdigest()[:16] + '"'


def _etag_matches(if_match: str, current: str) -> bool:
    """Whether an ``If-Match`` value names ``current`` (or is ``*``): one tag or a comma-separated list, quoted as
    HTTP writes them or bare as people copy them; a weak ``W/`` tag is compared by its value."""
    wanted = {tag.strip().removeprefix("W/").strip('"') for tag in if_match.split(",")}
    return "*" in wanted or current.strip('"') in wanted


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON Merge Patch: objects merge key by key, ``null`` removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(before: Doc | None, after: Doc | None) -> list[dict[str, Any]]:
    """An RFC 6902 JSON Patch from ``before`` to ``after`` at field level (add / remove / replace)."""
    old, new = before or {}, after or {}
    ops: list[dict[str, Any]] = []
    for key in sorted(set(old) | set(new)):
        if key not in new:
            ops.append({"op": "remove", "path": f"/{key}"})
        elif key not in old:
            ops.append({"op": "add", "path": f"/{key}", "value": new[key]})
        elif old[key] != new[key]:
            ops.append({"op": "replace", "path": f"/{key}", "value": new[key]})
    return ops


def overlay_hash(base: LibraryData, store_id: str, seq: int) -> str:
    """``sha256(base content hash : store id : seq)``: the content hash of the base with a store's changes up to
    ``seq`` applied (a store's change numbers are never reused, and its id tells stores apart)."""
    return hashlib.sha256(f"{base.content_hash}:{store_id}:{seq}".encode()).hexdigest()


def patched(data: LibraryData, records: dict[str, OverlayRecord | None], base: LibraryData, seq: int,
            store_id: str) -> LibraryData:
    """``data`` with only the changed incidents replaced: O(changes) records read, not O(library).

    ``records`` maps each changed id to its overlay row (None: no row any more, so the base record shows).
    """
    changes: dict[str, Incident | None] = {}
    for incident_id, record in records.items():
        if record is None:
            changes[incident_id] = base.incidents.get(incident_id)
        elif record.deleted:
            changes[incident_id] = None
        else:
            changes[incident_id] = Incident.model_validate(record.doc)
    return _overlaid(data, changes, overlay_hash(base, store_id, seq))


def merged(base: LibraryData, records: list[OverlayRecord], seq: int, store_id: str) -> LibraryData:
    """``base`` with the overlay applied: live records replace or add incidents, tombstones remove them."""
    changes: dict[str, Incident | None] = {
        record.id: None if record.deleted else Incident.model_validate(record.doc) for record in records}
    return _overlaid(base, changes, overlay_hash(base, store_id, seq))


def _overlaid(data: LibraryData, changes: dict[str, Incident | None], content_hash: str) -> LibraryData:
    """``data`` with ``changes`` laid over its records (:class:`~incidentlib.overlaid.OverlaidRecords`: the others are
    not read).  Chunks that came with ``data`` (a start snapshot's) are carried too, with only the changed incidents'
    cut again (:func:`~incidentlib.search.chunks.patched_chunks`), so the search engine after the write reads no other
    record either; otherwise the engine cuts them (reusing what it cut before, ``library_chunks``'s memo)."""
    from ..overlaid import OverlaidRecords
    from ..search.chunks import IncidentChunks, incident_chunks, patched_chunks

    incidents = OverlaidRecords(data.incidents, changes)
    chunks = data.chunks
    if isinstance(chunks, IncidentChunks):
        cut = {incident_id: incident_chunks(record, data.vocab) for incident_id, record in changes.items()
               if record is not None}
        chunks = patched_chunks(chunks, list(incidents), cut)
    else:
        chunks = None
    # not the YAML files' content any more: no start snapshot (incidentlib.start_snapshot) is made or used for it
    return replace(data, incidents=incidents, content_hash=content_hash, snapshot_key=None, chunks=chunks)


class Writer:
    """The write operations of one library: base data from YAML, changes into ``store``."""

    def __init__(self, store: OverlayStore, base: Callable[[], LibraryData]) -> None:
        self.store = store
        self._base = base

    # ---- reading inside a transaction ------------------------------------------------
    def _live_ids(self, tx: Transaction) -> set[str]:
        ids = set(self._base().incidents)
        for incident_id, deleted in tx.states().items():
            (ids.discard if deleted else ids.add)(incident_id)
        return ids

    def _current(self, tx: Transaction, incident_id: str, deleted: bool = False) -> Doc:
        """The live document (or, with ``deleted``, the tombstoned one); :class:`IncidentNotFound` otherwise."""
        key = incident_id.strip().upper()
        record = tx.record(key)
        if record is not None:
            if record.deleted == deleted:
                return record.doc
        elif not deleted and key in self._base().incidents:
            return dump(self._base().incidents[key])
        raise IncidentNotFound(incident_id)

    def _check(self, tx: Transaction, doc: Doc, ids: set[str] | None = None) -> Doc:
        ident = str(doc.get("id", "new"))
        incident, problems = check_incident(f"{INCIDENTS_DIR}/{ident}.yaml", doc, ids or self._live_ids(tx) | {ident},
                                            self._base().vocab)
        if problems or incident is None:
            raise ValidationFailed(problems)
        return dump(incident)

    def _next_id(self, tx: Transaction, prefix: str) -> str:
        pattern = re.compile(rf"^{re.escape(prefix)}-(\d+)$")
        numbers = [int(m.group(1)) for i in [*self._base().incidents, *tx.ids()] if (m := pattern.match(i))]
        return f"{prefix}-{max(numbers, default=0) + 1:0{ID_DIGITS}d}"

    # ---- operations ------------------------------------------------------------------------
    def create_draft(self, doc: Doc, actor: str) -> Doc:
        """Store ``doc`` as a new draft with the next free id of its prefix (or the id it names, when free)."""
        if not isinstance(doc, dict):
            raise ValidationFailed([Problem(file="request body", message="expected a JSON object of incident fields")])
        with self.store.write() as tx:
            doc = {key: value for key, value in doc.items() if value is not None}
            wanted = doc.get("id")
            if wanted is not None:
                wanted = str(wanted).strip().upper()
                if not INCIDENT_ID_RE.match(wanted):
                    raise ValidationFailed([Problem(file="request body", field="id",
                                                    message=f"incident id {wanted!r} must look like IL-0001")])
                held = tx.record(wanted)
                if held is not None and held.deleted:  # a rejected draft or a deleted record keeps its id
                    raise StateConflict(f"id: {wanted!r} belongs to a {'rejected draft' if held.doc.get('status') == 'draft' else 'deleted record'}"
                                        f"; `incidentlib restore {wanted}` (POST /incidents/{wanted}/restore) brings it "
                                        "back, or leave the id out to get a new one")
                if wanted in self._base().incidents or held is not None:
                    raise StateConflict(f"id: incident {wanted!r} already exists")
            if doc.get("status") not in (None, "draft"):  # said, rather than a 201 for a record not as asked
                raise ValidationFailed([Problem(file="request body", field="status", message=(
                    f"a new record is a draft, not {doc['status']!r}: create it, then publish it once it meets "
                    "the published rules"))])
            incident_id = wanted or self._next_id(tx, DEFAULT_PREFIX)
            stored = self._check(tx, {**doc, "id": incident_id, "status": "draft"})
            tx.put(incident_id, "create", actor, None, stored)
        return stored

    def update(self, incident_id: str, patch: Doc, if_match: str | None, actor: str) -> Doc:
        """Apply a JSON Merge Patch when ``if_match`` is the current ETag (412 when stale, 428 when missing)."""
        if not if_match:
            raise PreconditionRequired(f"If-Match: updating {incident_id} needs the ETag of the version you edited")
        if not isinstance(patch, dict):
            raise ValidationFailed([Problem(file="request body", message="expected a JSON merge patch object")])
        fixed = [key for key in FIXED_FIELDS if key in patch]
        if fixed:
            raise ValidationFailed([Problem(file="request body", field=key, message="cannot be changed by an update "
                                            "(the id is fixed; use publish or reject for the status)") for key in fixed])
        return self._change(incident_id, "update", actor, lambda doc: merge_patch(doc, patch), if_match)

    def _change(self, incident_id: str, action: str, actor: str, edit: Callable[[Doc], Doc],
                if_match: str | None = None) -> Doc:
        with self.store.write() as tx:
            before = self._current(tx, incident_id)
            if if_match is not None and not _etag_matches(if_match, etag(before)):
                raise PreconditionFailed(f"If-Match: {incident_id} changed since you read it "
                                         f"(current ETag {etag(before)}); read it again and reapply your edit")
            after = self._check(tx, edit(copy.deepcopy(before)))
            if after == before:  # nothing changed: no history entry, no new version
                return before
            tx.put(after["id"], action, actor, before, after)
        return after

    def publish(self, incident_id: str, actor: str, if_match: str | None = None) -> Doc:
        """Draft -> published; the record must now meet the published rules (both languages, date, a component)."""
        def edit(doc: Doc) -> Doc:
            if doc.get("status") != "draft":
                raise StateConflict(f"status: {doc['id']} is not a draft")
            return {**doc, "status": "published"}
        return self._change(incident_id, "publish", actor, edit, if_match)

    def _tombstone(self, incident_id: str, action: str, actor: str, need_draft: bool = False,
                   if_match: str | None = None) -> Doc:
        with self.store.write() as tx:
            before = self._current(tx, incident_id)
            if if_match is not None and not _etag_matches(if_match, etag(before)):
                raise PreconditionFailed(f"If-Match: {incident_id} changed since you read it "
                                         f"(current ETag {etag(before)}); nothing was changed: read it again")
            if need_draft and before.get("status") != "draft":
                raise StateConflict(f"status: {before['id']} is {before.get('status', 'published')}, not a draft; only a draft "
                                    f"is rejected (`incidentlib delete {before['id']}` or DELETE /incidents/{before['id']} "
                                    "removes a published incident)")
            referrers = [i for i in self._live_ids(tx) if i != before["id"] and any(
                link.get("id") == before["id"] for link in self._current(tx, i).get("related", []))]
            if referrers:
                raise StateConflict(f"related: {', '.join(sorted(referrers))} link to {before['id']}; remove those links first")
            tx.put(before["id"], action, actor, before, None, deleted=True)
        return before

    def reject(self, incident_id: str, actor: str, if_match: str | None = None) -> Doc:
        """Reject a draft: it leaves the library (a restorable tombstone, like a delete); refused (412) when
        ``if_match`` is given and is no longer the draft's ETag, so a reviewer never throws away an edit unseen."""
        return self._tombstone(incident_id, "reject", actor, need_draft=True, if_match=if_match)

    def delete(self, incident_id: str, actor: str) -> Doc:
        """Soft delete: the record leaves every view; :meth:`restore` brings it back."""
        return self._tombstone(incident_id, "delete", actor)

    def restore(self, incident_id: str, actor: str) -> Doc:
        """Bring back a deleted or rejected record as it was."""
        with self.store.write() as tx:
            key = incident_id.strip().upper()
            record = tx.record(key)
            if (record is not None and not record.deleted) or (record is None and key in self._base().incidents):
                raise StateConflict(f"{key} is not deleted or rejected: there is nothing to restore")
            if record is None:
                removal = next((c for c in reversed(self.store.history(key)) if c.action in ("delete", "reject")), None)
                if removal is not None:  # export-yaml wrote the library without it and emptied the store
                    raise StateConflict(f"{key} was {'deleted' if removal.action == 'delete' else 'rejected'} by {removal.actor} "
                                        f"at {removal.at}, and "
                                        "`incidentlib export-yaml` has since written the library without it, so it "
                                        f"cannot be restored; its last version is in `incidentlib history {key}`")
            doc = self._current(tx, incident_id, deleted=True)
            stored = self._check(tx, doc)
            tx.put(stored["id"], "restore", actor, None, stored)
        return stored

    def add_link(self, incident_id: str, target: str, reason: dict[str, str], actor: str) -> Doc:
        """Add a curated related link to ``target``; to an existing link, the reason's languages given replace
        those languages only (a new English reason keeps the Korean one), and the link keeps its place."""
        target = target.strip().upper()

        def edit(doc: Doc) -> Doc:
            links = list(doc.get("related", []))
            for position, link in enumerate(links):
                if link.get("id") == target:
                    links[position] = {**link, "reason": {**link.get("reason", {}), **reason}}
                    break
            else:
                links.append({"id": target, "reason": reason})
            return {**doc, "related": links}
        return self._change(incident_id, "link", actor, edit)

    def remove_link(self, incident_id: str, target: str, actor: str) -> Doc:
        """Remove the curated link to ``target``; :class:`StateConflict` when there is none."""
        target = target.strip().upper()

        def edit(doc: Doc) -> Doc:
            links = doc.get("related", [])
            kept = [link for link in links if link.get("id") != target]
            if len(kept) == len(links):
                raise StateConflict(f"related: {doc['id']} has no link to {target}")
            result = {**doc, "related": kept}
            if not kept:
                result.pop("related")
            return result
        return self._change(incident_id, "unlink", actor, edit)

    def review_concept(self, incident_id: str, concept: str, accept: bool, actor: str, if_match: str | None = None) -> Doc:
        """Accept or reject a proposed link of the record's ``inferred:`` block, as ``incidentlib review`` does.

        Accept: the concept moves into the curated field of its kind and leaves ``inferred``;
        reject: it stays in ``inferred`` marked rejected, so tagging never proposes it again.
        """
        from ..errors import ReviewError
        from ..tagging.store import review_document

        def edit(doc: Doc) -> Doc:
            chosen = {concept}
            try:
                return review_document(doc, chosen if accept else set(), set() if accept else chosen, str(doc["id"]))[0]
            except ReviewError as exc:
                raise StateConflict(f"inferred: {exc}") from None
        return self._change(incident_id, "accept-concept" if accept else "reject-concept", actor, edit, if_match)

    def store_inferred(self, incident_id: str, links: list[InferredLink], actor: str) -> Doc:
        """The tagger's proposals for a record, merged as ``incidentlib tag`` merges them into a file (rejected links
        stay rejected, curated concepts are never proposed), as one change of the record's history."""
        from ..tagging.store import inferred_document

        with self.store.write() as tx:
            before = self._current(tx, incident_id)
            proposed = inferred_document(copy.deepcopy(before), links)
            if proposed == before:  # the same proposals again: no change, no line in the history
                return before
            after = self._check(tx, proposed)
            tx.put(after["id"], "tag", actor, before, after)
        return after

    def review_concepts(self, incident_id: str, accept: set[str], reject: set[str], actor: str) -> Doc:
        """Accept and reject several proposed links at once (``incidentlib review``): all of them, as one change, or
        none when one of them is not a proposed link of the record."""
        from ..errors import ReviewError
        from ..tagging.store import review_document

        def edit(doc: Doc) -> Doc:
            try:
                return review_document(doc, accept, reject, str(doc["id"]))[0]
            except ReviewError as exc:
                raise StateConflict(f"inferred: {exc}") from None
        return self._change(incident_id, "review-concepts", actor, edit)

    def import_drafts(self, docs: list[Doc], actor: str) -> list[Doc]:
        """Store already-built import drafts in one transaction: all or nothing."""
        with self.store.write() as tx:
            ids = self._live_ids(tx) | {str(d.get("id")) for d in docs}
            stored = []
            for doc in docs:
                if doc.get("id") in self._base().incidents or tx.record(str(doc.get("id"))) is not None:
                    raise StateConflict(f"id: incident {doc.get('id')!r} already exists; run the import again")
                checked = self._check(tx, {**doc, "status": "draft"}, ids)
                tx.put(checked["id"], "import", actor, None, checked)
                stored.append(checked)
        return stored


def check_prefix(prefix: str) -> str:
    if not re.fullmatch(r"[A-Z]{2,8}", prefix):
        raise InvalidRequest(f"id_prefix: must be 2 to 8 uppercase letters, got {prefix!r}")
    return prefix
