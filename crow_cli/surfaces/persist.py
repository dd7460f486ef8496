"""Keeping a surface's history in the session store as the loop appends to it.

The driver calls `SessionRecorder.sync(history)` before a run and on every `MessageAppended` event,
so each message is committed as it is appended (the loop closes a cancelled history itself).

A session also keeps the modes it ran under (`RunModes`: the approval policy and the sandbox mode). A
continued session (`crow run --session`/`-c`, `crow chat --resume`, `/resume`, `crow mcp`'s `crow_reply`)
runs under the stricter of those and the surface's own (`kept_modes`), unless a flag names a mode: a
session that ran read-only is never loosened by being continued from a looser configuration.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from ..config import Settings
from ..context.compact import Checkpoint
from ..default_prompt import retell_modes, without_default
from ..errors import ConfigError, SessionError
from ..history import Message, repair_history
from ..instructions import system_prompt
from ..modes import APPROVAL_ORDER, SANDBOX_ORDER, SandboxMode
from ..rewind import Scanner
from ..sessions import SessionInfo, SessionStore
from ..tools.approval import Policy

__all__ = ["RunModes", "SessionRecorder", "kept_modes", "open_session",
           "settle_modes", "tell_modes"]



@dataclass(frozen=True, slots=True)
class RunModes:
    """The modes a run's tool calls run under."""

    approval: Policy
    """The approval policy in force (`--yes` already made `yolo`: `approval.start_policy`)."""
    sandbox: SandboxMode
    """How commands are confined."""


def kept_modes(info: SessionInfo | None, current: RunModes, *, given: frozenset[str] = frozenset()) -> RunModes:
    """The modes a continued session runs under: for each of `approval` and `sandbox`, the stricter of the
    session's stored one and `current`, or `current` when the session stored none (an older crow's, or
    `info` None: a new session) or when its name is in `given` (a flag named it: being told to loosen it)."""
    if info is None:
        return current
    approval, sandbox = current.approval, current.sandbox
    if "approval" not in given and info.approval in APPROVAL_ORDER:
        approval = APPROVAL_ORDER[min(APPROVAL_ORDER.index(approval), APPROVAL_ORDER.index(info.approval))]
    if "sandbox" not in given and info.sandbox in SANDBOX_ORDER:
        sandbox = SANDBOX_ORDER[min(SANDBOX_ORDER.index(sandbox), SANDBOX_ORDER.index(info.sandbox))]
    return RunModes(approval, sandbox)


def settle_modes(recorder: SessionRecorder | None, history: list[Message], current: RunModes, *,
                 given: frozenset[str] = frozenset(), network: bool = False, record: bool = True) -> RunModes:
    """The modes a run of `recorder`'s session runs under (`kept_modes` of the stored ones and `current`),
    recorded with the session (unless not `record`: a session only read), and `history`'s system message (if
    any) telling them (`tell_modes`). `network`: whether confined commands may use the network."""
    modes = kept_modes(recorder.info if recorder is not None else None, current, given=given)
    if recorder is not None and record:
        recorder.keep_modes(modes)
    tell_modes(history, modes, network=network)
    return modes


def tell_modes(history: list[Message], modes: RunModes, *, network: bool = False) -> None:
    """Make `history`'s system message (if any) tell `modes` (`default_prompt.retell_modes`, in place: a stored
    message stays as it was). What every change of mode calls: a continued session, an editor's switch, and a
    mode changed mid-chat (`ChatApp.change_modes`)."""
    first = history[0] if history else None
    if first is not None and first["role"] == "system" and isinstance(text := first["content"], str):
        history[0] = {"role": "system", "content": retell_modes(text, approval=modes.approval, sandbox=modes.sandbox,
                                                                network=network)}


