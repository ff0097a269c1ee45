"""Page routes. Every page is a plain GET with its state in the query string, so each
page and each search has a permanent URL that can be shared and bookmarked.

Pages go through the :class:`~incidentlib.library.Library` only; the JSON API keeps its own
paths (``/incidents``, ``/search``…), the pages live at ``/`` and under ``/ui/``.
"""

from __future__ import annotations

from pathlib import Path as FilePath
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Header, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from markupsafe import escape
from pydantic import TypeAdapter, ValidationError
from starlette.concurrency import run_in_threadpool

from ..errors import Busy, FilterError, IncidentlibError, NotFound
from ..library import Library
from ..requests import (
    MAX_ID_CHARS,
    MAX_QUERY_CHARS,
    MAX_REF_CHARS,
    MAX_SERIES_BYTES,
    MAX_SIMILAR_TEXT_CHARS,
    IncidentFilter,
)
from . import _figures, _search
from ._i18n import error_lead, texts
from ._paging import page_number

HERE = FilePath(__file__).parent
templates = Jinja2Templates(directory=str(HERE / "templates"))
templates.env.filters["highlight"] = _figures.highlight

router = APIRouter(include_in_schema=False)

#: Members listed under each cluster of the clusters page; the rest are in the cluster's JSON (a 100k library's
#: clusters would otherwise put every incident of the library in one page).
CLUSTER_MEMBERS_SHOWN = 100
# Similar incidents and likely causes on "have we seen this?": the CLI's defaults.
SEEN_SIMILAR, SEEN_CAUSES = 10, 5
SEVERITIES = ("sev1", "sev2", "sev3", "sev4")
# A pasted series is shown again in the box when short enough to edit; a long one is not echoed back.
SERIES_ECHO_CHARS = 20_000
#: A year filter is written with at most four digits; anything else is refused like a bad severity, not ignored.
YEAR_DIGITS = 4
FILTER_FIELDS = ("org", "component", "cause", "tag", "year", "severity")
INCIDENT_HREF = "/ui/incidents/{id}"
TOPIC_HREF = "/ui/topics/{id}"
#: The API's description linked from every page: Swagger UI, whose script and style the app serves itself
#: (api/docs_page.py), so it works offline, where the README says the tool runs.
API_DOC_HREF = "/docs"
LANGS = ("en", "ko")


def _library(request: Request) -> Library:
    library: Library = request.app.state.library
    library.refresh()  # pages follow writes from any process, like the API
    return library


def _lang(lang: str | None, accept_language: str | None) -> str:
    """``?lang=`` wins, then the first of ko/en in Accept-Language, then English."""
    if lang in LANGS:
        return lang
    for part in (accept_language or "").split(","):
        tag = part.split(";")[0].strip().lower()
        if tag.startswith("ko"):
            return "ko"
        if tag.startswith("en"):
            return "en"
    return "en"


def _url(path: str, **params: Any) -> str:
    query = urlencode({k: v for k, v in params.items() if v not in (None, "")})
    return f"{path}?{query}" if query else path


def _page(request: Request, template: str, lang: str, title: str, status_code: int = 200, *,
          switch_path: str | None = None, switch_params: dict[str, Any] | None = None, **context: Any) -> HTMLResponse:
    """A page; its language switch goes to the same address in the other language.

    A page answering a ``POST`` (a refused form, a pasted text) names the GET address that shows the same thing in
    ``switch_path`` and ``switch_params``: the POST address itself cannot be followed as a link (405).
    """
    path = request.url.path if switch_path is None else switch_path
    params = dict(request.query_params) if switch_params is None else switch_params
    params.pop("lang", None)
    other = "en" if lang == "ko" else "ko"
    return templates.TemplateResponse(
        request, template, status_code=status_code,
        context={"t": texts(lang), "lang": lang, "title": title, "switch_url": _url(path, **params, lang=other),
                 "incident_href": INCIDENT_HREF, "topic_href": TOPIC_HREF, "api_doc_href": API_DOC_HREF, "url": _url,
                 **context},
    )


def _error(request: Request, lang: str, status_code: int, message: str, suggestions: list[str] | None = None,
           parameter: str | None = None, localized: bool = False) -> HTMLResponse:
    """The error page: a heading in the page's language and ``message``; a message of the library (English; not
    ``localized``) follows a sentence in the page's language naming the field it is about (:func:`._i18n.error_lead`)."""
    t = texts(lang)
    heading = t["not_found"] if status_code == 404 else t["bad_request"]
    lead = None if localized else error_lead(lang, message, parameter, missing=status_code == 404)
    return _page(request, "error.html", lang, heading, status_code=status_code, heading=heading, message=message,
                 lead=lead, suggestions=suggestions or [])


