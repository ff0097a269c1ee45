"""Write commands of the CLI: add, edit, publish, reject, history, token, export-yaml.

Each works on a local library directory (``--data``) or, with ``--server URL --token T``, on a
running service through the HTTP write API. Registered on the main app by :func:`register`,
so the package's errors map to messages and exit codes in one place (cli._Commands).
"""

from __future__ import annotations

import getpass
import json
import os
import shlex
import subprocess
import sys
import tempfile
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
import yaml
from rich.console import Console
from rich.markup import escape

from .errors import InputError, InvalidRequest, ValidationFailed
from .library import Library
from .requests import MAX_RECORD_BYTES
from .views import HistoryPage, StoredRecord

out = Console(soft_wrap=True, highlight=False)
err = Console(stderr=True, soft_wrap=True, highlight=False)

SERVER_ENV = "INCIDENTLIB_SERVER"
TOKEN_ENV = "INCIDENTLIB_TOKEN"
#: Seconds a remote call may take: a write commits in milliseconds, an import may embed nothing but reads files.
REMOTE_TIMEOUT_S = 60.0

DataOpt = Annotated[Optional[Path], typer.Option("--data", envvar="INCIDENTLIB_DATA", help="Library directory (default: the bundled library).")]
ServerOpt = Annotated[Optional[str], typer.Option("--server", envvar=SERVER_ENV, help="Base URL of a running `incidentlib serve`.")]
TokenOpt = Annotated[Optional[str], typer.Option("--token", envvar=TOKEN_ENV, help="API token for --server (editor for writes).")]
ActorOpt = Annotated[Optional[str], typer.Option("--as", help="Name recorded in the history for local writes (default: local:$USER).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON.")]


def _fail(text: str, code: int) -> typer.Exit:
    err.print(f"[red]error:[/red] {escape(text)}")
    return typer.Exit(code)


class Remote:
    """The HTTP write API of a running service; error responses become the CLI's exit codes."""

    def __init__(self, server: str, token: str | None) -> None:
        import httpx

        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = httpx.Client(base_url=server.rstrip("/"), headers=headers, timeout=REMOTE_TIMEOUT_S)

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        import httpx

        try:
            response = self.client.request(method, path, **kwargs)
        except httpx.UnsupportedProtocol as exc:
            raise _fail(f"--server {self.client.base_url}: not an http:// or https:// address ({exc})", 2) from None
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise _fail(f"the server at {self.client.base_url} did not answer ({type(exc).__name__}: {exc}); "
                        "is `incidentlib serve` running there?", 1) from None
        except httpx.TransportError as exc:  # sent, but the answer was lost: the write may or may not have happened
            raise _fail(f"the server at {self.client.base_url} took the request but no answer came back "
                        f"({type(exc).__name__}: {exc}); look with `incidentlib history` before trying again", 1) from None
        if response.status_code >= 400:
            try:
                body = response.json()
            except ValueError:
                body = {"detail": response.text}
            detail = body.get("detail")
            if isinstance(detail, list):  # FastAPI request validation
                detail = "; ".join(f"{'.'.join(str(p) for p in d.get('loc', []))}: {d.get('msg')}" for d in detail)
            raise _fail(f"{response.status_code}: {detail}", 2 if response.status_code in (400, 412, 422, 428) else 1)
        if "json" in response.headers.get("content-type", ""):
            return response.json()
        return response.text


def _actor(name: str | None) -> str:
    return name or f"local:{getpass.getuser()}"


def _read_doc(path: str) -> dict[str, Any]:
    """The mapping of incident fields in the YAML or JSON file ``path`` (``-``: standard input), at most
    :data:`MAX_RECORD_BYTES`; :class:`InputError` or :class:`InvalidRequest` naming the file and the reason."""
    try:
        with (nullcontext(sys.stdin.buffer) if path == "-" else Path(path).open("rb")) as source:
            raw = source.read(MAX_RECORD_BYTES + 1)  # no more: a wrong file may be gigabytes
        if len(raw) > MAX_RECORD_BYTES:
            raise InputError(path, f"more than the {MAX_RECORD_BYTES:,} bytes one record may have; is it the right "
                                   "file? (a collection goes through `incidentlib import`)")
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, f"not UTF-8 text (byte {exc.start} is {exc.object[exc.start]:#04x}); save it as UTF-8") from None
    except IsADirectoryError:
        raise InputError(path, "a directory, not a file of incident fields") from None
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except OSError as exc:
        raise InputError(path, f"cannot be read ({exc.strerror or exc})") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidRequest(f"{path}: not valid YAML or JSON: {exc}") from None
    except ValueError as exc:  # YAML reads an unquoted 2026-02-30 as a date, and that day does not exist
        if any(word in str(exc) for word in ("day", "month", "year", "hour", "minute", "second")):
            raise InvalidRequest(f"{path}: a value written as a date or time is not one ({exc}); "
                                 f"dates are YYYY-MM-DD, YYYY-MM or YYYY") from None
        raise InvalidRequest(f"{path}: a value YAML cannot read ({exc})") from None
    if not isinstance(doc, dict):
        raise InvalidRequest(f"{path}: expected a mapping of incident fields")
    return doc


