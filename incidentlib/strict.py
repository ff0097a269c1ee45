"""Editorial rules checked by ``incidentlib validate --strict``.

The loader accepts anything well-formed; the bundled library promises more.  A
published record must be fully bilingual (title, summary and body in Korean and
English), name at least one symptom, say what kind of document each source is, write
Korean particles attached to Latin words and digits ("GPU를", not "GPU 를"), and not
duplicate another record.  Drafts are exempt from the completeness rules (they await a
curator) but are still checked for duplicates.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from .dedupe import TEXT_SIMILARITY_THRESHOLD, shared_urls, similar_texts
from .loader import INCIDENTS_DIR, LibraryData, Problem
from .models import LANGS, Incident, Text

# Korean particles (조사) and copula endings that standard spacing attaches to the word
# before them; a space between "GPU" and "를" is the error this rule catches.
_PARTICLES = (
    "은", "는", "이", "가", "을", "를", "의", "에", "에서", "에게", "께서", "한테", "로", "으로", "와", "과",
    "도", "만", "까지", "부터", "보다", "처럼", "마다", "이나", "이란", "란", "이라는", "라는", "이라고",
    "라고", "로서", "으로서", "로써", "으로써", "이랑", "랑", "이며", "이고", "이다", "였다", "이었다",
)
# A second particle stacked on the first: 에서는, 으로도, 와의, 까지만 …
_STACKED = ("는", "도", "의", "만", "은", "를", "가", "서")
_PARTICLE_ALT = "|".join(sorted(_PARTICLES, key=len, reverse=True))
_STACKED_ALT = "|".join(_STACKED)
# Latin word or number, optional closing bracket/quote, ONE space, a particle, then the end
# of the word. The end-of-word lookahead is what keeps "GPU 같은" or "GPU 이상" (real words
# that merely start with a particle's syllable) from matching.
SPACED_PARTICLE_RE = re.compile(
    r"(?<![A-Za-z0-9_])"
    r"(?P<word>[A-Za-z][A-Za-z0-9.+_\-/]*|[0-9][0-9.,%]*)"
    r"(?P<close>[)\]\"'’”]?)"
    r" "
    rf"(?P<particle>(?:{_PARTICLE_ALT})(?:{_STACKED_ALT})?)"
    r"(?=[\s.,;:!?)\]\"'’”…·]|$)"
)
# How much text either side of a spacing error a message quotes.
_CONTEXT_CHARS = 12


def spaced_particles(text: str) -> list[str]:
    """Every "Latin word or digit + space + particle" in ``text``, as the snippet to fix."""
    return [match.group(0) for match in SPACED_PARTICLE_RE.finditer(text)]


def _korean_texts(incident: Incident) -> Iterator[tuple[str, str]]:
    """(field path, Korean text) for every bilingual field of an incident."""
    singles: list[tuple[str, Text | None]] = [
        ("title", incident.title), ("summary", incident.summary), ("body", incident.body),
        ("detection", incident.detection), ("mitigation", incident.mitigation),
    ]
    for name, value in singles:
        if value is not None and value.ko:
            yield f"{name}.ko", value.ko
    for index, lesson in enumerate(incident.lessons):
        if lesson.ko:
            yield f"lessons[{index}].ko", lesson.ko
    for index, link in enumerate(incident.related):
        if link.reason.ko:
            yield f"related[{index}].reason.ko", link.reason.ko
    for index, signal in enumerate(incident.signals):
        if signal.note is not None and signal.note.ko:
            yield f"signals[{index}].note.ko", signal.note.ko


def _dedupe_text(incident: Incident, lang: str) -> str:
    return "\n".join(part for part in (incident.title.get(lang, False), incident.summary.get(lang, False),
                                        incident.body.get(lang, False)) if part)


def check_incident(incident: Incident, file: str) -> list[Problem]:
    """The per-record strict rules: languages, symptoms, source kinds, Korean spacing."""
    found: list[Problem] = []
    if not incident.is_draft:
        for name in ("title", "summary", "body"):
            text: Text = getattr(incident, name)
            missing = [lang for lang in LANGS if not getattr(text, lang)]
            if missing:
                found.append(Problem(file=file, field=name, message=f"missing language(s): {', '.join(missing)}"))
        if not incident.symptoms:
            found.append(Problem(file=file, field="symptoms", message="empty: name at least one symptom"))
    for index, source in enumerate(incident.sources):
        # the model defaults a missing kind to "postmortem"; strict wants it said explicitly
        if "kind" not in source.model_fields_set:
            found.append(Problem(file=file, field=f"sources[{index}].kind",
                                       message=f"missing: say what kind of document {source.url} is"))
    for field, korean in _korean_texts(incident):
        for match in SPACED_PARTICLE_RE.finditer(korean):
            start = max(0, match.start() - _CONTEXT_CHARS)
            snippet = korean[start:match.end() + _CONTEXT_CHARS].replace("\n", " ")
            fixed = f"{match.group('word')}{match.group('close')}{match.group('particle')}"
            found.append(Problem(file=file, field=field,
                                       message=f"particle spaced from a Latin word or number: {match.group(0)!r} "
                                               f"should be {fixed!r} (…{snippet}…)"))
    return found


def check_duplicates(incidents: Mapping[str, Incident], file_of: dict[str, str],
                     threshold: float = TEXT_SIMILARITY_THRESHOLD) -> list[Problem]:
    """Records that cite the same source URL, or whose text is ≥ ``threshold`` similar.

    A shared URL is allowed when the two records link each other in ``related`` (in
    either direction): several incidents told in one paper or one postmortem are
    distinct, and the curated link says a person has judged them so.  Similar text is
    never allowed.
    """
    found: list[Problem] = []
    linked = {(incident.id, link.id) for incident in incidents.values() for link in incident.related}

    def related(a: str, b: str) -> bool:
        return (a, b) in linked or (b, a) in linked

    urls = {key: [str(source.url) for source in incident.sources] for key, incident in incidents.items()}
    for url, keys in sorted(shared_urls(urls).items()):
        for index, key in enumerate(keys):  # keys are sorted: each unlinked pair is reported once
            others = [other for other in keys[index + 1:] if not related(key, other)]
            if others:
                found.append(Problem(
                    file=file_of[key], field="sources",
                    message=f"duplicate: same source URL {url} as {', '.join(others)} "
                            "(if they are different incidents, link them in `related`)"))
    for lang in LANGS:
        texts = {key: _dedupe_text(incident, lang) for key, incident in incidents.items()}
        for pair in similar_texts(texts, threshold):
            found.append(Problem(
                file=file_of[pair.a], field=f"{lang} text",
                message=f"duplicate: {lang} title, summary and body {pair.score:.0%} similar to {pair.b} "
                        f"(threshold {threshold:.0%})"))
    return found


def check_strict(data: LibraryData) -> list[Problem]:
    """Every strict-rule problem in a loaded library, per record first, then duplicates."""
    incidents = data.incidents
    file_of = {key: f"{INCIDENTS_DIR}/{key}.yaml" for key in incidents}
    found: list[Problem] = []
    for key, incident in incidents.items():
        found.extend(check_incident(incident, file_of[key]))
    found.extend(check_duplicates(incidents, file_of))
    return found
