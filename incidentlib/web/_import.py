"""The import page: a team's export, uploaded or pasted, previewed as a dry run and then filed as drafts.

It runs the same import as ``incidentlib import`` and ``POST /import`` (:meth:`Library.import_drafts`: formats,
``--map``, ``--set``, ``--date-format``, the duplicate checks, all or nothing) and shows its report: every record
accepted or rejected with its location in the file, its warnings and reasons.  Importing needs the reviewer's
sign-in of the review queue (an editor token in the ``/ui`` cookie) and the form's per-session token, as every
other write of these pages does (:mod:`incidentlib.web._review`).  The drafts then wait in the review queue.

The uploaded file is read once: after a preview its text is put in the paste box, so that "Import" sends what was
previewed without choosing the file again.  The form's body is received whole before the sign-in and the form token
are checked (it is one multipart body); nothing of it is decoded or imported before they are.
"""

from __future__ import annotations

import hmac
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from ..errors import AuthError, DataError, IncidentlibError, InvalidRequest, WriteError
from ..library import Library
from ..requests import IMPORT_FORMATS, MAX_IMPORT_BYTES, MAX_IMPORT_CHARS, file_suffix, format_of_name, name_options
from ._i18n import FIELD_LABELS, texts
from ._review import COOKIE_PATH, REVIEW_ROLE, SESSION_COOKIE, _reviewer, _session, csrf_token
from ._routes import AcceptLanguage, Lang, _lang, _library, _page

router = APIRouter(include_in_schema=False)

IMPORT_HREF = "/ui/import"
#: The form's fields: the file, the paste box, format, id prefix, language, date form, maps, sets, action, csrf.
MAX_IMPORT_FIELDS = 16
#: The format of a pasted text, or of a file whose suffix names none, when the form does not choose one.
FALLBACK_FORMAT = "csv"
#: What the form starts with: the importer's own defaults; the format ("") follows the file's name.
DEFAULTS = {"format": "", "id_prefix": "IL", "record_lang": "en", "date_format": "", "maps": "",
            "sets": "", "content": "", "filename": "", "keep_near_duplicates": ""}
#: The characters kept of an uploaded file's name, which the report's locations quote (``tickets.csv:12``).
_NAME_CHARS = re.compile(r"[^\w.\-]+")


def _safe_name(name: str) -> str:
    """A file name reduced to its last part and plain characters, for the report's locations (never a path)."""
    return _NAME_CHARS.sub("_", Path(name).name)[:80].strip("._")


def _options(form: dict[str, str]) -> dict[str, str]:
    return {key: form.get(key, default) for key, default in DEFAULTS.items()}


#: The form's field that sets each flag an import's message may name (:data:`~incidentlib.requests.IMPORT_FLAGS`).
FIELD_OF_FLAG = {"--map": "maps", "--set": "sets", "--date-format": "date_format",
                 "--keep-near-duplicates": "keep_near_duplicates", "--format": "format"}


def _form_names(t: Mapping[str, str]) -> dict[str, str]:
    """Each flag an import's message may name, as this form labels the field that sets it (in the page's language):
    a web user sees no command line."""
    return {flag: f"“{t[FIELD_LABELS[field]]}”" for flag, field in FIELD_OF_FLAG.items()}


def _named_for_form(t: Mapping[str, str], report: Any, error: str | None) -> tuple[Any, str | None]:
    """The report's reasons and warnings, and the error, with the import's flags named as the form's fields."""
    names = _form_names(t)
    if error is not None:
        error = name_options(error, names)
    if report is not None:
        report = report.model_copy(update={
            "accepted": [row.model_copy(update={"warnings": [name_options(w, names) for w in row.warnings]})
                         for row in report.accepted],
            "rejected": [row.model_copy(update={"reasons": [name_options(r, names) for r in row.reasons]})
                         for row in report.rejected]})
    return report, error


def _render(request: Request, library: Library, lang: str, session: str | None, *, status_code: int = 200,
            error: str | None = None, report: Any = None, values: dict[str, str] | None = None,
            read_as: str = "") -> Response:
    t = texts(lang)
    report, error = _named_for_form(t, report, error)
    reviewer, expired = _reviewer(library, session)
    context: dict[str, Any] = {
        "reviewer": reviewer, "error": error or (t["session_ended"] + " " + expired if expired else None),
        "report": report, "read_as": read_as, "values": values or dict(DEFAULTS), "formats": IMPORT_FORMATS,
        "max_chars": MAX_IMPORT_CHARS}
    if reviewer is not None and session is not None:
        context["csrf"] = csrf_token(session)
    response = _page(request, "import.html", lang, t["import_title"], status_code=status_code, **context)
    response.headers["Cache-Control"] = "no-store"  # holds the per-session form token and the team's data
    if expired:
        response.delete_cookie(SESSION_COOKIE, path=COOKIE_PATH)
    return response


@router.get(IMPORT_HREF, response_class=HTMLResponse)
def import_page(request: Request, lang: Lang = None, accept_language: AcceptLanguage = None) -> Response:
    """The form (for a signed-in editor), or where to sign in."""
    return _render(request, _library(request), _lang(lang, accept_language), _session(request))


