"""Alerts in, incidents out: Prometheus Alertmanager webhooks, generic JSON alerts and log lines.

An Alertmanager webhook (``version: "4"``) carries ``alerts[]`` with ``status``, ``labels``,
``annotations``, ``startsAt``…; each *firing* alert is diagnosed from:

- its ``alertname`` and the values of signal-bearing labels (``xid``, ``reason``, ``error``…),
- the annotations ``summary``, ``description``, ``message`` and any log line
  (``log``, ``log_line``, ``logline``, ``error``, ``output``).

The answer combines the recognised error signals (data/diagnosis/signals.yaml), the text
diagnosis (causes and components with the incidents behind them) and incidents ranked by
``0.5 · concept score + 0.5 · text similarity`` (each divided by its best), where the
concept score is :func:`~incidentlib.analysis.mfu.rank_by_concepts` over the signals' symptoms,
causes and components.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import AlertError
from ..requests import ALERT_NAME_FIELDS, ALERT_TEXT_FIELDS, MAX_ALERTS
from ..views import AlertAnswer, AlertsAnswer, RankedIncident, SignalMatch
from .mfu import rank_by_concepts

if TYPE_CHECKING:
    from ..library import Library

SUPPORTED_VERSION = "4"
TEXT_ANNOTATIONS = ALERT_TEXT_FIELDS
SIGNAL_LABELS = {"xid": "Xid {}", "sxid": "SXid {}", "reason": "{}", "error": "{}", "err_code": "{}", "status": "{}"}
# The diagnosed text (alert name, annotations, log lines) is cut here, the library's query limit.
MAX_ALERT_TEXT = 2000
SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}

PHRASES = {
    "en": {"signal": "Signal", "causes": "Likely causes", "incidents": "Similar incidents", "none": "nothing similar in the library",
           "confidence": "confidence"},
    "ko": {"signal": "신호", "causes": "유력한 원인", "incidents": "비슷한 사례", "none": "라이브러리에 비슷한 사례가 없습니다",
           "confidence": "신뢰도"},
}


def _strings(mapping: object, where: str) -> dict[str, str]:
    if mapping is None:
        return {}
    if not isinstance(mapping, Mapping):
        raise AlertError(where, "must be an object of string values")
    return {str(k): str(v) for k, v in mapping.items() if v is not None}


def normalise(payload: object) -> tuple[str | None, str | None, list[dict[str, Any]]]:
    """(receiver, group status, alerts) from an Alertmanager webhook or a generic alert."""
    if not isinstance(payload, Mapping):
        raise AlertError("body", "must be a JSON object (an Alertmanager webhook or one alert)")
    if "alerts" in payload:
        version = payload.get("version")
        if version is not None and str(version) != SUPPORTED_VERSION:
            raise AlertError("version", f"Alertmanager webhook version {version!r} is not supported (expected {SUPPORTED_VERSION!r})")
        alerts = payload["alerts"]
        if not isinstance(alerts, list) or not alerts:
            raise AlertError("alerts", "must be a non-empty list of alerts")
        if len(alerts) > MAX_ALERTS:
            raise AlertError("alerts", f"has {len(alerts)} alerts; the limit is {MAX_ALERTS} per request")
        common = _strings(payload.get("commonLabels"), "commonLabels")
        common_notes = _strings(payload.get("commonAnnotations"), "commonAnnotations")
        found = []
        for index, alert in enumerate(alerts):
            if not isinstance(alert, Mapping):
                raise AlertError(f"alerts[{index}]", "must be an object with labels and annotations")
            labels = {**common, **_strings(alert.get("labels"), f"alerts[{index}].labels")}
            notes = {**common_notes, **_strings(alert.get("annotations"), f"alerts[{index}].annotations")}
            status = str(alert.get("status") or payload.get("status") or "firing")
            found.append({"status": status, "labels": labels, "annotations": notes})
        receiver = payload.get("receiver")
        return (str(receiver) if receiver is not None else None), (str(payload.get("status")) if payload.get("status") else None), found
    # a generic alert: {"alertname"|"title"|"name", "labels", "annotations", "message"|"description"|"log"...}
    labels = _strings(payload.get("labels"), "labels")
    notes = _strings(payload.get("annotations"), "annotations")
    for key in ALERT_NAME_FIELDS:
        if isinstance(payload.get(key), str) and "alertname" not in labels:
            labels["alertname"] = payload[key]
    for key in (*TEXT_ANNOTATIONS, "text"):
        if isinstance(payload.get(key), str):
            notes.setdefault(key, payload[key])
    if not labels and not notes:
        raise AlertError("body", "an alert needs labels, annotations, or a message/description/log text "
                                 "(or send an Alertmanager webhook with alerts[])")
    return None, None, [{"status": str(payload.get("status") or "firing"), "labels": labels, "annotations": notes}]


def alert_text(labels: dict[str, str], notes: dict[str, str]) -> str:
    parts = [labels.get("alertname", "")]
    for key, template in SIGNAL_LABELS.items():
        if key in labels:
            parts.append(template.format(labels[key]))
    for key in (*TEXT_ANNOTATIONS, "text"):
        if notes.get(key):
            parts.append(notes[key])
    return "\n".join(p for p in parts if p.strip())[:MAX_ALERT_TEXT]


def _merge(by_concept: list[RankedIncident], similar: list[tuple[str, str, float]], limit: int) -> list[RankedIncident]:
    concept = {r.id: r for r in by_concept}
    best_text = max((s for _, _, s in similar), default=0.0) or 1.0
    text = {i: s / best_text for i, _, s in similar}
    titles = {i: t for i, t, _ in similar}
    ids = set(concept) | set(text)
    score = {i: 0.5 * (concept[i].score if i in concept else 0.0) + 0.5 * text.get(i, 0.0) for i in ids}
    ranked = []
    for incident_id in sorted(ids, key=lambda i: (-score[i], i))[:limit]:
        base = concept.get(incident_id)
        ranked.append(RankedIncident(id=incident_id, title=base.title if base else titles[incident_id],
                                     score=round(score[incident_id], 4), shared=base.shared if base else []))
    return ranked


def markdown(name: str, status: str, labels: dict[str, str], signals: list[SignalMatch], answer: AlertAnswer, lang: str) -> str:
    words = PHRASES[lang]
    where = next((labels[k] for k in ("instance", "node", "hostname", "pod") if k in labels), None)
    lines = [f"**[{status.upper()}] {name}**" + (f" on `{where}`" if where else "")]
    for signal in signals[:3]:
        label = f"{signal.family_label} {signal.code}" + (f" ({signal.name})" if signal.name else "")
        lines.append(f"**{words['signal']}:** {label} — {signal.meaning}")
    if answer.causes:
        causes = ", ".join(f"{c.label} ({c.support})" for c in answer.causes[:3])
        lines.append(f"**{words['causes']}:** {causes} _({words['confidence']}: {answer.confidence})_")
    if answer.incidents:
        lines.append(f"**{words['incidents']}:** " + "; ".join(f"{i.id} {i.title}" for i in answer.incidents[:3]))
    else:
        lines.append(f"**{words['incidents']}:** {words['none']}")
    return "\n".join(lines)


def answer_text(library: Library, name: str, status: str, labels: dict[str, str], text: str, lang: str, limit: int) -> AlertAnswer:
    signals = library.explain_signals(text, lang=lang)
    signals.sort(key=lambda s: SEVERITY_ORDER.get(s.severity, 3))
    concepts: dict[str, list[str]] = {"symptoms": [], "causes": [], "components": []}
    for signal in signals:
        for field, refs in (("symptoms", signal.symptoms), ("causes", signal.causes), ("components", signal.components)):
            concepts[field] += [r.id for r in refs if r.id not in concepts[field]]
    diagnosis = library.diagnose(text=text, lang=lang, limit=limit)
    by_concept = rank_by_concepts(library, concepts, lang, limit * 2) if any(concepts.values()) else []
    similar = [(e.id, e.title, e.score) for e in diagnosis.similar]
    incidents = _merge(by_concept, similar, limit)
    answer = AlertAnswer(alertname=name, status=status, labels=labels, text=text, signals=signals,
                         causes=diagnosis.causes, components=diagnosis.components, incidents=incidents,
                         confidence=diagnosis.confidence, markdown="")
    return answer.model_copy(update={"markdown": markdown(name, status, labels, signals, answer, lang)})


def answer_alerts(library: Library, payload: object, lang: str, limit: int) -> AlertsAnswer:
    receiver, status, alerts = normalise(payload)
    answers, skipped = [], []
    for alert in alerts:
        name = alert["labels"].get("alertname", "alert")
        if alert["status"] != "firing":
            skipped.append(name)
            continue
        text = alert_text(alert["labels"], alert["annotations"])
        if not text.strip():
            raise AlertError(f"alert {name!r}", "has nothing to diagnose (no alertname, annotations or log line)")
        answers.append(answer_text(library, name, alert["status"], alert["labels"], text, lang, limit))
    return AlertsAnswer(receiver=receiver, status=status, answered=len(answers), skipped=skipped, alerts=answers)
