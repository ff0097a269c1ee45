"""The review queue: token sign-in, every draft with the diff of its edits, and the review actions.

Reading the queue is open; reviewing needs an editor (or admin) token, pasted once into a sign-in
form and kept in a cookie that scripts cannot read (``HttpOnly``), that the browser sends only to
``/ui`` pages of this site (``SameSite=Strict``, ``Path=/ui``) and only over https when the page was
https (``Secure``). The token is never written into a page or a log line.

Every state change is a ``POST`` form that redirects back (POST-redirect-GET). Cross-site requests
are refused three ways: the browser does not send a ``SameSite=Strict`` cookie on them, the service's
guard middleware (``api/guards.py``) refuses a foreign ``Origin`` or ``Sec-Fetch-Site: cross-site``,
and each form carries a per-session token, ``HMAC-SHA256(key=session token, "incidentlib-web-form")``,
which a page on another site cannot compute because it cannot read the cookie.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ..errors import (
    AuthError,
    Forbidden,
    IncidentlibError,
    InvalidRequest,
    NotFound,
    PreconditionFailed,
    ValidationFailed,
    WriteError,
)
from ..library import Library
from ..requests import MAX_ID_CHARS, MAX_REF_CHARS
from ._i18n import texts
from ._paging import Pager, page_number
from ._routes import AcceptLanguage, Lang, _lang, _library, _page, _url

router = APIRouter(include_in_schema=False)

#: The cookie that holds the reviewer's token; scoped to the pages, never to the JSON API.
SESSION_COOKIE = "incidentlib_review"
COOKIE_PATH = "/ui"
#: Tokens are ``il_<8 hex>_<secret>``; anything much longer is not a token and is refused unread.
MAX_TOKEN_CHARS = 200
#: The message the per-form CSRF token is an HMAC of (keyed by the session token).
CSRF_CONTEXT = b"incidentlib-web-form"
#: Confirmations shown after a redirect: the only values ``?done=`` may take.
DONE = ("signed_in", "signed_out", "published", "rejected", "accepted", "concept_rejected")
#: The role a reviewer needs: the same as the write API's.
REVIEW_ROLE = "editor"
#: Form bodies of these pages are small: a token, an ETag and a language.
MAX_FORM_FIELDS = 8
REVIEW_HREF = "/ui/review"
#: Drafts a page of the queue shows. Signed in, a draft is rendered whole (its filing, the diff of every edit, each
#: proposed concept with two forms): about 19 KB, and the history of each is read from the store. Twenty keeps a
#: page near 0.4 MB and a few hundred milliseconds even for drafts with long diffs; an import of 2,000 drafts was one
#: 40 MB page that froze the browser for a minute after every review action.
REVIEW_PAGE_SIZE = 20
#: The history actions that file a draft; any other first change is an edit of a draft filed in the YAML files.
FILING_ACTIONS = ("create", "import")

IncidentId = Annotated[str, Path(max_length=MAX_ID_CHARS)]
ConceptId = Annotated[str, Path(max_length=MAX_REF_CHARS)]


def csrf_token(session: str) -> str:
    """``hex(HMAC-SHA256(key=session token, CSRF_CONTEXT))``: tied to the session, unguessable without it."""
    return hmac.new(session.encode("utf-8"), CSRF_CONTEXT, hashlib.sha256).hexdigest()


def _show(value: Any) -> str:
    """A field value as a reviewer reads it: text as is, anything else as compact JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _flatten(doc: Any, prefix: str = "") -> dict[str, Any]:
    """Nested objects as dotted paths (``title.en``); lists stay whole (their order is part of the value)."""
    if not isinstance(doc, dict):
        return {prefix: doc}
    flat: dict[str, Any] = {}
    for key, value in doc.items():
        flat.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def field_changes(before: dict[str, Any] | None, after: dict[str, Any] | None) -> list[tuple[str, str, str]]:
    """Every field whose value differs, as ``(field, before, after)`` in field order of ``after`` then ``before``."""
    old, new = _flatten(before or {}), _flatten(after or {})
    fields = list(dict.fromkeys([*new, *old]))
    return [(name, _show(old.get(name)), _show(new.get(name))) for name in fields if old.get(name) != new.get(name)]


