"""`crow sessions list | show ID | export ID --format md|json|jsonl | fork ID | undo ID | delete ID`.

Starts fast: only the stdlib session store is imported (no openai, no rich). Reading never waits
for, nor disturbs, a crow writing the session. Stored text is untrusted (model output, tool output):
on a terminal its control characters are removed (`text.strip_controls`), and JSON there has them
`\\u` escaped, so it cannot retitle, clear or write the clipboard; pipes and files get it exact.
"""

from __future__ import annotations

import re
import sys
import time
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import ConfigError, CrowError
from ..text import strip_controls, visible
from .options import examples, fail

if TYPE_CHECKING:
    from ..sessions import SessionStore

__all__ = ["sessions_app"]

sessions_app = typer.Typer(name="sessions", help="List, show, export, fork and delete stored sessions.",
                           no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                           rich_markup_mode=None)

IdArg = Annotated[str, typer.Argument(help="A session id (a unique prefix is enough).", show_default=False)]


_JSON_CONTROLS = re.compile("[\x7f-\x9f]")  # json.dumps escapes C0 controls itself, never DEL or C1


def _for_terminal(text: str, fmt: str = "md") -> str:
    """`text` as standard output may show it: without control characters on a terminal (JSON with
    them escaped, so it parses to the same data), exact elsewhere."""
    if not sys.stdout.isatty():
        return text
    if fmt in ("json", "jsonl"):  # they only occur inside JSON strings
        return _JSON_CONTROLS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return strip_controls(text)


def _one_line(text: str) -> str:
    """`text` on one row of a table on a terminal: `text.visible`, a newline or tab as `\\n`, `\\t`."""
    return visible(text).replace("\n", "\\n").replace("\t", "\\t")


def _store() -> SessionStore:
    from ..sessions import SessionStore

    return SessionStore()


@sessions_app.command("list", epilog=examples("crow sessions list", "crow sessions list --here",
                                              "crow sessions list -n 0"),
                      short_help="Stored sessions, most recent first.")
def list_sessions(
    limit: Annotated[int, typer.Option("--limit", "-n", metavar="N", help="Show at most this many (0: all).")] = 20,
    here: Annotated[bool, typer.Option("--here", help="Only the sessions started in this folder (crow run -c "
                                       "continues the latest; crow chat --resume lists them first).")] = False,
) -> None:
    """Stored sessions, most recent first, under a header row: id, last update, messages, model, the folder each
    was started in (`~` for the home folder) and title."""
    import os

    from ..sessions import short_folder

    try:
        if limit < 0:
            raise ConfigError(f"--limit must be 0 (all) or more (got {limit})")
        with _store() as store:  # one more than asked: to tell that there are more
            found = store.recent(limit + 1 if limit else None, cwd=os.getcwd() if here else None)
    except CrowError as exc:
        raise fail(exc) from None
    if not found:
        print("no sessions in this folder (crow sessions list shows every session)" if here else
              "no sessions yet (crow chat or crow run start one)", file=sys.stderr)
        return
    more = bool(limit) and len(found) > limit
    shown = found[:limit] if limit else found
    tty = sys.stdout.isatty()
    rows = [(s.id, time.strftime("%Y-%m-%d %H:%M", time.localtime(s.updated_at)),
             f"{s.messages} message" + ("" if s.messages == 1 else "s"), _one_line(s.model) if tty else s.model,
             _one_line(short_folder(s.cwd)) if tty else short_folder(s.cwd),  # U+202E reorders a line
             (_one_line(s.title) if tty else s.title) or "(untitled)")
            for s in shown]
    header = ("ID", "UPDATED", "MESSAGES", "MODEL", "FOLDER", "TITLE")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(5)]
    for row in [header, *rows]:
        cells = [row[0].ljust(widths[0]), row[1].ljust(widths[1]), row[2].rjust(widths[2]) if row is not header
                 else row[2].ljust(widths[2]), row[3].ljust(widths[3]), row[4].ljust(widths[4]), row[5]]
        print(_for_terminal("  ".join(cells)))
    if more:
        print(f"(the {limit} most recent; older ones with --limit 0)", file=sys.stderr)


@sessions_app.command("show", epilog=examples("crow sessions show k3fq7x", "crow sessions show k3fq7x | less"))
def show(session_id: IdArg) -> None:
    """Print a session as a readable transcript (Markdown)."""
    _export(session_id, "md", None)


@sessions_app.command("export", epilog=examples("crow sessions export k3fq7x --format md",
                                                "crow sessions export k3fq7x --format jsonl -o s.jsonl"),
                      short_help="Export a session as Markdown, JSON or JSONL.")