def _refused(request: Request, lang: str, exc: Exception) -> HTMLResponse:
    """The error page of a request the library refused (400), naming the parameter the error names."""
    return _error(request, lang, 400, str(exc), parameter=getattr(exc, "parameter", None))


def _checked(value: str, name: str) -> bool:
    """A check box's value from the address (absent or empty: off), read by pydantic's rule for a boolean, as the HTTP
    API reads ``?inferred=``; anything else is a :class:`FilterError` naming the field."""
    if not value.strip():
        return False
    try:
        return _BOOLEAN.validate_strings(value.strip())
    except ValidationError:
        raise FilterError(f"{name}: {value[:MAX_REF_CHARS]!r} is neither on (1, true, on, yes) nor off (0, false, "
                          "off, no)", parameter=name) from None


_BOOLEAN = TypeAdapter(bool)


def _filters(org: str, component: str, cause: str, tag: str, year: str, severity: str, inferred: str = "") -> IncidentFilter:
    year = year.strip()
    if year and not (year.isdigit() and len(year) <= YEAR_DIGITS):
        raise FilterError(f"year: {year[:YEAR_DIGITS * 2]!r} is not a year (write it as 2024)", parameter="year")
    year_value = int(year) if year else None
    # validated like every other request, so a bad value is a 400 page naming the field
    return IncidentFilter.model_validate({"org": org or None, "component": component or None, "cause": cause or None,
                                          "tag": tag or None, "year_from": year_value, "year_to": year_value,
                                          "severity": severity or None, "inferred": _checked(inferred, "inferred") or None})


def _filter_options(library: Library, lang: str) -> dict[str, list[tuple[str, str]]]:
    options: dict[str, list[tuple[str, str]]] = {}
    for kind in ("organization", "component", "cause", "tag"):
        concepts = [c for c in library.vocab if c.kind.value == kind]
        options["org" if kind == "organization" else kind] = sorted(((c.id, c.label.get(lang)) for c in concepts),
                                                                    key=lambda pair: pair[1].lower())
    years = sorted({i.date.year for i in library.incidents() if i.date is not None and hasattr(i.date, "year")}, reverse=True)
    options["year"] = [(str(y), str(y)) for y in years]
    options["severity"] = [(s, s) for s in SEVERITIES]
    return options


Text = Annotated[str, Query(max_length=MAX_QUERY_CHARS)]
Field = Annotated[str, Query(max_length=MAX_REF_CHARS)]
Lang = Annotated[str | None, Query()]
AcceptLanguage = Annotated[str | None, Header()]


def _results(library: Library, q: str, selected: dict[str, str], lang: str, page: str) -> dict[str, Any]:
    """The result list's context: the search (or the filters' listing) page and the addresses of other pages."""
    found = _search.run(library, q, _filters(**selected), lang, page_number(page[:MAX_ID_CHARS]))
    return {"q": q, "found": found, "results": found.results, **_search.marks(library, found.results, lang),
            "page_url": lambda n: _url("/", q=q, **selected, page=n if n > 1 else None, lang=lang)}


@router.get("/", response_class=HTMLResponse)
def home(request: Request, q: Text = "", org: Field = "", component: Field = "", cause: Field = "", tag: Field = "",
         year: Field = "", severity: Field = "", inferred: Field = "", page: Field = "", lang: Lang = None,
         accept_language: AcceptLanguage = None) -> Response:
    language = _lang(lang, accept_language)
    library = _library(request)
    selected = {"org": org, "component": component, "cause": cause, "tag": tag, "year": year, "severity": severity,
                "inferred": inferred}
    try:
        context = _results(library, q, selected, language, page)
    except (IncidentlibError, ValueError, ValidationError) as exc:
        return _refused(request, language, exc)
    selected["inferred"] = "1" if _checked(inferred, "inferred") else ""  # read above; the box and the page links agree
    title = f"{q} · {texts(language)['site']}" if q else texts(language)["site"]
    return _page(request, "home.html", language, title, selected=selected, options=_filter_options(library, language),
                 **context)


@router.get("/favicon.ico")
def favicon() -> RedirectResponse:
    """Browsers ask for /favicon.ico whatever the page says."""
    return RedirectResponse("/ui/static/icon.svg", status_code=308)


@router.get("/ui/results", response_class=HTMLResponse)
def results_fragment(request: Request, q: Text = "", org: Field = "", component: Field = "", cause: Field = "", tag: Field = "",
                     year: Field = "", severity: Field = "", inferred: Field = "", page: Field = "", lang: Lang = None,
                     accept_language: AcceptLanguage = None) -> Response:
    """The result list alone, swapped into the home page as the user types."""
    language = _lang(lang, accept_language)
    selected = {"org": org, "component": component, "cause": cause, "tag": tag, "year": year, "severity": severity,
                "inferred": inferred}
    try:
        context = _results(_library(request), q, selected, language, page)
    except (IncidentlibError, ValueError, ValidationError) as exc:
        lead = error_lead(language, str(exc), getattr(exc, "parameter", None))
        said = f'<p class="error-lead">{escape(lead)}</p>' if lead else ""
        return HTMLResponse(f'{said}<p class="error" role="alert">{escape(texts(language)["bad_request"])}: '
                            f'<span{" lang=en" if lead else ""}>{escape(str(exc))}</span></p>', status_code=400)
    return templates.TemplateResponse(request, "_results.html", context={"t": texts(language), "lang": language,
                                                                          "incident_href": INCIDENT_HREF, **context})