def _text(value: Any, lang: str) -> str:
    if isinstance(value, dict):
        return str(value.get(lang) or value.get("en") or value.get("ko") or next(iter(value.values()), ""))
    return str(value or "")


def _draft_ids(library: Library) -> list[str]:
    """Every draft's id, in the library's (id) order: counted and paged without reading a record."""
    return [incident.id for incident in library.incidents() if incident.is_draft]


def _drafts(library: Library, ids: list[str]) -> list[Any]:
    """The stored records of ``ids`` (a page of the queue); a draft gone since the ids were read is left out."""
    found = []
    for incident_id in ids:
        try:
            stored = library.record(incident_id)
        except NotFound:
            continue
        if stored.status == "draft":
            found.append(stored)
    return found


def _listed(library: Library, lang: str, ids: list[str]) -> list[dict[str, Any]]:
    """A page of drafts as the signed-out queue lists them: id, title, organization and date."""
    items = []
    for stored in _drafts(library, ids):
        org = library.vocab.get(str(stored.record.get("org")))
        items.append({"id": stored.id, "title": _text(stored.record.get("title"), lang), "date": stored.record.get("date"),
                      "org_label": org.label.get(lang) if org is not None else stored.record.get("org")})
    return items


def _queue(library: Library, lang: str, ids: list[str]) -> list[dict[str, Any]]:
    """Each draft of ``ids`` with its filing, the field-by-field changes of every later edit, and its proposed concepts."""
    queue = []
    for stored in _drafts(library, ids):
        record = stored.record
        changes = library.history(stored.id).items
        # a draft of the YAML files (a CLI import) was filed before the store saw it: its first change is an edit
        filed = changes[0] if changes and changes[0].action in FILING_ACTIONS else None
        edits = [{"action": c.action, "actor": c.actor, "at": c.at, "fields": field_changes(c.before, c.after)}
                 for c in changes[1 if filed is not None else 0:]]
        proposed = []
        for link in record.get("inferred") or []:
            if link.get("status", "proposed") != "proposed":
                continue
            concept = library.vocab.get(str(link.get("concept")))
            proposed.append({"id": link.get("concept"), "kind": link.get("kind"),
                             "label": concept.label.get(lang) if concept is not None else link.get("concept"),
                             "confidence": float(link.get("confidence") or 0.0), "evidence": link.get("evidence", ""),
                             "method": link.get("method", "")})
        org = library.vocab.get(str(record.get("org")))
        queue.append({"id": stored.id, "etag": stored.etag, "title": _text(record.get("title"), lang),
                      "summary": _text(record.get("summary"), lang),
                      "org": org.label.get(lang) if org is not None else record.get("org"), "date": record.get("date"),
                      "filed": filed, "edits": edits, "proposed": proposed})
    return queue


def _session(request: Request) -> str | None:
    value = request.cookies.get(SESSION_COOKIE)
    return value if value and len(value) <= MAX_TOKEN_CHARS else None


def _reviewer(library: Library, session: str | None) -> tuple[str | None, str | None]:
    """The signed-in reviewer's token name, or why the session no longer counts (revoked, expired, role)."""
    if session is None:
        return None, None
    try:
        return library.authorize(session, REVIEW_ROLE), None
    except AuthError as exc:
        return None, str(exc)


def _render(request: Request, library: Library, lang: str, session: str | None, *, status_code: int = 200,
            error: str | None = None, problems: list[tuple[str, str]] | None = None, failed: str | None = None,
            page: int = 1) -> Response:
    """The queue's page ``page``; a refused form renders it too, with the switch and the pager on the GET address."""
    t = texts(lang)
    reviewer, expired = _reviewer(library, session)
    done = request.query_params.get("done")
    done_id = request.query_params.get("id", "")[:MAX_ID_CHARS]
    ids = _draft_ids(library)
    pager = Pager.of(page, REVIEW_PAGE_SIZE, len(ids))
    shown = ids[pager.start : pager.end]
    context: dict[str, Any] = {"reviewer": reviewer, "error": error or (t["session_ended"] + " " + expired if expired else None),
                               "problems": problems or [], "failed": failed,
                               "done": t["done_" + done] if done in DONE else None, "done_id": done_id,
                               "pager": pager,
                               "page_url": lambda n: _url(REVIEW_HREF, page=n if n > 1 else None, lang=lang)}
    if reviewer is not None and session is not None:
        context.update(queue=_queue(library, lang, shown), csrf=csrf_token(session))
    else:
        context.update(drafts=_listed(library, lang, shown))
    # a refused POST is rendered at its POST address: the language switch points at the queue's own (GET) page
    response = _page(request, "review.html", lang, t["review_title"], status_code=status_code,
                     switch_path=REVIEW_HREF, switch_params={"page": pager.page if pager.page > 1 else None}, **context)
    response.headers["Cache-Control"] = "no-store"  # holds the per-session form token
    if expired:
        response.delete_cookie(SESSION_COOKIE, path=COOKIE_PATH)
    return response


