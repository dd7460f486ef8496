"""Undo the last exchange of a session: its messages, and the files it changed; a rewind of that exchange.

An exchange is the last user message and everything after it. When the exchange has snapshots of the workspace
(chat takes them around each tool call that may write: `rewind`), undo is the rewind of its code and
conversation: every file its tool calls changed in the workspace, `run_shell`'s too (`sed -i`, a formatter), is
put back as the first snapshot found it (`rewind.plan_rewind`); a file changed outside crow since is marked, and
restored only when forced (the chat asks). Without snapshots (`crow run`, a session of an older crow), undo
restores the files crow's file tools wrote: before `write_file` / `edit_file` write, the file's content is kept
(`tools.backup`, stored in the session's `file_backups`), and undo puts back, for each file written in the
exchange, its content from before the exchange's first write (a file the exchange created is deleted);
`run_shell` commands cannot be undone then: they are listed. A file the snapshots never saw (outside the
workspace, git-ignored) is restored from its backup in both cases. The plan is made first (`plan_undo`), so a
surface shows what will be restored before doing it.

Undo never destroys work done after crow's turn: the hash of what crow last wrote to each file is
kept too, and a file that no longer holds it (the user edited or deleted it since) is listed as
"changed since, not restored" unless the user forces it. A path that now leads elsewhere (a folder
on the way became a symlink) or to something other than a regular file is never restored, forced or
not. Restores are atomic.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from .atomic import write_atomic
from .errors import SessionError
from .history import Message, content_text, is_prompt, tool_calls_of
from .paths import resolve_path
from .rewind import FileChange, RewindPlan, Scan, Scanner, apply_rewind, plan_rewind
from .sessions import SessionStore

__all__ = ["FileRestore", "UndoPlan", "apply_undo", "plan_undo", "scan_workspace", "snapshot_workspace"]


@dataclass(frozen=True)
class FileRestore:
    """One file the exchange wrote, and what undoing it would do."""

    path: str
    """The resolved path crow wrote."""
    content: bytes | None
    """Its content before the exchange (None: the exchange created it, so undo deletes it)."""
    written: str | None
    """SHA-256 (hex) of what crow last wrote to it (None: not known, a session of an older crow)."""
    problem: str = ""
    """Why it is not restored unless forced ("changed since", …); "" when it still holds what crow wrote."""
    forceable: bool = True
    """Whether `--force` restores it all the same (never for a path that now leads elsewhere or to
    something that is not a regular file)."""


@dataclass(frozen=True)
class UndoPlan:
    """What undoing the last exchange does."""

    keep: int
    """Messages kept (the exchange starts at this position)."""
    removed: int
    """Messages removed."""
    prompt: str
    """The exchange's user message (its text)."""
    files: list[FileRestore] = field(default_factory=list)
    """Each file the exchange wrote, with its content before the exchange and whether it changed since."""
    not_undoable: list[str] = field(default_factory=list)
    """Commands the exchange ran with `run_shell` (their effects stay)."""
    force: bool = False
    """Restore files that changed since crow wrote them too (`--force`)."""
    rewind: RewindPlan | None = None
    """The workspace's files put back as the exchange's first snapshot found them (what its tool calls changed,
    `run_shell`'s too); None: the exchange has no snapshot, so `files` (the backups) is all that is restored."""

    def restored(self, item: FileRestore) -> bool:
        """Whether applying the plan puts `item` back."""
        return not item.problem or (self.force and item.forceable)

    def held(self) -> list[str]:
        """The files applying the plan would restore only when forced: changed since crow wrote them (or outside
        crow since the snapshot), each its path."""
        rewound = [str(self.rewind.root / c.path) for c in self.rewind.outside()] \
            if self.rewind is not None and not self.force else []
        return rewound + [item.path for item in self.files if not self.restored(item) and item.forceable]

    def describe(self, *, asks: bool = False) -> list[str]:
        """Lines saying what the undo does, for a surface to show before doing it; `asks`: the surface asks
        whether to restore the files changed since (`held`), so the lines do not point to `--force`."""
        count = "1 message" if self.removed == 1 else f"{self.removed} messages"
        lines = [f"undo: removes the last exchange ({count}), starting with “{self.prompt[:60]}”"]
        held = False
        if self.rewind is not None:
            for change in self.rewind.changes:
                lines.append(self._line(self.rewind.root, change, asks))
                held = held or (change.outside and not self.force)
            lines += [f"  {note}" for note in self.rewind.notes]
        for item in self.files:
            if not self.restored(item):
                why = "" if item.problem == "changed since" else f" ({item.problem})"
                said = "changed since" if asks and item.forceable else "changed since, not restored"
                lines.append(f"  {said}: {item.path}{why}")
                held = held or item.forceable
            elif item.content is None:
                done = "gone already:" if not os.path.lexists(item.path) else "deletes"
                lines.append(f"  {done} {item.path} (it created it)")
            else:
                lines.append(f"  restores {item.path}")
        if held and not asks:
            lines.append("  (--force restores files that changed since all the same; their changes are lost)")
        if self.rewind is not None and not self.rewind.changes and not self.files:
            lines.append("  no file to restore: the workspace is as it was before it")
        elif self.rewind is None and not self.files:
            lines.append("  no file to restore (crow's file tools changed none)")
        for command in self.not_undoable:
            lines.append(f"  not undoable: run_shell {command}")
        return lines

    def _line(self, root: Path, change: FileChange, asks: bool) -> str:
        path = root / change.path
        if change.outside and not self.force:
            return f"  changed outside crow since{'' if asks else ', not restored'}: {path}"
        return {"restore": f"  restores {path}", "create": f"  restores {path} (deleted since)",
                "remove": f"  deletes {path} (made in it)", "link": f"  restores the link {path}"}[change.action]


