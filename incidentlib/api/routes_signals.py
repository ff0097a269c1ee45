"""MFU curves and alerts: thin routes over Library.diagnose_series and Library.answer_alerts."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..requests import MAX_DIAGNOSE_LIMIT, MAX_SERIES_BYTES, MAX_SERIES_POINTS, Lang, alert_payload_schema
from ..views import AlertsAnswer, SeriesDiagnosis
from .deps import LangDep, LibraryDep

router = APIRouter(tags=["analysis"])

ALERT_EXAMPLE = {
    "version": "4", "groupKey": "{}:{alertname=\"NCCLWatchdogTimeout\"}", "truncatedAlerts": 0, "status": "firing",
    "receiver": "incidentlib", "groupLabels": {"alertname": "NCCLWatchdogTimeout"},
    "commonLabels": {"alertname": "NCCLWatchdogTimeout", "severity": "critical"}, "commonAnnotations": {},
    "externalURL": "http://alertmanager:9093",
    "alerts": [{
        "status": "firing", "labels": {"alertname": "NCCLWatchdogTimeout", "instance": "gpu-node-17", "severity": "critical"},
        "annotations": {"summary": "Training job hung in a collective",
                        "log": "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=408951, OpType=_ALLGATHER_BASE, "
                               "Timeout(ms)=600000) ran for 600351 milliseconds before timing out"},
        "startsAt": "2024-06-01T12:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "http://prometheus:9090/graph", "fingerprint": "3f2a9c1b7d4e5a60",
    }],
}


class SeriesRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": [
        {"points": [{"seconds": 0, "mfu": 0.31}, {"seconds": 10, "mfu": 0.3}], "lang": "en"},
        {"text": "seconds,mfu,throttle\n0,0.98,0\n1,0.7,0x40\n", "expected": None},
    ], "oneOf": [  # exactly one of points or text (_one_source), as the schema says it
        {"required": ["points"], "properties": {"points": {"type": "array"}, "text": {"type": "null"}}},
        {"required": ["text"], "properties": {"text": {"type": "string"}, "points": {"type": "null"}}},
    ]})

    points: list[dict[str, Any]] | None = Field(default=None, max_length=MAX_SERIES_POINTS,
                                                description="Objects with seconds, mfu and optional throttle, event.")
    text: str | None = Field(default=None, max_length=MAX_SERIES_BYTES, description="The series as CSV (with a header) or JSON text.")
    expected: float | None = Field(default=None, gt=0, description="The MFU the run should reach, when values are absolute.")
    limit: int = Field(default=5, ge=1, le=MAX_DIAGNOSE_LIMIT)
    lang: Lang | None = None

    @model_validator(mode="after")
    def _one_source(self) -> SeriesRequest:
        if (self.points is None) == (self.text is None):
            raise ValueError("give exactly one of points or text")
        return self


@router.post("/diagnose/series", response_model=SeriesDiagnosis)
def diagnose_series(body: SeriesRequest, library: LibraryDep, lang: LangDep) -> SeriesDiagnosis:
    """The shape of an MFU curve (fabric-down, gdr-misconfig, degraded-links, gc-drift, thermal-throttle, healthy),
    its features, likely causes and the incidents that show it; a "cannot tell" with the reason when it cannot."""
    return library.diagnose_series(points=body.points, text=body.text, expected=body.expected,
                                   lang=body.lang or lang, limit=body.limit)


@router.post("/alerts/alertmanager", response_model=AlertsAnswer)
def alertmanager(
    library: LibraryDep, lang: LangDep,
    payload: Annotated[dict[str, Any], Body(openapi_examples={"alertmanager": {"summary": "Alertmanager webhook", "value": ALERT_EXAMPLE}},
                                            json_schema_extra=alert_payload_schema())],
    limit: Annotated[int, Query(ge=1, le=MAX_DIAGNOSE_LIMIT)] = 5,
) -> AlertsAnswer:
    """An Alertmanager webhook (version 4) or one generic JSON alert in; for each firing alert, the recognised
    signals, likely causes, similar incidents and a Markdown message for a chat channel."""
    return library.answer_alerts(payload, lang=lang, limit=limit)