def _back(lang: str, done: str, incident_id: str = "", page: int = 1, anchor: bool = False) -> RedirectResponse:
    """Back to the queue's page the form was on; at the draft itself when it is still in the queue (``anchor``)."""
    target = _url(REVIEW_HREF, lang=lang, done=done, id=incident_id, page=page if page > 1 else None)
    return RedirectResponse(target + (f"#draft-{incident_id}" if anchor and incident_id else ""), status_code=303)


@router.get(REVIEW_HREF, response_class=HTMLResponse)
def review(request: Request, lang: Lang = None, page: str = "", accept_language: AcceptLanguage = None) -> Response:
    """The queue: read-only with a sign-in form, or with the review actions for a signed-in editor."""
    return _render(request, _library(request), _lang(lang, accept_language), _session(request),
                   page=page_number(page[:MAX_ID_CHARS]))


async def _form(request: Request) -> dict[str, str]:
    form = await request.form(max_files=0, max_fields=MAX_FORM_FIELDS)
    return {key: value for key, value in form.items() if isinstance(value, str)}


def _form_lang(form: dict[str, str], request: Request) -> str:
    return _lang(form.get("lang"), request.headers.get("accept-language"))


def _form_page(form: dict[str, str]) -> int:
    """The queue's page the form was sent from (every form of the page carries it)."""
    return page_number(form.get("page", "")[:MAX_ID_CHARS])


@router.post(REVIEW_HREF + "/sign-in", response_class=HTMLResponse)
async def sign_in(request: Request) -> Response:
    """Check the pasted token (editor or admin) and keep it in the session cookie."""
    form = await _form(request)
    lang = _form_lang(form, request)
    library = _library(request)
    token = form.get("token", "").strip()
    t = texts(lang)
    page = _form_page(form)
    if not token or len(token) > MAX_TOKEN_CHARS:
        return _render(request, library, lang, None, status_code=401, error=t["sign_in_bad"], page=page)
    try:
        library.authorize(token, REVIEW_ROLE)
    except Forbidden:
        return _render(request, library, lang, None, status_code=403, error=t["sign_in_role"], page=page)
    except AuthError as exc:
        return _render(request, library, lang, None, status_code=401, error=f"{t['sign_in_bad']} ({exc})", page=page)
    response = _back(lang, "signed_in", page=page)
    response.set_cookie(SESSION_COOKIE, token, path=COOKIE_PATH, httponly=True, samesite="strict",
                        secure=request.url.scheme == "https")
    return response


async def _checked(request: Request) -> tuple[Library, str, str, str, dict[str, str]] | Response:
    """The library, language, session token, actor name and form of a review action, or the page that refuses it."""
    form = await _form(request)
    lang = _form_lang(form, request)
    library = _library(request)
    session = _session(request)
    t = texts(lang)
    page = _form_page(form)
    if session is None:
        return _render(request, library, lang, None, status_code=401, error=t["sign_in_first"], page=page)
    if not hmac.compare_digest(form.get("csrf", ""), csrf_token(session)):
        return _render(request, library, lang, session, status_code=403, error=t["csrf_refused"], page=page)
    try:
        actor = library.authorize(session, REVIEW_ROLE)
    except AuthError as exc:
        response = _render(request, library, lang, None, status_code=401, error=f"{t['session_ended']} {exc}", page=page)
        response.delete_cookie(SESSION_COOKIE, path=COOKIE_PATH)
        return response
    return library, lang, session, actor, form


