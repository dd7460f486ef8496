"""What the chat's pickers offer: the sessions to resume (this folder's first) and the server's models, as
`(value, label)` rows for prompt-toolkit's `ChoiceInput`. Labels are made of stored or served text: their
control characters are removed here, before any terminal sees them."""

from __future__ import annotations

import time
from collections.abc import Iterable

from ...sessions import SessionStore, short_folder
from ...text import strip_controls, visible

__all__ = ["MAX_MODELS", "MAX_OTHER_SESSIONS", "MAX_SESSIONS_HERE", "age", "model_options", "session_options", "shown"]

MAX_SESSIONS_HERE = 15
"""The picker offers this folder's most recent sessions, up to this many, first."""
MAX_OTHER_SESSIONS = 10
"""Then other folders' most recent sessions, up to this many."""
MAX_MODELS = 200
"""`/model` offers the server's first models, up to this many: a list of thousands redraws slowly at each key
(`/model NAME` switches to any)."""


def age(seconds: float) -> str:
    """`seconds` ago in a few characters: `just now`, `5 min ago`, `3 h ago`, `2 days ago`."""
    seconds = max(seconds, 0)
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    if seconds < 86400:
        return f"{int(seconds // 3600)} h ago"
    days = int(seconds // 86400)
    return f"{days} day{'s' if days != 1 else ''} ago"


def _when(updated_at: float, now: float) -> str:
    if now - updated_at < 30 * 86400:
        return age(now - updated_at)
    return time.strftime("%Y-%m-%d", time.localtime(updated_at))


def session_options(store: SessionStore, here: str, *, leave_out: str | None = None,
                    now: float | None = None) -> list[tuple[str, str]]:
    """The sessions to pick from, `(id, label)` each: those started in the folder `here` first (the most recent
    `MAX_SESSIONS_HERE`), then other folders' (`MAX_OTHER_SESSIONS`), each group most recent first, without the
    session `leave_out` (the one the chat is in). A label reads `age  N messages  title  folder` (the folder last: the
    longest), aligned in columns, without control characters."""
    now = time.time() if now is None else now
    mine = [s for s in store.recent(MAX_SESSIONS_HERE + 1, cwd=here) if s.id != leave_out][:MAX_SESSIONS_HERE]
    others = [s for s in store.recent(MAX_OTHER_SESSIONS + len(mine) + 1)
              if s.cwd != here and s.id != leave_out][:MAX_OTHER_SESSIONS]
    found = [*mine, *others]
    cells = [(_when(s.updated_at, now), f"{s.messages} message" + ("" if s.messages == 1 else "s"),
              shown(s.title) or "(untitled)", shown(short_folder(s.cwd))) for s in found]
    widths = [max((len(row[i]) for row in cells), default=0) for i in range(3)]
    return [(s.id, f"{when:<{widths[0]}}  {count:>{widths[1]}}  {title:<{widths[2]}}  {folder}")
            for s, (when, count, title, folder) in zip(found, cells, strict=True)]


def model_options(models: Iterable[str], current: str, limit: int | None = None) -> list[tuple[str, str]]:
    """The server's models to pick from, `(id, label)` each in the server's order, the first `limit` of them
    (None: all; the model in use is offered first when it comes later); the model in use is marked `(in use)`.
    Labels without control characters (a name is the server's text)."""
    names = list(dict.fromkeys(models))
    if limit is not None and len(names) > limit:
        names = names[:limit] if current not in names[limit:] else [current, *names[:limit - 1]]
    return [(name, shown(name) + ("  (in use)" if name == current else "")) for name in names]


def shown(text: str) -> str:
    """Outside text (a stored title, a served model name) on one line, as a terminal may show it: no controls,
    bidi or zero-width characters as `\\uXXXX`."""
    return visible(strip_controls(" ".join(text.split())))