class SessionRecorder:
    """Writes a history list to one session, appending only what is new since the last `sync`.

    The session row is created lazily, on the first `sync` that has something to store, so a chat
    left without a message leaves no empty session behind.

    Args:
        store: the open store.
        settings: model, base_url (recorded with the session; never the API key).
        info: an existing session to append to; None starts a new one when first needed.
        stored: how many messages of the history are already in the store.
    """

    def __init__(self, store: SessionStore, settings: Settings, info: SessionInfo | None = None,
                 stored: int = 0) -> None:
        self.store = store
        self.settings = settings
        self.info = info
        self.stored = stored
        self.broken = False
        """A write failed: nothing more is stored."""
        self.checkpoint: Checkpoint | None = None
        """The session's latest compaction checkpoint (later requests start from it)."""
        self._backups: list[tuple[int, str, bytes | None, str]] = []
        self.previous_model: str | None = None
        """The model a continued session was using when it differs from this run's (say so once)."""
        self.title: str | None = None
        """The prompt as the person typed it: the title a new session gets from its first user message, which
        may also hold piped input and attached files (None: the message's own text)."""
        self.modes: RunModes | None = None
        """The modes the session runs under, recorded with it (`keep_modes`; None: not recorded)."""

    @property
    def session_id(self) -> str | None:
        return self.info.id if self.info else None

    def sync(self, history: list[Message]) -> None:
        """Store `history[self.stored:]`, one committed row per message.

        Raises:
            SessionError: the store could not be written (once: later calls do nothing).
        """
        self._store_backups()
        if self.broken or len(history) <= self.stored:
            return
        try:
            if self.info is None:
                modes = self.modes
                self.info = self.store.create(model=self.settings.model, base_url=self.settings.base_url,
                                              cwd=os.getcwd(), approval=modes.approval if modes else None,
                                              sandbox=modes.sandbox if modes else None)
            for message in history[self.stored:]:
                self.store.append(self.info.id, message, title=self.title)
                self.stored += 1
        except SessionError:
            self.broken = True  # said once; the conversation goes on unrecorded
            raise

    def truncate(self, history: list[Message], keep: int) -> None:
        """Cut both the history and the stored session to their first `keep` messages."""
        del history[keep:]
        if self.info is not None:
            self.store.truncate(self.info.id, keep)
        self.stored = min(self.stored, keep)

    def save_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Store a compaction checkpoint (its messages are stored already: `sync` ran before the request).

        A store that cannot be written loses the checkpoint only: the messages stay complete.
        """
        self.checkpoint = checkpoint
        if self.info is None or self.broken:
            return
        with contextlib.suppress(SessionError):  # the next compaction tries again; no message is lost
            self.store.add_checkpoint(self.info.id, checkpoint.position, checkpoint.view, checkpoint.tokens_before,
                                      checkpoint.tokens_after, checkpoint.summary)

    def backup(self, path: Path, content: bytes | None, written: str = "") -> None:
        """Keep a file's content from before crow's file tools write it, and the SHA-256 of what they
        write (`tools.backup` hook), for undo.

        Called from a tool's worker thread: it is queued here and stored by the next `sync` (on the
        loop's thread, when the tool's result is appended).
        """
        self._backups.append((self.stored, str(path), content, written))  # list.append is atomic

    async def snapshot(self, kind: str, scanner: Scanner) -> None:
        """Keep the workspace's files as `scanner` finds them now (`kind`: `before` or `after` a tool call that
        may write), for rewind. The scan runs in a worker thread; a store that cannot be written, or a
        workspace that cannot be listed, loses the snapshot only (never raises)."""
        if self.info is None or self.broken:
            return
        for _ in range(2):  # a second time when the store lost contents the scanner took for stored
            try:
                scan = await asyncio.to_thread(scanner.scan)
            except OSError:
                return
            try:
                if not self.store.add_snapshot(self.info.id, self.stored, kind, str(scanner.root), scan.manifest,
                                               scan.contents):
                    return
            except SessionError:
                return
            scanner.forget()

    def keep_transcript(self, call_id: str, call_index: int, agent: str, messages: list[Message]) -> None:
        """Keep a subagent's whole history with the session, linked to the parent's `task` call (`surfaces.task`);
        its result comes after the messages stored so far. A store that cannot be written loses the transcript
        only: the session's messages stay complete."""
        if self.info is None or self.broken:
            return
        with contextlib.suppress(SessionError):
            self.store.add_subagent_run(self.info.id, self.stored, call_id, call_index, agent, messages)

    def _store_backups(self) -> None:
        while self._backups and self.info is not None and not self.broken:
            position, path, content, written = self._backups.pop(0)
            with contextlib.suppress(SessionError):  # the write went ahead; only its undo is lost
                self.store.add_file_backup(self.info.id, position, path, content, written)

    def reload_checkpoint(self) -> None:
        """Take the stored session's latest compaction checkpoint again (after messages were removed)."""
        stored = self.store.checkpoints(self.info.id) if self.info is not None else []
        last = stored[-1] if stored else None
        self.checkpoint = Checkpoint(last.position, last.view, last.tokens_before, last.tokens_after,
                                     last.summary) if last else None

    def discard(self) -> None:
        """Delete the session this recorder created (a run that failed before the model said anything)."""
        if self.info is not None:
            with contextlib.suppress(SessionError):
                self.store.delete(self.info.id)
            self.info, self.stored = None, 0

    def keep_modes(self, modes: RunModes) -> None:
        """Record `modes` as the ones the session runs under (now for a stored session, else when it is created).

        A store that cannot be written loses the record only (the next run decides from what was stored)."""
        self.modes = modes
        if self.info is not None and not self.broken and (self.info.approval, self.info.sandbox) != (
                modes.approval, modes.sandbox):
            with contextlib.suppress(SessionError):
                self.store.set_modes(self.info.id, modes.approval, modes.sandbox)

    def set_model(self, settings: Settings) -> None:
        self.settings = settings
        if self.info is not None:
            self.store.set_model(self.info.id, settings.model, settings.base_url)


