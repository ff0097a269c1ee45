"""Write inferred links and review decisions back to incident YAML files, atomically.

Only the ``inferred`` block and, on accept, the curated list of that kind change; every
other field of the file is kept as written.  The new document is validated before the
file is replaced, so a bad write leaves the old file in place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ..errors import ReviewError
from ..models import Incident, InferredLink, InferredStatus
from ..record_yaml import incident_yaml
from ..storage import atomic_write_text

KIND_FIELD = {"component": "components", "cause": "causes", "symptom": "symptoms"}


def _write(path: Path, document: dict[str, Any]) -> Incident:
    incident = Incident.model_validate(document)
    atomic_write_text(path, incident_yaml(document, path.read_text(encoding="utf-8") if path.exists() else None))
    return incident


def merge_inferred(existing: list[InferredLink], found: list[InferredLink], curated: set[str]) -> list[InferredLink]:
    """New proposals replace old proposals; rejected links stay rejected; curated concepts are never proposed."""
    rejected = [link for link in existing if link.status is InferredStatus.rejected]
    blocked = curated | {link.concept for link in rejected}
    return [*[link for link in found if link.concept not in blocked], *rejected]


def inferred_document(document: dict[str, Any], links: list[InferredLink]) -> dict[str, Any]:
    """``document`` with ``links`` as its proposals (:func:`merge_inferred`); the input is not changed."""
    document = dict(document)
    curated = {*document.get("components", []), *document.get("causes", []), *document.get("symptoms", [])}
    current = [InferredLink.model_validate(x) for x in document.get("inferred", [])]
    merged = merge_inferred(current, links, curated)
    document.pop("inferred", None)
    if merged:
        document["inferred"] = [link.model_dump(mode="json", exclude_defaults=True) | {"confidence": link.confidence}
                                for link in merged]
    return document


def write_inferred(path: Path, links: list[InferredLink]) -> Incident:
    return _write(path, inferred_document(yaml.safe_load(path.read_text(encoding="utf-8")), links))


def review_document(document: dict[str, Any], accept: set[str], reject: set[str],
                    name: str) -> tuple[dict[str, Any], list[str], list[str]]:
    """``document`` with proposed links accepted (moved to the curated list of their kind, dropped
    from ``inferred``) or rejected (kept, marked rejected); ``name`` names the record in errors.
    The input is not changed."""
    document = dict(document)
    links = [InferredLink.model_validate(x) for x in document.get("inferred", [])]
    proposed = {link.concept for link in links if link.status is InferredStatus.proposed}
    unknown = sorted((accept | reject) - proposed)
    if unknown:
        rejected = {link.concept for link in links if link.status is InferredStatus.rejected}
        said = [f"{c} (rejected earlier: a rejected link is never proposed again; to link it, add it to the record's "
                "own concepts)" if c in rejected else c for c in unknown]
        raise ReviewError(f"{name}: no proposed inferred link for {', '.join(said)}")
    both = sorted(accept & reject)
    if both:
        raise ReviewError(f"{name}: cannot both accept and reject {', '.join(both)}")
    kept: list[InferredLink] = []
    for link in links:
        if link.concept in accept:
            field = KIND_FIELD[link.kind.value]
            values = list(document.get(field, []))
            if link.concept not in values:
                values.append(link.concept)
            document[field] = values
        elif link.concept in reject:
            kept.append(link.model_copy(update={"status": InferredStatus.rejected}))
        else:
            kept.append(link)
    document.pop("inferred", None)
    if kept:
        document["inferred"] = [link.model_dump(mode="json", exclude_defaults=True) | {"confidence": link.confidence} for link in kept]
    return document, sorted(accept), sorted(reject)


def review_links(path: Path, accept: set[str], reject: set[str]) -> tuple[Incident, list[str], list[str]]:
    """Accept (move to the curated list of its kind) or reject (keep, marked rejected) proposed links."""
    document, accepted, rejected = review_document(yaml.safe_load(path.read_text(encoding="utf-8")), accept, reject, path.name)
    return _write(path, document), accepted, rejected
