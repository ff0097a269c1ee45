"""Small views of concepts and incidents shared by every graph answer."""

from __future__ import annotations

from ..loader import LibraryData
from ..models import Incident
from ..views import ConceptRef, IncidentSummary


def concept_ref(data: LibraryData, concept_id: str, lang: str) -> ConceptRef:
    """A concept's id, kind (``unknown`` if the vocabulary lacks it) and label in ``lang``."""
    concept = data.vocab.get(concept_id)
    kind = concept.kind.value if concept else "unknown"
    return ConceptRef(id=concept_id, kind=kind, label=data.vocab.label(concept_id, lang))


def summary(data: LibraryData, incident: Incident, lang: str) -> IncidentSummary:
    """One line of a listing: id, title in ``lang``, organization, date, severity, status, tags, components."""
    return IncidentSummary(
        id=incident.id,
        title=incident.title.get(lang),
        org=incident.org,
        org_label=data.vocab.label(incident.org, lang),
        date=incident.date,
        severity=incident.severity.value if incident.severity else None,
        status=incident.status.value,
        tags=list(incident.tags),
        components=list(incident.components),
    )
