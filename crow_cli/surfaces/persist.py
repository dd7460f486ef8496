"""Keeping a surface's history in the session store as the loop appends to it.

Surfaces call `SessionRecorder.sync(history)` on every `MessageAppended` event (and after adding
the user's message), so each message is committed as it is appended. After Ctrl-C they call
`close_interrupted` first, so the stored history stays valid: every tool call gets a result.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..config import Settings
from ..history import Message, ToolResult, assistant_message, pending_tool_calls, repair_history
from ..sessions import SessionInfo, SessionStore

__all__ = ["CANCELLED", "SessionRecorder", "close_interrupted", "open_session"]

CANCELLED = "cancelled by the user"


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

    @property
    def session_id(self) -> str | None:
        return self.info.id if self.info else None

    def sync(self, history: list[Message]) -> None:
        """Store `history[self.stored:]`, one committed row per message.

        Raises:
            SessionError: the store could not be written.
        """
        if len(history) <= self.stored:
            return
        if self.info is None:
            self.info = self.store.create(model=self.settings.model, base_url=self.settings.base_url, cwd=os.getcwd())
        for message in history[self.stored:]:
            self.store.append(self.info.id, message)
            self.stored += 1

    def truncate(self, history: list[Message], keep: int) -> None:
        """Cut both the history and the stored session to their first `keep` messages."""
        del history[keep:]
        if self.info is not None:
            self.store.truncate(self.info.id, keep)
        self.stored = min(self.stored, keep)

    def set_model(self, settings: Settings) -> None:
        self.settings = settings
        if self.info is not None:
            self.store.set_model(self.info.id, settings.model, settings.base_url)


def close_interrupted(history: list[Message], partial_text: str,
                      finished: Mapping[int, ToolResult] | None = None) -> list[Message]:
    """Make a history cut by Ctrl-C valid again; returns the messages appended to it.

    When the last assistant message has tool calls without results, each gets its result if the
    tool had already finished (`finished`, by call position, from `ToolResultReady` events) and a
    "cancelled by the user" result otherwise, in call order. Else the answer text streamed so far
    (if any) is kept as an assistant message, so the model and the transcript see what the user saw.
    """
    if pending_tool_calls(history):
        return repair_history(history, CANCELLED, finished)
    if partial_text.strip() and history and history[-1].get("role") in ("user", "tool"):
        message = assistant_message(partial_text + "\n\n[interrupted by the user]")
        history.append(message)
        return [message]
    return []


def open_session(settings: Settings, *, session_id: str | None = None, latest: bool = False,
                 store: SessionStore | None = None) -> tuple[SessionRecorder, list[Message]]:
    """A recorder and the history to start from: a stored session's (repaired) or a new empty one.

    Args:
        settings: recorded with a new session.
        session_id: continue this session (a unique prefix is enough).
        latest: continue the most recently updated session (a new one when there is none).
        store: an open store; default the one at `default_db_path()`.

    Raises:
        SessionError: the store cannot be opened, or `session_id` matches no session.
    """
    store = store or SessionStore()
    info: SessionInfo | None = None
    if session_id:
        info = store.get(session_id)
    elif latest:
        info = store.latest()
    if info is None:
        return SessionRecorder(store, settings), []
    history = store.load(info.id)
    if settings.model != info.model or settings.base_url != info.base_url:
        store.set_model(info.id, settings.model, settings.base_url)
    return SessionRecorder(store, settings, info, stored=len(history)), history