def export(
    session_id: IdArg,
    fmt: Annotated[str, typer.Option("--format", "-f", metavar="FMT", help="md, json or jsonl.")] = "md",
    output: Annotated[str | None, typer.Option("--output", "-o", metavar="FILE", help="Write to this file instead "
                                               "of standard output (never over an existing one, unless --force).")
                      ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace the --output file if it exists.")] = False,
) -> None:
    """Export a session: a Markdown transcript, one JSON object, or one JSON message per line."""
    _export(session_id, fmt, output, force)


def _export(session_id: str, fmt: str, output: str | None, force: bool = False) -> None:
    from pathlib import Path

    from ..export import EXPORT_FORMATS, ExportExists, export_session, write_export

    try:
        if fmt not in EXPORT_FORMATS:
            raise ConfigError(f"unknown format {fmt!r} (use one of: {', '.join(EXPORT_FORMATS)})")
        with _store() as store:
            info = store.get(session_id)
            text = export_session(info, store.messages(info.id), fmt, store.checkpoints(info.id),
                                  store.subagent_runs(info.id))
        if output:
            try:
                write_export(Path(output), text.encode("utf-8"), replace=force)
            except ExportExists:
                raise ConfigError(f"{output!r} exists; crow does not overwrite it (--force replaces it)") from None
            except OSError as exc:
                raise ConfigError(f"cannot write {output!r}: {exc.strerror}") from exc
            print(f"wrote {output}", file=sys.stderr)
        else:
            sys.stdout.write(_for_terminal(text, fmt))
    except CrowError as exc:
        raise fail(exc) from None


@sessions_app.command("fork", epilog=examples("crow sessions fork k3fq7x",
                                               'crow run --session "$(crow sessions fork k3)" "try it another way"'),
                      short_help="Copy a session into a new one, to try another direction.")
def fork(session_id: IdArg) -> None:
    """Copy a session into a new one (its messages, system prompt, compaction checkpoints and undo records),
    to try another direction without losing the first; prints the new id (crow run --session ID or crow
    chat --resume ID continues it)."""
    try:
        with _store() as store:
            source = store.get(session_id)
            info = store.fork(source.id)
    except CrowError as exc:
        raise fail(exc) from None
    print(info.id)
    count = f"{source.messages} message" + ("" if source.messages == 1 else "s")
    print(f"forked {source.id} ({visible(strip_controls(source.title)) or 'untitled'}, {count}) into {info.id}",
          file=sys.stderr)


@sessions_app.command("undo", epilog=examples("crow sessions undo k3fq7x --dry-run", "crow sessions undo k3fq7x"),
                      short_help="Undo a session's last exchange and the files it changed.")
def undo(
    session_id: IdArg,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only show what would be undone.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Restore files changed since crow's turn too "
                                                         "(their changes are lost).")] = False,
) -> None:
    """Remove a session's last exchange and put back the files it changed: with chat's snapshots of the
    workspace, every file its tool calls changed (run_shell's too); without (crow run), the files crow's file
    tools changed."""
    from ..undo import apply_undo, plan_undo, scan_workspace, snapshot_workspace

    try:
        with _store() as store:
            info = store.get(session_id)
            store.lock(info.id)  # not while a crow is running in it
            workspace = snapshot_workspace(store, info.id)
            now = scan_workspace(workspace, store) if workspace is not None else None
            plan = plan_undo(store, info.id, force=force, workspace=workspace, now=now)
            print(_for_terminal("\n".join(plan.describe())))
            if dry_run:
                return
            for problem in apply_undo(store, info.id, plan):
                shown = strip_controls(problem) if sys.stderr.isatty() else problem
                print(f"crow: warning: {shown}", file=sys.stderr)
    except CrowError as exc:
        raise fail(exc) from None
    print(f"undone: session {info.id} now has {plan.keep} messages", file=sys.stderr)


@sessions_app.command("delete", epilog=examples("crow sessions list", "crow sessions delete k3fq7x",
                                                 "crow sessions delete k3 --yes"),
                      short_help="Delete a session and the images only it holds.")
def delete(
    session_id: IdArg,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Delete what a prefix of an id names without asking.")
                   ] = False,
) -> None:
    """Delete a session, its messages and the image files no other session holds.

    A prefix of its id asks first on a terminal; elsewhere it needs the whole id or --yes.
    """
    try:
        with _store() as store:
            info = store.get(session_id)
            if len(session_id.strip()) < len(info.id) and not yes:  # a slip of two characters must not delete one
                if not sys.stdin.isatty():
                    raise ConfigError(f"{session_id!r} is a prefix of session {info.id}: give the whole id, or "
                                      "--yes to delete it")
                answer = input(f"delete session {info.id} “{visible(strip_controls(info.title)) or 'untitled'}”? "
                               "[y/N] ")
                if answer.strip().lower() not in ("y", "yes"):
                    print("not deleted", file=sys.stderr)
                    raise typer.Exit(1)
            info = store.delete(info.id)
    except CrowError as exc:
        raise fail(exc) from None
    print(f"deleted {info.id} ({visible(strip_controls(info.title)) or 'untitled'})", file=sys.stderr)