def _check(path: str, content: bytes | None, written: str | None) -> FileRestore:
    """`path` as undo finds it now: unchanged since crow wrote it, or why not. Reads only a regular file."""
    file = Path(path)
    try:
        if resolve_path(file) != file:  # a folder on the way became a symlink: it leads elsewhere now
            return FileRestore(path, content, written, f"now leads to {resolve_path(file)}", forceable=False)
        info = os.lstat(file)
    except FileNotFoundError:
        if content is None:
            return FileRestore(path, content, written)  # created, and gone already: nothing to delete
        return FileRestore(path, content, written, "deleted since")
    except OSError as exc:
        return FileRestore(path, content, written, exc.strerror or str(exc), forceable=False)
    if not stat.S_ISREG(info.st_mode):
        return FileRestore(path, content, written, "no longer a regular file", forceable=False)
    if written is None:
        return FileRestore(path, content, written, "what crow wrote is not known (an older session)")
    digest = hashlib.sha256()
    try:
        with open(file, "rb", opener=lambda p, flags: os.open(p, flags | os.O_NONBLOCK | os.O_NOFOLLOW)) as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                return FileRestore(path, content, written, "no longer a regular file", forceable=False)
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:
        return FileRestore(path, content, written, exc.strerror or str(exc), forceable=False)
    if digest.hexdigest() != written:
        return FileRestore(path, content, written, "changed since")
    return FileRestore(path, content, written)


def _shell_commands(messages: list[Message]) -> list[str]:
    commands = []
    for m in messages:
        for call in tool_calls_of(m):
            fn = call["function"]
            if fn["name"] == "run_shell":
                try:
                    command = json.loads(fn["arguments"] or "{}").get("command", "")
                except (ValueError, AttributeError):
                    command = fn["arguments"]
                commands.append(" ".join(str(command).split())[:80])
    return commands


def _start(messages: list[Message]) -> int | None:
    """The position of the last exchange's user message (None: no prompt)."""
    return next((i for i in range(len(messages) - 1, -1, -1) if is_prompt(messages[i])), None)


def snapshot_workspace(store: SessionStore, session_id: str) -> Path | None:
    """The workspace folder the session's last exchange took its first snapshot of (`rewind`); None when it took
    none (`crow run`, an older crow, no tool call that may write), or there is no exchange.

    Raises:
        SessionError: no such session.
    """
    start = _start(store.messages(session_id))
    snapshots = store.snapshots(session_id, start) if start is not None else []
    return Path(snapshots[0].workspace) if snapshots else None