async def _read_upload(upload: UploadFile) -> str:
    """The uploaded file as text; ``InvalidRequest`` naming the file when it is too large or not UTF-8."""
    raw = await upload.read(MAX_IMPORT_BYTES + 1)
    name = upload.filename or "the file"
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise InvalidRequest(f"{name}:{line}: not UTF-8 text ({exc.reason} at byte {exc.start}); convert the file "
                             "to UTF-8 first", parameter="file") from None
    if len(text) > MAX_IMPORT_CHARS:
        raise InvalidRequest(f"{name}: {len(text):,} characters, more than the {MAX_IMPORT_CHARS:,} one import takes "
                             "here; split the file, or use `incidentlib import`", parameter="file")
    return text


@router.post(IMPORT_HREF, response_class=HTMLResponse)
async def import_records(request: Request) -> Response:
    """Preview (a dry run) or import the export; the report either way, nothing stored unless all of it can be."""
    # the paste box may hold a whole collection: a form field's default limit (1 MiB) is lifted to the import's own
    form = await request.form(max_files=1, max_fields=MAX_IMPORT_FIELDS, max_part_size=MAX_IMPORT_BYTES)
    fields = {key: value for key, value in form.items() if isinstance(value, str)}
    upload = form.get("file")
    library = _library(request)
    lang = _lang(fields.get("lang"), request.headers.get("accept-language"))
    t = texts(lang)
    session = _session(request)
    values = _options(fields)
    if session is None:
        return _render(request, library, lang, None, status_code=401, error=t["sign_in_first"], values=values)
    if not hmac.compare_digest(fields.get("csrf", ""), csrf_token(session)):
        return _render(request, library, lang, session, status_code=403, error=t["csrf_refused"], values=values)
    try:
        actor = library.authorize(session, REVIEW_ROLE)
    except AuthError as exc:
        response = _render(request, library, lang, None, status_code=401, error=f"{t['session_ended']} {exc}",
                           values=values)
        response.delete_cookie(SESSION_COOKIE, path=COOKIE_PATH)
        return response
    dry_run = fields.get("action") != "import"
    try:
        if isinstance(upload, UploadFile) and upload.filename:
            values["content"] = await _read_upload(upload)
            values["filename"] = _safe_name(upload.filename)
        if not values["content"].strip():
            raise InvalidRequest(t["import_nothing"], parameter="content")
        if len(values["content"]) > MAX_IMPORT_CHARS:  # a paste, held to what a file may hold
            raise InvalidRequest(f"{len(values['content']):,} characters, more than the {MAX_IMPORT_CHARS:,} one import "
                                 "takes here; split the collection, or use `incidentlib import`", parameter="content")
        # the import reads, checks and writes for seconds at this size: in a worker thread, so the server goes on
        report = await run_in_threadpool(_run, library, values, dry_run, actor)
    except (InvalidRequest, DataError, WriteError) as exc:
        status = 409 if isinstance(exc, WriteError) else 422
        # what the records could not be read or mapped from depends on the format they were read as: named too
        return _render(request, library, lang, session, status_code=status, error=f"{t['write_refused']} {exc}",
                       values=values, read_as=_read_as(t, values) if isinstance(exc, DataError) else "")
    except IncidentlibError as exc:  # an embedder or a store that cannot be reached: said, not a bare 500
        return _render(request, library, lang, session, status_code=503, error=f"{t['write_refused']} {exc}",
                       values=values)
    if report.written:
        values["content"] = ""  # imported: a second click must not file the same records again
    return _render(request, library, lang, session, report=report, values=values, read_as=_read_as(t, values))


def _read_as(t: Mapping[str, str], values: dict[str, str]) -> str:
    """The sentence naming the format the records were read as, and the file name it came from when it did."""
    fmt, by_name = chosen_format(values)
    return t["import_read_as_named" if by_name else "import_read_as"].format(format=fmt, name=values["filename"])


def chosen_format(values: dict[str, str]) -> tuple[str, bool]:
    """The format to read with, and whether it came from the file's name rather than the form."""
    if values["format"]:
        return values["format"], False
    by_name = format_of_name(values["filename"])
    return (by_name, True) if by_name else (FALLBACK_FORMAT, False)


def _run(library: Library, values: dict[str, str], dry_run: bool, actor: str) -> Any:
    """The import's report (``incidentlib.importing.ImportReport``)."""
    fmt, _ = chosen_format(values)
    if fmt not in IMPORT_FORMATS:
        raise InvalidRequest(f"format: {fmt!r} is not one of {', '.join(IMPORT_FORMATS)}", parameter="format")
    lines = {key: [line.strip() for line in values[key].splitlines() if line.strip()] for key in ("maps", "sets")}
    with tempfile.TemporaryDirectory(prefix="incidentlib-web-import-") as folder:
        name = _safe_name(values["filename"]) or f"pasted{file_suffix(fmt)}"  # the hidden field comes back from the browser
        source = Path(folder) / name
        source.write_text(values["content"], encoding="utf-8")
        return library.import_drafts(source, fmt, lines["maps"], id_prefix=values["id_prefix"].strip() or "IL",
                                     lang=values["record_lang"], dry_run=dry_run, actor=actor,
                                     keep_near_duplicates=bool(values["keep_near_duplicates"]),
                                     date_format=values["date_format"].strip() or None, sets=lines["sets"])