@router.get("/ui/seen", response_class=HTMLResponse)
def seen(request: Request, text: Text = "", lang: Lang = None, accept_language: AcceptLanguage = None) -> Response:
    """The page, and its answer for a text given in the link (a search query's length at most)."""
    return _seen(request, text, _lang(lang, accept_language))


@router.post("/ui/seen", response_class=HTMLResponse)
async def seen_posted(request: Request, lang: Lang = None, accept_language: AcceptLanguage = None) -> Response:
    """The page's own form: a POST, because a whole write-up (up to ``MAX_SIMILAR_TEXT_CHARS``) is too long for a
    link."""
    language = _lang(lang, accept_language)
    form = await request.form(max_files=0, max_fields=4)
    text = str(form.get("text") or "")
    if len(text) > MAX_SIMILAR_TEXT_CHARS:
        return _error(request, language, 400, f"text: {len(text):,} characters; the limit is {MAX_SIMILAR_TEXT_CHARS:,}")
    return await run_in_threadpool(_seen, request, text, language)  # CPU work off the event loop


def _seen(request: Request, text: str, language: str) -> Response:
    library = _library(request)
    similar, diagnosis = [], None
    busy: Busy | None = None
    if text.strip():
        try:
            similar = library.similar(text=text, k=SEEN_SIMILAR, lang=language).results
            diagnosis = library.diagnose(text=text, lang=language, limit=SEEN_CAUSES)
        except Busy as exc:  # the tagger is still prepared after start: the page keeps the paste to send again (503)
            busy = exc
        except (IncidentlibError, ValueError, ValidationError) as exc:
            return _refused(request, language, exc)
    # the switch is a link: it holds the text when a link may (the GET page's own limit); a longer paste is sent
    # again by app.js in the other language
    switch = {"text": text if len(text) <= MAX_QUERY_CHARS else None}
    response = _page(request, "seen.html", language, texts(language)["seen_title"], switch_path="/ui/seen",
                     switch_params=switch, text=text, similar=similar, diagnosis=diagnosis, max_chars=MAX_SIMILAR_TEXT_CHARS,
                     busy=str(busy) if busy else None, status_code=503 if busy else 200,
                     **_search.marks(library, similar, language))
    if busy is not None:
        response.headers["Retry-After"] = str(busy.retry_after)
    return response


@router.get("/ui/incidents/{incident_id}", response_class=HTMLResponse)
def incident(request: Request, incident_id: Annotated[str, Path(max_length=MAX_ID_CHARS)], lang: Lang = None,
             accept_language: AcceptLanguage = None) -> Response:
    language = _lang(lang, accept_language)
    library = _library(request)
    try:
        detail = library.detail(incident_id, lang=language)
    except NotFound as exc:
        return _error(request, language, 404, str(exc), exc.suggestions)
    if detail.id != incident_id:  # ids are matched case-insensitively: one canonical URL
        return RedirectResponse(_url(INCIDENT_HREF.format(id=detail.id), lang=lang), status_code=308)
    figure = _figures.neighbourhood(detail, INCIDENT_HREF + f"?lang={language}", TOPIC_HREF + f"?lang={language}")
    return _page(request, "incident.html", language, f"{detail.id} {detail.title}", d=detail, figure=figure,
                 **_search.marks(library, detail.related, language))


@router.get("/ui/topics", response_class=HTMLResponse)
def topics(request: Request, lang: Lang = None, accept_language: AcceptLanguage = None) -> Response:
    language = _lang(lang, accept_language)
    library = _library(request)
    counts: dict[str, int] = {}
    for item in library.incidents():
        for concept_id in {item.org, *(c for ids in item.concept_ids().values() for c in ids)}:
            counts[concept_id] = counts.get(concept_id, 0) + 1
    groups = []
    for kind in ("component", "cause", "symptom", "organization"):
        concepts = sorted((c for c in library.vocab if c.kind.value == kind and counts.get(c.id)),
                          key=lambda c: (-counts[c.id], c.label.get(language)))
        groups.append((kind, [(c.id, c.label.get(language), counts[c.id]) for c in concepts]))
    return _page(request, "topics.html", language, texts(language)["topics_title"], groups=groups)