@router.post(REVIEW_HREF + "/sign-out", response_class=HTMLResponse)
async def sign_out(request: Request) -> Response:
    """Forget the session cookie (the token itself stays valid: revoke it with ``incidentlib token revoke``)."""
    form = await _form(request)
    lang = _form_lang(form, request)
    session = _session(request)
    if session is not None and not hmac.compare_digest(form.get("csrf", ""), csrf_token(session)):
        return _render(request, _library(request), lang, session, status_code=403, error=texts(lang)["csrf_refused"],
                       page=_form_page(form))
    response = _back(lang, "signed_out", page=_form_page(form))
    response.delete_cookie(SESSION_COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict",
                           secure=request.url.scheme == "https")
    return response


def _refused(request: Request, library: Library, lang: str, session: str, incident_id: str, exc: IncidentlibError,
             page: int, stale: str = "stale") -> Response:
    """A write the library refused, shown on the queue's page the form came from with the reason (nothing was
    stored); ``stale`` is the message for a draft changed since the page was loaded."""
    t = texts(lang)
    if isinstance(exc, PreconditionFailed):
        # a draft another reviewer published or removed meanwhile is not "changed": say what happened to it
        try:
            now = library.record(incident_id).status
        except NotFound:
            now = "removed"
        message = t["reviewed_already"] if now == "published" else t["removed_already"] if now == "removed" else t[stale]
        return _render(request, library, lang, session, status_code=412, error=message, failed=incident_id, page=page)
    if isinstance(exc, ValidationFailed):
        problems = [(p.field or p.file, p.message) for p in exc.problems]
        return _render(request, library, lang, session, status_code=422, error=t["not_publishable"], problems=problems,
                       failed=incident_id, page=page)
    status = 404 if isinstance(exc, NotFound) else 422 if isinstance(exc, InvalidRequest) else 409
    return _render(request, library, lang, session, status_code=status, error=f"{t['write_refused']} {exc}",
                   failed=incident_id, page=page)


@router.post(REVIEW_HREF + "/{incident_id}/publish", response_class=HTMLResponse)
async def publish(request: Request, incident_id: IncidentId) -> Response:
    """Publish a draft as loaded: the form's ETag goes as ``if_match``, so a record changed since is refused."""
    checked = await _checked(request)
    if isinstance(checked, Response):
        return checked
    library, lang, session, actor, form = checked
    try:
        stored = library.publish(incident_id, actor=actor, if_match=form.get("etag") or None)
    except (WriteError, NotFound, InvalidRequest) as exc:
        return _refused(request, library, lang, session, incident_id, exc, _form_page(form))
    return _back(lang, "published", stored.id, _form_page(form))


@router.post(REVIEW_HREF + "/{incident_id}/reject", response_class=HTMLResponse)
async def reject(request: Request, incident_id: IncidentId) -> Response:
    """Reject a draft as loaded: the form's ETag goes as ``if_match``, so a draft someone edited since is kept; it
    leaves the library (``incidentlib restore`` brings it back)."""
    checked = await _checked(request)
    if isinstance(checked, Response):
        return checked
    library, lang, session, actor, form = checked
    try:
        stored = library.reject(incident_id, actor=actor, if_match=form.get("etag") or None)
    except (WriteError, NotFound, InvalidRequest) as exc:
        return _refused(request, library, lang, session, incident_id, exc, _form_page(form), stale="stale_reject")
    return _back(lang, "rejected", stored.id, _form_page(form))


@router.post(REVIEW_HREF + "/{incident_id}/concepts/{concept}/{decision}", response_class=HTMLResponse)
async def review_concept(request: Request, incident_id: IncidentId, concept: ConceptId, decision: str) -> Response:
    """Accept a proposed inferred concept into its curated field, or mark it rejected, on the draft as loaded (the
    form's ETag goes as ``if_match``)."""
    if decision not in ("accept", "reject"):
        return Response(status_code=404)
    checked = await _checked(request)
    if isinstance(checked, Response):
        return checked
    library, lang, session, actor, form = checked
    try:
        stored = library.review_concept(incident_id, concept, decision == "accept", actor=actor,
                                        if_match=form.get("etag") or None)
    except (WriteError, NotFound, InvalidRequest) as exc:
        return _refused(request, library, lang, session, incident_id, exc, _form_page(form), stale="stale_concept")
    return _back(lang, "accepted" if decision == "accept" else "concept_rejected", stored.id, _form_page(form),
                 anchor=True)