def open_session(settings: Settings, *, session_id: str | None = None, latest: bool = False,
                 store: SessionStore | None = None, record: bool = True,
                 system: str | None = None) -> tuple[SessionRecorder, list[Message]]:
    """A recorder and the history to start from: a stored session's (repaired) or a new empty one.

    Args:
        settings: recorded with a new session.
        session_id: continue this session (a unique prefix is enough).
        latest: continue the most recently updated session of the working directory.
        store: an open store; default the one at `default_db_path()`.
        record: False reads the session and writes nothing to it (not even this run's model).
        system: the `--system` flag (None: not given; "": no system prompt), with `settings.instructions` the
            system prompt a stored session must have: a system message mid-conversation is refused by many chat
            templates, so a continued session keeps its own.

    Raises:
        SessionError: the store cannot be opened, `session_id` matches no session, or `latest` finds
            none in the working directory.
        ConfigError: `system` would change the stored session's system prompt.
    """
    if store is not None:
        return _open(store, settings, session_id, latest, record, system)
    owned = SessionStore()
    try:
        return _open(owned, settings, session_id, latest, record, system)
    except BaseException:  # a session found but not usable (in use, damaged): its lock and the store are let go
        owned.close()
        raise


def _open(store: SessionStore, settings: Settings, session_id: str | None, latest: bool,
          record: bool, system: str | None) -> tuple[SessionRecorder, list[Message]]:
    info: SessionInfo | None = None
    if session_id:
        info = store.get(session_id)
    elif latest:
        info = store.latest(cwd=os.getcwd())
        if info is None:
            raise SessionError(f"no session to continue in {os.getcwd()} (crow sessions list shows every "
                               "session; crow run --session ID or crow chat --resume ID continues any of them)")
    if info is None:
        return SessionRecorder(store, settings), []
    if system is not None:  # read before the session is taken: a refused one is left as it was
        current = next((m.get("content") for m in store.messages(info.id) if m.get("role") == "system"), None)
        given = without_default(current) if isinstance(current, str) else current  # any day's built-in prompt
        if given != system_prompt(system, list(settings.instructions)):
            raise ConfigError("--system cannot change the system prompt of a continued session; start a new "
                              "session for a new system prompt, or continue without --system")
    if record:
        history = store.load(info.id)
    else:  # read only: a turn cut by a crash is closed in memory, the store is left as it is
        history = store.messages(info.id)
        repair_history(history, "interrupted")
    if record and (settings.model != info.model or settings.base_url != info.base_url):
        store.set_model(info.id, settings.model, settings.base_url)
    recorder = SessionRecorder(store, settings, info, stored=len(history))
    if info.model and settings.model != info.model:
        recorder.previous_model = info.model
    stored = store.checkpoints(info.id)
    if stored:
        last = stored[-1]
        recorder.checkpoint = Checkpoint(last.position, last.view, last.tokens_before, last.tokens_after, last.summary)
    return recorder, history