@router.get("/ui/topics/{concept_id}", response_class=HTMLResponse)
def topic(request: Request, concept_id: Annotated[str, Path(max_length=MAX_REF_CHARS)], lang: Lang = None, accept_language: AcceptLanguage = None) -> Response:
    language = _lang(lang, accept_language)
    try:
        page = _library(request).topic(concept_id, lang=language)
    except NotFound as exc:
        return _error(request, language, 404, str(exc), exc.suggestions)
    line = _figures.timeline([(i.id, i.title, i.date) for i in page.incidents], INCIDENT_HREF + f"?lang={language}")
    # newest first; a draft may have no date yet (it was a 500 when sorted with the dated ones): last
    return _page(request, "topic.html", language, f"{page.label} · {texts(language)[page.kind if page.kind != 'organization' else 'org']}",
                 page=page, line=line, newest_first=sorted(page.incidents, key=lambda i: i.date or "", reverse=True))


@router.get("/ui/clusters", response_class=HTMLResponse)
def clusters(request: Request, lang: Lang = None, accept_language: AcceptLanguage = None) -> Response:
    language = _lang(lang, accept_language)
    library = _library(request)
    found = library.clusters("graph", language)
    points = library.map_points(language)
    order = {c.id: index for index, c in enumerate(found.clusters)}
    xs = [p.x for p in points] or [0.0]
    ys = [p.y for p in points] or [0.0]
    width, height, margin = 960, 640, 24
    span_x, span_y = (max(xs) - min(xs)) or 1.0, (max(ys) - min(ys)) or 1.0
    dots = [{"id": p.id, "title": p.title, "colour": order.get(p.cluster or "", -1),
             "x": round(margin + (p.x - min(xs)) / span_x * (width - 2 * margin), 1),
             "y": round(margin + (p.y - min(ys)) / span_y * (height - 2 * margin), 1)} for p in points]
    shown, total = library.map_coverage()
    sampled = texts(language)["map_sampled"].format(shown=f"{shown:,}", total=f"{total:,}") if shown < total else ""
    return _page(request, "clusters.html", language, texts(language)["clusters_title"], found=found, dots=dots,
                 width=width, height=height, sampled=sampled, members_shown=CLUSTER_MEMBERS_SHOWN)


@router.get("/ui/series", response_class=HTMLResponse)
def series_form(request: Request, lang: Lang = None, accept_language: AcceptLanguage = None) -> Response:
    language = _lang(lang, accept_language)
    return _page(request, "series.html", language, texts(language)["series_title"], text="", expected="", result=None,
                 plot=None)


@router.post("/ui/series", response_class=HTMLResponse)
async def series_result(request: Request, lang: Lang = None, accept_language: AcceptLanguage = None) -> Response:
    """A pasted or uploaded MFU series (CSV or JSON), classified by shape and plotted.

    A POST because a run's curve is too large for a URL; the result names the incidents by their permanent URLs.
    """
    language = _lang(lang, accept_language)
    declared = int(request.headers.get("content-length") or 0)
    if declared > MAX_SERIES_BYTES:
        return _error(request, language, 413, f"series: larger than {MAX_SERIES_BYTES:,} bytes")
    form = await request.form(max_files=1, max_fields=8, max_part_size=MAX_SERIES_BYTES)
    text = str(form.get("text") or "")
    upload = form.get("file")
    if upload is not None and not isinstance(upload, str):
        raw = await upload.read(MAX_SERIES_BYTES + 1)
        if len(raw) > MAX_SERIES_BYTES:
            return _error(request, language, 413, f"file: larger than {MAX_SERIES_BYTES:,} bytes")
        if raw.strip():
            try:
                text = raw.decode("utf-8-sig")
            except UnicodeDecodeError:
                return _error(request, language, 400, "file: not UTF-8 text (expected CSV or JSON)")
    expected_raw = str(form.get("expected") or "").strip()
    try:
        expected = float(expected_raw) if expected_raw else None
    except ValueError:
        return _error(request, language, 400, f"expected: not a number: {expected_raw[:40]!r}")
    if not text.strip():
        return _error(request, language, 400, "text: paste a series or choose a file (CSV with seconds,mfu or JSON)")
    try:  # CPU work off the event loop, which other requests share
        result = await run_in_threadpool(_library(request).diagnose_series, text=text, expected=expected, lang=language)
    except (IncidentlibError, ValueError, ValidationError) as exc:
        return _refused(request, language, exc)
    plot = _figures.series_plot([(p.t, p.v) for p in result.curve], result.dips, result.features.restarts,
                                result.features.level)
    shown = text if len(text) <= SERIES_ECHO_CHARS else ""
    return _page(request, "series.html", language, f"{result.label or texts(language)['cannot_tell']} · {texts(language)['series_title']}",
                 text=shown, expected=expected_raw, result=result, plot=plot)