def _run_editor(editor: str, path: Path) -> None:
    """``$VISUAL``/``$EDITOR`` read as a shell would (quotes, escaped spaces), then the file to edit."""
    try:
        command = shlex.split(editor)
    except ValueError as exc:
        raise InputError("$EDITOR", f"{editor!r} cannot be read as a command ({exc})") from None
    if not command:
        raise InputError("$EDITOR", "empty: set it to the command that edits a file, e.g. EDITOR='nano'")
    try:
        finished = subprocess.run([*command, str(path)], check=False)
    except OSError as exc:
        raise InputError("$EDITOR", f"{command[0]!r} could not be started ({exc.strerror or exc}); set $EDITOR or $VISUAL") from None
    if finished.returncode != 0:
        raise InputError("$EDITOR", f"{command[0]!r} exited with status {finished.returncode}; nothing was saved")


def _print_record(record: StoredRecord, verb: str, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(record.model_dump_json(indent=2) + "\n")
    else:
        out.print(f"{verb} {record.id} ({record.status}) etag {record.etag}")


#: Fields an edit cannot change, and what changes them instead.
_FIXED_FIELDS = {"id": "an incident keeps its id", "status": "`incidentlib publish` makes a draft published"}


def _keeps_fixed_fields(before: dict[str, Any], after: dict[str, Any], path: str) -> None:
    """Refuse an edit of ``id`` or ``status`` by name (they would otherwise be dropped from the patch unsaid)."""
    for field, how in _FIXED_FIELDS.items():
        if field in after and after[field] != before.get(field):
            raise InputError(f"{path}: {field}", f"cannot be changed by an edit ({how}); set it back to {before.get(field)!r}")


def _edit_patch(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """A merge patch turning ``before`` into ``after`` (top-level fields; removed fields become null)."""
    patch: dict[str, Any] = {k: v for k, v in after.items() if before.get(k) != v and k not in ("id", "status")}
    patch.update({k: None for k in before if k not in after and k not in ("id", "status")})
    return patch


#: Each change of a record's state: the HTTP request that makes it, and the word the CLI says when it is done.
_STATE_CHANGES: dict[str, tuple[str, str, str]] = {
    "publish": ("POST", "/incidents/{id}/publish", "published"),
    "reject": ("POST", "/incidents/{id}/reject", "rejected"),
    "delete": ("DELETE", "/incidents/{id}", "deleted"),
    "restore": ("POST", "/incidents/{id}/restore", "restored"),
}


def _change_state(incident_id: str, change: str, data: Path | None, server: str | None, token: str | None,
                  actor: str | None, as_json: bool) -> None:
    """``change`` (publish, reject, delete, restore) through a running service or on the library directly."""
    method, path, done = _STATE_CHANGES[change]
    if server:
        record = StoredRecord.model_validate(Remote(server, token).call(method, path.format(id=incident_id)))
    else:
        record = getattr(Library.open(data), change)(incident_id, actor=_actor(actor))
    _print_record(record, done, as_json)


def register(app: typer.Typer) -> None:
    """Add the write commands to ``app``."""
    token_app = typer.Typer(help="Create, list and revoke API tokens (stored as salted hashes).", no_args_is_help=True)
    app.add_typer(token_app, name="token")

    @app.command()
    def add(path: Annotated[str, typer.Argument(help="YAML or JSON file of incident fields, or - for stdin.")],
            data: DataOpt = None, server: ServerOpt = None, token: TokenOpt = None, actor: ActorOpt = None,
            as_json: JsonOpt = False) -> None:
        """File a new draft (validated like `incidentlib validate`; the id is assigned unless given)."""
        doc = _read_doc(path)
        if server:
            record = StoredRecord.model_validate(Remote(server, token).call("POST", "/incidents", json=doc))
        else:
            record = Library.open(data).create_draft(doc, actor=_actor(actor))
        _print_record(record, "added", as_json)

    @app.command()
    def edit(incident_id: Annotated[str, typer.Argument(help="The incident to edit.")],
             data: DataOpt = None, server: ServerOpt = None, token: TokenOpt = None, actor: ActorOpt = None,
             as_json: JsonOpt = False) -> None:
        """Open the record's YAML in $EDITOR; the result is validated before it is saved (with If-Match)."""
        remote = Remote(server, token) if server else None
        library = None if remote else Library.open(data)
        current = (StoredRecord.model_validate(remote.call("GET", f"/incidents/{incident_id}/record")) if remote
                   else library.record(incident_id))  # type: ignore[union-attr]  # one of the two is set
        # laid out as the record's file when it has one (the same keys in the same order), else in field order
        text = Library.record_yaml(current.record) if remote else library.editable_yaml(current)  # type: ignore[union-attr]
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
        with tempfile.NamedTemporaryFile("w", suffix=f"-{current.id}.yaml", delete=False, encoding="utf-8") as handle:
            handle.write(text)
        path = Path(handle.name)
        done = False  # saved, or nothing to save: the edited file can go
        try:
            while True:
                _run_editor(editor, path)
                try:
                    after = _read_doc(str(path))
                    _keeps_fixed_fields(current.record, Library.as_stored(after), str(path))
                except InvalidRequest as exc:
                    err.print(f"[red]{escape(str(exc))}[/red]")
                    if sys.stdin.isatty() and typer.confirm("edit again?", default=True):
                        continue
                    raise
                patch = _edit_patch(current.record, Library.as_stored(after))  # an unquoted date is read as a date
                if not patch:
                    done = True
                    out.print(f"no changes to {current.id}")
                    return
                if remote:
                    record = StoredRecord.model_validate(remote.call(
                        "PATCH", f"/incidents/{current.id}", json=patch, headers={"If-Match": current.etag}))
                    done = True
                    break
                try:
                    record = library.update_incident(current.id, patch, current.etag, actor=_actor(actor))  # type: ignore[union-attr]
                    done = True
                    break
                except ValidationFailed as exc:
                    for problem in exc.problems:
                        err.print(f"[red]✗[/red] {escape(str(problem))}")
                    if sys.stdin.isatty() and typer.confirm("edit again?", default=True):
                        continue
                    raise
        finally:
            if done:
                path.unlink(missing_ok=True)
            elif path.exists():  # refused (stale, invalid) or stopped: the edit is the user's work, kept
                err.print(f"[yellow]your edit is kept in {path}[/yellow]; nothing was saved. Run `incidentlib edit "
                          f"{current.id}` again to edit the current version, and copy your changes from that file")
        _print_record(record, "saved", as_json)

    @app.command()
    def publish(incident_id: Annotated[str, typer.Argument(help="The draft to publish.")],
                data: DataOpt = None, server: ServerOpt = None, token: TokenOpt = None, actor: ActorOpt = None,
                as_json: JsonOpt = False) -> None:
        """Publish a draft; every field the published rules still miss is named."""
        _change_state(incident_id, "publish", data, server, token, actor, as_json)

    @app.command()
    def reject(incident_id: Annotated[str, typer.Argument(help="The draft to reject.")],
               data: DataOpt = None, server: ServerOpt = None, token: TokenOpt = None, actor: ActorOpt = None,
               as_json: JsonOpt = False) -> None:
        """Reject a draft (it leaves the library; `incidentlib restore` brings it back)."""
        _change_state(incident_id, "reject", data, server, token, actor, as_json)

    @app.command()
    def delete(incident_id: Annotated[str, typer.Argument(help="The incident to delete.")],
               data: DataOpt = None, server: ServerOpt = None, token: TokenOpt = None, actor: ActorOpt = None,
               as_json: JsonOpt = False) -> None:
        """Delete an incident (soft: it leaves every view; `incidentlib restore` brings it back). Refused while
        other incidents link to it."""
        _change_state(incident_id, "delete", data, server, token, actor, as_json)

    @app.command()
    def restore(incident_id: Annotated[str, typer.Argument(help="The deleted or rejected incident.")],
                data: DataOpt = None, server: ServerOpt = None, token: TokenOpt = None, actor: ActorOpt = None,
                as_json: JsonOpt = False) -> None:
        """Bring back a deleted incident or a rejected draft (until `incidentlib export-yaml` has written it away)."""
        _change_state(incident_id, "restore", data, server, token, actor, as_json)

    @app.command()
    def history(incident_id: Annotated[Optional[str], typer.Argument(help="One incident (all changes with --prov).")] = None,
                prov: Annotated[bool, typer.Option("--prov", help="Print the history as PROV-O Turtle.")] = False,
                data: DataOpt = None, server: ServerOpt = None, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
        """Who changed an incident, when, and what (a JSON Patch per change)."""
        remote = Remote(server, token) if server else None
        if prov:
            params = {"incident": incident_id} if incident_id else {}
            sys.stdout.write(remote.call("GET", "/history", params=params) if remote
                             else Library.open(data).history_rdf("ttl", incident_id))
            return
        if incident_id is None:
            raise _fail("give an incident id (or --prov for the whole log)", 2)
        page = (HistoryPage.model_validate(remote.call("GET", f"/incidents/{incident_id}/history")) if remote
                else Library.open(data).history(incident_id))
        if as_json:
            sys.stdout.write(page.model_dump_json(indent=2) + "\n")
            return
        if not page.items:
            out.print(f"{page.id}: no changes recorded (as in the YAML library)")
        for entry in page.items:
            fields = ", ".join(op["path"].lstrip("/") for op in entry.patch) or "—"
            out.print(f"#{entry.seq} {entry.at} {escape(entry.actor)} {entry.action}: {escape(fields)}")

    @app.command("export-yaml")
    def export_yaml(data: DataOpt = None, actor: ActorOpt = None, as_json: JsonOpt = False) -> None:
        """Write every stored change back into incidents/*.yaml (atomic renames) and empty the write store."""
        report = Library.open(data).export_yaml(actor=_actor(actor))
        if as_json:
            sys.stdout.write(report.model_dump_json(indent=2) + "\n")
            return
        out.print(f"wrote {len(report.written)} file(s), removed {len(report.removed)}: "
                  f"{', '.join([*report.written, *report.removed]) or 'nothing to export'}")

    @token_app.command("create")
    def token_create(name: Annotated[str, typer.Option("--name", help="Who or what uses it, e.g. ci-bot.")],
                     role: Annotated[str, typer.Option("--role", help="reader, editor or admin.")],
                     expires: Annotated[Optional[int], typer.Option("--expires", min=1, help="Days until it expires.")] = None,
                     data: DataOpt = None, server: ServerOpt = None, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
        """Create a token; it is printed this once (only a salted hash is stored)."""
        if server:
            created = Remote(server, token).call("POST", "/tokens", json={"name": name, "role": role, "expires_days": expires})
        else:
            created = Library.open(data).create_token(name, role, expires).model_dump()
        if as_json:
            sys.stdout.write(json.dumps(created, indent=2) + "\n")
            return
        err.print(f"token {created['id']} ({created['role']}, {created['name']}"
                  f"{', expires ' + created['expires'] if created['expires'] else ''}); it is shown only now:")
        out.print(created["token"])

    @token_app.command("list")
    def token_list(data: DataOpt = None, server: ServerOpt = None, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
        """Every token: id, name, role, created, expiry and whether it is active."""
        rows = (Remote(server, token).call("GET", "/tokens") if server
                else [t.model_dump() for t in Library.open(data).tokens()])
        if as_json:
            sys.stdout.write(json.dumps(rows, indent=2) + "\n")
            return
        for row in rows:
            state = "active" if row["active"] else ("revoked" if row["revoked"] else "expired")
            out.print(f"{row['id']} {row['role']:<6} {escape(row['name'])} created {row['created']} "
                      f"expires {row['expires'] or 'never'} {state}")

    @token_app.command("revoke")
    def token_revoke(token_id: Annotated[str, typer.Argument(help="The token id (8 hex digits after il_).")],
                     data: DataOpt = None, server: ServerOpt = None, token: TokenOpt = None) -> None:
        """Revoke a token at once (every process checks the store on each request)."""
        if server:
            Remote(server, token).call("DELETE", f"/tokens/{token_id}")
        else:
            Library.open(data).revoke_token(token_id)
        out.print(f"revoked {token_id}")