def scan_workspace(workspace: Path, store: SessionStore, scanner: Scanner | None = None) -> Scan | None:
    """`workspace` as it is now, for `plan_undo`: by `scanner` when it looks at that folder (it remembers what it
    hashed), else by a new one that leaves out the store's own files; None when the folder cannot be listed (gone:
    the backups are what undo restores then). Reads nothing of the store, so it may run in a worker thread."""
    if scanner is None or scanner.root != workspace:  # `crow sessions undo`, or a session resumed elsewhere
        scanner = Scanner(workspace, exclude=store.files())
    try:
        return scanner.scan()
    except OSError:
        return None


def plan_undo(store: SessionStore, session_id: str, *, force: bool = False, workspace: Path | None = None,
              now: Scan | None = None) -> UndoPlan:
    """What undoing the session's last exchange would do (nothing is changed).

    `workspace` (`snapshot_workspace`) and `now` (a scan of it as it is): when the exchange has snapshots of that
    workspace, its files are put back as the first of them found them (`rewind.plan_rewind`), and only the
    files the snapshots never saw are restored from crow's file tools' backups; else the backups are all. Each
    backup is checked against what crow wrote to it (a hash), and each snapshotted file against the snapshots
    (changed outside crow since), so one the user changed since is held back, unless `force`.

    Raises:
        SessionError: no such session, or it has no exchange to undo.
    """
    messages = store.messages(session_id)
    start = _start(messages)
    if start is None:
        raise SessionError(f"session {session_id} has nothing to undo")
    backups = store.file_backups(session_id, start)
    rewind = None
    if workspace is not None and now is not None and (
            chain := [s for s in store.snapshots(session_id, start) if s.workspace == str(workspace)]):
        rewind = plan_rewind(store, session_id, start, now, workspace)
        seen = {path for manifest in (chain[0].manifest, now.manifest)
                for part in ("files", "big", "links") for path in manifest.get(part, {})}
        backups = [b for b in backups if not (Path(b[0]).is_relative_to(workspace)
                                              and Path(b[0]).relative_to(workspace).as_posix() in seen)]
    files = [_check(path, content, written) for path, content, written in backups]
    return UndoPlan(start, len(messages) - start, " ".join(content_text(messages[start].get("content")).split()), files,
                    [] if rewind is not None else _shell_commands(messages[start:]), force, rewind)


def apply_undo(store: SessionStore, session_id: str, plan: UndoPlan) -> list[str]:
    """Restore the plan's files and remove the exchange's messages (the session's title too, when no prompt is
    left); returns problems (files that could not be restored, or that changed after the plan was made: the
    plan names the others), each a line. The caller holds the session (`SessionStore.lock`).

    The snapshotted files are put back by `rewind.apply_rewind` (never through a link or out of the workspace;
    those changed outside crow since only when the plan is forced). Each backed-up file is checked again just
    before it is restored (it may have changed since the plan was shown); a restore is atomic
    (`atomic.write_atomic`) and never follows a link out of where crow wrote. The files go back before the
    messages go: the snapshots (and the contents they name) are removed with them."""
    problems = []
    if plan.rewind is not None:
        changes = [c for c in plan.rewind.changes if plan.force or not c.outside]  # the plan names the others
        problems += apply_rewind(store, RewindPlan(plan.rewind.root, changes), overwrite=True)[1]
    for planned in plan.files:
        item = _check(planned.path, planned.content, planned.written)
        if not plan.restored(item):
            if plan.restored(planned):  # held since the plan was shown (the plan named the others already)
                problems.append(f"{item.path} changed since, not restored ({item.problem})")
            continue
        file = Path(item.path)
        try:
            if item.content is None:
                file.unlink(missing_ok=True)
            else:
                file.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(file, item.content)
        except OSError as exc:
            problems.append(f"could not restore {item.path}: {exc.strerror or exc}; it is unchanged")
    store.truncate(session_id, plan.keep)
    store.clear_title_if_unprompted(session_id)  # the title never names a prompt that is gone
    return problems
