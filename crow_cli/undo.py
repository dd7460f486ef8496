"""Undo the last exchange of a session: its messages, and the files crow's file tools changed in it.

An exchange is the last user message and everything after it. Before `write_file` / `edit_file`
write, the file's content is kept (`tools.backup`, stored in the session's `file_backups`); undo
puts back, for each file written in the exchange, its content from before the exchange's first write
(a file the exchange created is deleted). `run_shell` commands cannot be undone: they are listed.
The plan is made first (`plan_undo`), so a surface shows what will be restored before doing it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .errors import SessionError
from .history import Message
from .sessions import SessionStore

__all__ = ["UndoPlan", "apply_undo", "plan_undo"]


@dataclass(frozen=True)
class UndoPlan:
    """What undoing the last exchange does."""

    keep: int
    """Messages kept (the exchange starts at this position)."""
    removed: int
    """Messages removed."""
    prompt: str
    """The exchange's user message (its text)."""
    files: list[tuple[str, bytes | None]] = field(default_factory=list)
    """Each file to restore, with its content before the exchange (None: delete it, it was created)."""
    not_undoable: list[str] = field(default_factory=list)
    """Commands the exchange ran with `run_shell` (their effects stay)."""

    def describe(self) -> list[str]:
        """Lines saying what the undo does, for a surface to show before doing it."""
        lines = [f"undo: removes the last exchange ({self.removed} messages), starting with “{self.prompt[:60]}”"]
        for path, content in self.files:
            lines.append(f"  restores {path}" if content is not None else f"  deletes {path} (it created it)")
        if not self.files:
            lines.append("  no file to restore (crow's file tools changed none)")
        for command in self.not_undoable:
            lines.append(f"  not undoable: run_shell {command}")
        return lines


def _text(content: object) -> str:
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return " ".join(str(content or "").split())


def _shell_commands(messages: list[Message]) -> list[str]:
    commands = []
    for m in messages:
        for call in m.get("tool_calls") or []:
            fn = call.get("function") or {}
            if fn.get("name") == "run_shell":
                try:
                    command = json.loads(fn.get("arguments") or "{}").get("command", "")
                except (ValueError, AttributeError):
                    command = fn.get("arguments", "")
                commands.append(" ".join(str(command).split())[:80])
    return commands


def plan_undo(store: SessionStore, session_id: str) -> UndoPlan:
    """What undoing the session's last exchange would do (nothing is changed).

    Raises:
        SessionError: no such session, or it has no exchange to undo.
    """
    messages = store.messages(session_id)
    start = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "user"), None)
    if start is None:
        raise SessionError(f"session {session_id} has nothing to undo")
    return UndoPlan(start, len(messages) - start, _text(messages[start].get("content")),
                    store.file_backups(session_id, start), _shell_commands(messages[start:]))


def apply_undo(store: SessionStore, session_id: str, plan: UndoPlan) -> list[str]:
    """Restore the plan's files and remove the exchange's messages; returns problems (files that
    could not be restored), each a line. The caller holds the session (`SessionStore.lock`)."""
    problems = []
    for path, content in plan.files:
        file = Path(path)
        try:
            if content is None:
                file.unlink(missing_ok=True)
            else:
                file.parent.mkdir(parents=True, exist_ok=True)
                file.write_bytes(content)
        except OSError as exc:
            problems.append(f"could not restore {path}: {exc.strerror or exc}")
    store.truncate(session_id, plan.keep)
    return problems
