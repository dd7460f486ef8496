"""The session store: conversations kept in SQLite so they survive crashes and can be resumed.

One file, `crow/sessions.db` in the platformdirs user data dir (`~/.local/share/crow/sessions.db` on
Linux), opened in WAL mode; its tables, images and locks are told at `SessionStore`. Each message is committed as
it is appended, so a crash loses at most the turn in flight; `load` closes a history cut mid-turn before anyone
sends it anywhere. API keys are never stored: nothing here accepts one. Schema changes are numbered migrations,
each applied once and recorded in `_migrations`. Standard library only (plus platformdirs, imported when the
default path is needed).
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from .atomic import write_atomic
from .errors import SessionError
from .history import ContentPart, Message, content_text, message_problem, repair_history
from .images import IMAGE_KEY, IMAGE_TYPES, Image, data_url_image, image_part
from .lockfile import FileLock, LockHeld
from .private import private_dir, private_file
from .text import public_url

__all__ = ["IMAGE_REF", "SessionDamaged", "SessionInUse", "SessionInfo", "SessionStore", "SessionStoreDamaged",
            "StoredCheckpoint", "StoredSnapshot", "StoredSubagentRun", "by_reference", "default_db_path",
            "short_folder"]

IMAGE_REF = "crow-image:sha256:"
"""How a stored image part's URL starts; the hex SHA-256 of the image's bytes follows."""
_EXTENSIONS = dict(zip(IMAGE_TYPES, ("png", "jpg", "gif", "webp"), strict=True))
_IMAGE_FILE = re.compile(r"[0-9a-f]{64}\.[a-z]+")
"""A file name the store gave an image: only such files are ever removed from the images folder."""
_ID_ALPHABET = "23456789abcdefghjkmnpqrstuvwxyz"  # no 0/o, 1/l/i: ids are read aloud and typed
_ID_LENGTH = 6
_TITLE_CHARS = 60


class SessionInUse(SessionError):
    """Another process holds the session (it is running a turn in it); exit code 1.

    Attributes:
        session_id: the session's full id.
        pid: the holder's process id, None when unknown.
    """

    def __init__(self, session_id: str, pid: int | None) -> None:
        holder = f" (pid {pid})" if pid else ""
        super().__init__(f"session {session_id} is in use by another crow{holder}")
        self.session_id = session_id
        self.pid = pid


class SessionStoreDamaged(SessionError):
    """The session store file is not a SQLite database or is corrupt; exit code 1.

    The message says what to do: move the file aside (crow then starts a new store) or run with
    `--no-session`. Chat and run warn once and carry on without recording.

    Attributes:
        path: the database file.
    """

    def __init__(self, path: Path, reason: str) -> None:
        aside = path.with_name(path.name + ".damaged")
        super().__init__(f"the session store {str(path)!r} is damaged ({reason}): move it aside to start a new one "
                         f"(mv {str(path)!r} {str(aside)!r}), or use --no-session")
        self.path = path


class SessionDamaged(SessionError):
    """A stored message of a session is not a valid message (the store itself is fine); exit code 1.

    Such a history is never sent: the message names the session and the message, and what to do.
    """

    def __init__(self, session_id: str, problem: str) -> None:
        super().__init__(f"session {session_id} is damaged ({problem}): it cannot be shown or continued; "
                         f"crow sessions delete {session_id} removes it")
        self.session_id = session_id


_DAMAGED = ("SQLITE_NOTADB", "SQLITE_CORRUPT")


def _store_error(path: Path, exc: sqlite3.Error, doing: str) -> SessionError:
    """`exc` as the error to raise: `SessionStoreDamaged` for a file that is no (intact) database."""
    if str(getattr(exc, "sqlite_errorname", "")).startswith(_DAMAGED):
        return SessionStoreDamaged(path, str(exc))
    return SessionError(f"{doing} {str(path)!r}: {exc}")


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """One session's row (without its messages)."""

    id: str
    """Six lowercase letters and digits, e.g. `k3fq7x`; unique prefixes are accepted on lookup."""
    title: str
    """The first user message, on one line, cut to 60 characters (`""` until there is one); a fork's is its
    source's with " (fork)" after it (once: a fork of a fork keeps its title)."""
    created_at: float
    """Unix time, seconds."""
    updated_at: float
    """Unix time of the last appended message, seconds."""
    model: str
    base_url: str
    cwd: str
    messages: int = 0
    """How many messages the session holds."""
    approval: str | None = None
    """The approval policy the session last ran under (`ask`, `auto-edit`, `yolo`, `read-only`; None: not
    recorded, a session an older crow stored): a continued session keeps it unless a flag says otherwise."""
    sandbox: str | None = None
    """The sandbox mode it last ran under (`workspace-write`, `read-only`, `off`; None: not recorded)."""


@dataclass(frozen=True, slots=True)
class StoredSubagentRun:
    """A subagent's transcript as stored, linked to the parent's `task` call."""

    position: int
    """The parent's message count when the subagent ended: its call's result comes at this position."""
    call_id: str
    """The parent's `task` call id (`""` when the model sent none)."""
    call_index: int
    """The call's position in its turn."""
    agent: str
    created_at: float
    messages: list[Message]
    """The child's whole history (system, the task prompt, its turns); images stand as `[image]` notes."""


@dataclass(frozen=True, slots=True)
class StoredCheckpoint:
    """A compaction checkpoint as stored: the view that stands for the first `position` messages."""

    position: int
    created_at: float
    tokens_before: int
    tokens_after: int
    summary: str | None
    """The model's summary; None when shortening old tool outputs was enough."""
    view: list[Message]


@dataclass(frozen=True, slots=True)
class StoredSnapshot:
    """The workspace's files as a snapshot found them (`rewind`), before or after a tool call that may write."""

    position: int
    """The session's message count when it was taken (the call's assistant message is before it)."""
    kind: str
    """`before` (the files the call found) or `after` (the files it left)."""
    workspace: str
    """The workspace folder the paths are relative to."""
    manifest: dict[str, Any]
    """`files`: {relative path: [SHA-256 hex of its content, its permission bits]}; `big`: {relative path: size
    in bytes} of files over the size bound (not kept); `over`: how many files the workspace held when more
    than the count bound (then `files` is empty: nothing kept), else null."""


def default_db_path() -> Path:
    """`crow/sessions.db` in the platformdirs user data dir."""
    import platformdirs

    return Path(platformdirs.user_data_dir("crow", appauthor=False)) / "sessions.db"


def short_folder(cwd: str) -> str:
    """A session's folder (`SessionInfo.cwd`) as lists show it: under the home folder as `~/…`; `-` when none
    was recorded. Control characters are the caller's to remove (it is stored text)."""
    if not cwd:
        return "-"
    home = str(Path.home())
    if cwd == home:
        return "~"
    return "~/" + cwd[len(home):].lstrip("/") if cwd.startswith(home.rstrip("/") + "/") else cwd


def _m1_initial(db: sqlite3.Connection) -> None:
    db.execute("""CREATE TABLE sessions (
        id TEXT PRIMARY KEY, title TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL, updated_at REAL NOT NULL,
        model TEXT NOT NULL DEFAULT '', base_url TEXT NOT NULL DEFAULT '', cwd TEXT NOT NULL DEFAULT '')""")
    db.execute("""CREATE TABLE messages (
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, position INTEGER NOT NULL,
        message TEXT NOT NULL, PRIMARY KEY (session_id, position))""")
    db.execute("CREATE INDEX sessions_updated ON sessions(updated_at)")


def _m2_checkpoints(db: sqlite3.Connection) -> None:
    db.execute("""CREATE TABLE checkpoints (
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, position INTEGER NOT NULL,
        created_at REAL NOT NULL, tokens_before INTEGER NOT NULL, tokens_after INTEGER NOT NULL,
        summary TEXT, view TEXT NOT NULL)""")
    db.execute("CREATE INDEX checkpoints_session ON checkpoints(session_id, position)")


def _m3_file_backups(db: sqlite3.Connection) -> None:
    db.execute("""CREATE TABLE file_backups (
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, position INTEGER NOT NULL,
        path TEXT NOT NULL, content BLOB, created_at REAL NOT NULL)""")
    db.execute("CREATE INDEX file_backups_session ON file_backups(session_id, position)")


def _m4_file_written(db: sqlite3.Connection) -> None:
    db.execute("ALTER TABLE file_backups ADD COLUMN written TEXT")  # SHA-256 of what crow wrote after it


def _m5_subagent_runs(db: sqlite3.Connection) -> None:
    db.execute("""CREATE TABLE subagent_runs (
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, position INTEGER NOT NULL,
        call_id TEXT NOT NULL, call_index INTEGER NOT NULL, agent TEXT NOT NULL, created_at REAL NOT NULL,
        messages TEXT NOT NULL)""")
    db.execute("CREATE INDEX subagent_runs_session ON subagent_runs(session_id, position)")


def _m6_session_modes(db: sqlite3.Connection) -> None:
    db.execute("ALTER TABLE sessions ADD COLUMN approval TEXT")  # the modes the session ran under (NULL: unknown)
    db.execute("ALTER TABLE sessions ADD COLUMN sandbox TEXT")


def _m7_workspace_snapshots(db: sqlite3.Connection) -> None:
    db.execute("""CREATE TABLE snapshots (
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, position INTEGER NOT NULL,
        kind TEXT NOT NULL, workspace TEXT NOT NULL, manifest TEXT NOT NULL, created_at REAL NOT NULL)""")
    db.execute("CREATE INDEX snapshots_session ON snapshots(session_id, position)")
    db.execute("CREATE TABLE snapshot_manifests (hash TEXT PRIMARY KEY, manifest TEXT NOT NULL)")
    db.execute("CREATE TABLE snapshot_blobs (hash TEXT PRIMARY KEY, content BLOB NOT NULL)")


_MIGRATIONS: list[tuple[str, Callable[[sqlite3.Connection], None]]] = [
    ("m001_initial", _m1_initial),
    ("m002_checkpoints", _m2_checkpoints),
    ("m003_file_backups", _m3_file_backups),
    ("m004_file_written", _m4_file_written),
    ("m005_subagent_runs", _m5_subagent_runs),
    ("m006_session_modes", _m6_session_modes),
    ("m007_workspace_snapshots", _m7_workspace_snapshots),
]
"""Applied in order, each once; append new ones, never edit or reorder applied ones."""


def _image_file(image: Image) -> str:
    return f"{image.sha256}.{_EXTENSIONS.get(image.mime_type, 'bin')}"


def by_reference(message: Message, keep: Callable[[str, Image], None] | None = None) -> Message:
    """`message` with each inline image (`data:` URL part) replaced by its reference (`IMAGE_REF` + hash, and a
    `crow_image` object: `file`, `mime_type`, `bytes`, and `name` when the part has one); `keep(file, image)` is
    called for each (the store writes the file). A message without inline images is returned as it is (not
    copied)."""
    content = message.get("content")
    if not isinstance(content, list) or not any(_inline_image(p) is not None for p in content):
        return message
    parts: list[ContentPart] = []
    for part in content:
        image = _inline_image(part)
        if image is None:
            parts.append(part)
            continue
        file = _image_file(image)
        if keep is not None:
            keep(file, image)
        ref: dict[str, Any] = {"file": file, "mime_type": image.mime_type, "bytes": len(image.data)}
        known = part.get(IMAGE_KEY)
        if isinstance(known, dict) and isinstance(known.get("name"), str) and known["name"]:
            ref["name"] = known["name"]
        parts.append({"type": "image_url", "image_url": {"url": IMAGE_REF + image.sha256}, IMAGE_KEY: ref})
    return {**message, "content": parts}  # type: ignore[return-value]  # the same role, other parts


def _image_ref(part: Any) -> dict[str, Any] | None:
    """The `crow_image` object of a stored image reference, or None for any other part (an inline image with a
    name is no reference)."""
    ref = part.get(IMAGE_KEY) if isinstance(part, dict) else None
    if not isinstance(ref, dict):
        return None
    image_url = part.get("image_url")
    url = image_url.get("url") if isinstance(image_url, dict) else None
    return ref if "file" in ref or (isinstance(url, str) and url.startswith(IMAGE_REF)) else None


def _inline_image(part: Any) -> Image | None:
    image_url = part.get("image_url") if isinstance(part, dict) and part.get("type") == "image_url" else None
    url = image_url.get("url") if isinstance(image_url, dict) else None
    return data_url_image(url) if isinstance(url, str) else None


class SessionStore:
    """Sessions and their messages in one SQLite file.

    Its tables:

        sessions(id, title, created_at, updated_at, model, base_url, cwd, approval, sandbox)
        messages(session_id, position, message)     -- one wire message per row, as JSON
        checkpoints(session_id, position, created_at, tokens_before, tokens_after, summary, view)
                                                    -- compacted views; the messages stay complete
        file_backups(session_id, position, path, content, created_at)
                                                    -- files' contents before crow's file tools wrote them (undo)
        snapshots(session_id, position, kind, workspace, manifest, created_at)
                                                    -- the workspace's files before and after a tool call that may
                                                       write (`rewind`): a manifest, by its hash
        snapshot_manifests(hash, manifest)          -- each manifest once: {"files": {PATH: [SHA256, MODE]}, …}
        snapshot_blobs(hash, content)               -- each file content once, by its SHA-256, shared by sessions

    A manifest or a content no snapshot row references any more (after `truncate`, `delete`) is removed in the
    same transaction.

    An image (an `image_url` part with a `data:` URL: an attachment, a tool's image) is stored once, by
    reference: its bytes go to `images/SHA256.EXT` beside the database (0600, written once per content), the
    row holds `{"type": "image_url", "image_url": {"url": "crow-image:sha256:HEX"}, "crow_image": {"file",
    "mime_type", "bytes", "name"}}` (`name`: what the image was called, `images.IMAGE_KEY`, when known), and
    reading a session puts the data URL back, with its name (`messages`, `load`, `checkpoints`); rows an older
    crow stored with the image inline load as they are. Exports (`export`) carry the reference too, and the
    Markdown transcript shows `[image: NAME, SIZE]` (an image stored without a name: its FILE). An image file
    belongs to every row that references it: deleting a session (`delete`) or the end of one (`truncate`)
    removes, in the same transaction, the image files no remaining row of any session references (a query over
    the stored references, so rows copied from another session count as references too).

    A session is written by one process at a time: `create` and `load` take the session's lock (a
    `lockfile.FileLock` in `sessions.db.locks/`, dropped by the kernel if the process dies) and keep it
    until `release` or `close`; a second process gets `SessionInUse`. Reading (`get`, `recent`,
    `messages`) never needs the lock. The folder crow creates is 0700, the database 0600 (`private`).

    Args:
        path: the database file (created 0600 with its missing folders 0700); default `default_db_path()`.

    Raises:
        SessionStoreDamaged: the file is not a SQLite database, or a damaged one (also from any later call).
        SessionError: the file cannot be opened, or a migration fails.
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_db_path()
        self.images_dir = self.path.parent / "images"
        """Where images are stored once each, by content hash (`by_reference`)."""
        self._locks: dict[str, FileLock] = {}
        try:
            private_dir(self.path.parent)
            for suffix in ("", "-wal", "-shm", "-journal"):  # SQLite gives its side files the database's mode
                side = self.path.with_name(self.path.name + suffix)
                if not suffix or side.exists():
                    private_file(side)
            self._db = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
            self._wal()
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._migrate()
        except OSError as exc:
            raise SessionError(f"cannot open the session store {str(self.path)!r}: {exc}") from exc
        except sqlite3.Error as exc:
            if hasattr(self, "_db"):
                self._db.close()
            raise _store_error(self.path, exc, "cannot open the session store") from exc

    def _wal(self) -> None:
        # Switching a new file to WAL needs it alone, and SQLite answers "locked" at once rather than
        # waiting for the busy timeout: another crow opening the same new store just retries.
        for attempt in range(100):
            try:
                if self._db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    self._db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == 99:
                    raise
                time.sleep(0.05)

    def _migrate(self) -> None:
        self._db.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
        done = {row[0] for row in self._db.execute("SELECT name FROM _migrations")}
        for name, migration in _MIGRATIONS:
            if name in done:
                continue
            with self._transaction():  # BEGIN IMMEDIATE: one process migrates, a concurrent one waits
                if self._db.execute("SELECT 1 FROM _migrations WHERE name = ?", (name,)).fetchone():
                    continue  # ... and then finds it done
                migration(self._db)
                self._db.execute("INSERT INTO _migrations VALUES (?, ?)", (name, time.time()))

    def files(self) -> list[Path]:
        """The files and folders the store keeps (the database, its side files, images, locks): a snapshot of a
        workspace that holds them leaves them out (`rewind.Scanner`)."""
        side = [self.path.with_name(self.path.name + s) for s in ("", "-wal", "-shm", "-journal", ".locks")]
        return [*side, self.images_dir]

    def migrations(self) -> list[str]:
        """Names of the applied migrations, in the order they were applied."""
        return [r[0] for r in self._read("SELECT name FROM _migrations ORDER BY applied_at, name")]

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise _store_error(self.path, exc, "session store") from exc

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        """Every row of a query (reads take no lock); sqlite errors become `SessionError`s."""
        try:
            return self._db.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise _store_error(self.path, exc, "session store") from exc

    def close(self) -> None:
        """Close the database and release every session lock this store holds."""
        self.release()
        self._db.close()

    # one writer per session

    def lock(self, session_id: str) -> None:
        """Hold `session_id` (a full id) for this store until `release` / `close` / process exit.

        Holding it already does nothing.

        Raises:
            SessionInUse: another store (in this or another process) holds it.
            SessionError: the lock file cannot be created.
        """
        lock = self._locks.get(session_id) or FileLock(
            self.path.with_name(self.path.name + ".locks") / f"{session_id}.lock")
        try:
            lock.acquire()
        except LockHeld as exc:
            raise SessionInUse(session_id, exc.pid) from None
        except OSError as exc:
            raise SessionError(f"cannot lock session {session_id}: {exc}") from exc
        self._locks[session_id] = lock

    def release(self, session_id: str | None = None, *, keep: str | None = None) -> None:
        """Let other processes write `session_id` again; None: every session held but `keep`."""
        for sid in [session_id] if session_id is not None else list(self._locks):
            if sid != keep and sid in self._locks:
                self._locks.pop(sid).release()

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # sessions

    def create(self, *, model: str = "", base_url: str = "", cwd: str = "", approval: str | None = None,
               sandbox: str | None = None) -> SessionInfo:
        """Start an empty session with a fresh short id, held by this store (`lock`), recording the approval
        policy and sandbox mode it runs under (None: not known)."""
        base_url = public_url(base_url)  # never credentials, even in a URL
        now = time.time()
        with self._transaction():
            sid = self._new_id()
            self.lock(sid)  # before anyone can see it: `crow run -c` elsewhere must not take it
            self._db.execute("INSERT INTO sessions (id, created_at, updated_at, model, base_url, cwd, approval, "
                             "sandbox) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                             (sid, now, now, model, base_url, cwd, approval, sandbox))
        return SessionInfo(sid, "", now, now, model, base_url, cwd, approval=approval, sandbox=sandbox)

    def _new_id(self) -> str:
        """A fresh short id no session has (inside a transaction, so no other crow takes it meanwhile)."""
        while True:
            sid = "".join(secrets.choice(_ID_ALPHABET) for _ in range(_ID_LENGTH))
            if self._db.execute("SELECT 1 FROM sessions WHERE id = ?", (sid,)).fetchone() is None:
                return sid

    def recent(self, limit: int | None = None, *, cwd: str | None = None) -> list[SessionInfo]:
        """Sessions, most recently updated first: at most `limit` (None or 0: all), only those started in the
        folder `cwd` when given (the working directory recorded with each, `SessionInfo.cwd`)."""
        where, args = (" WHERE s.cwd = ?", (cwd,)) if cwd is not None else ("", ())
        sql = _SELECT + where + " ORDER BY s.updated_at DESC, s.rowid DESC"
        rows = self._read(sql + (" LIMIT ?" if limit else ""), (*args, limit) if limit else args)
        return [SessionInfo(*row) for row in rows]

    def latest(self, cwd: str | None = None) -> SessionInfo | None:
        """The most recently updated session (of the folder `cwd` when given), or None when there is none."""
        found = self.recent(limit=1, cwd=cwd)
        return found[0] if found else None

    def get(self, session_id: str) -> SessionInfo:
        """The session whose id is `session_id` or starts with it.

        Raises:
            SessionError: no session, or an ambiguous prefix.
        """
        key = session_id.strip().lower()
        rows = self._read(_SELECT + " WHERE s.id = ? OR s.id LIKE ? ESCAPE '\\' ORDER BY s.id",
                          (key, key.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%")) if key else []
        exact = [r for r in rows if r[0] == key]
        if exact:
            return SessionInfo(*exact[0])
        if len(rows) == 1:
            return SessionInfo(*rows[0])
        if not rows:
            raise SessionError(f"no session {session_id!r} (crow sessions list shows them)")
        raise SessionError(f"session id {session_id!r} is ambiguous: {', '.join(r[0] for r in rows[:5])}")

    def fork(self, session_id: str) -> SessionInfo:
        """A new session that is a copy of `session_id` (a unique prefix is enough), held by this store (`lock`).

        Copied in one transaction: every message in order exactly as stored (its system prompt, its
        author records and image references, so images are shared, not copied), its compaction
        checkpoints and its undo and rewind records (`file_backups`, `snapshots`); model, server and
        folder too. The title is the source's with " (fork)" after it; the fork counts as just updated, so
        `crow run -c` in its folder continues it. The source is only read: it may be in use by another crow (its turn in
        flight, if any, is closed when the fork is loaded).

        Raises:
            SessionError: no session, or an ambiguous prefix.
        """
        source = self.get(session_id)
        now = time.time()
        sid = ""
        try:
            with self._transaction():
                sid = self._new_id()
                self.lock(sid)  # before anyone can see it, as `create`
                copied = self._db.execute(
                    "INSERT INTO sessions (id, title, created_at, updated_at, model, base_url, cwd, approval, "
                    "sandbox) "
                    "SELECT ?, CASE WHEN title = '' OR title LIKE '% (fork)' THEN title ELSE title || ' (fork)' END, "
                    "?, ?, model, base_url, cwd, approval, sandbox "
                    "FROM sessions WHERE id = ?", (sid, now, now, source.id)).rowcount
                if copied != 1:
                    raise SessionError(f"session {source.id} was deleted while it was being forked")
                self._db.execute("INSERT INTO messages (session_id, position, message) "
                                 "SELECT ?, position, message FROM messages WHERE session_id = ?", (sid, source.id))
                self._db.execute("INSERT INTO checkpoints (session_id, position, created_at, tokens_before, "
                                 "tokens_after, summary, view) SELECT ?, position, created_at, tokens_before, "
                                 "tokens_after, summary, view FROM checkpoints WHERE session_id = ? "
                                 "ORDER BY position, rowid", (sid, source.id))
                self._db.execute("INSERT INTO file_backups (session_id, position, path, content, created_at, "
                                 "written) SELECT ?, position, path, content, created_at, written FROM file_backups "
                                 "WHERE session_id = ? ORDER BY position, rowid", (sid, source.id))
                self._db.execute("INSERT INTO snapshots (session_id, position, kind, workspace, manifest, created_at) "
                                 "SELECT ?, position, kind, workspace, manifest, created_at FROM snapshots "
                                 "WHERE session_id = ? ORDER BY position, rowid", (sid, source.id))
        except BaseException:
            if sid:
                self.release(sid)  # no such session was made
            raise
        return self.get(sid)

    def set_model(self, session_id: str, model: str, base_url: str | None = None) -> None:
        """Record the model (and server) the session now talks to."""
        base_url = public_url(base_url) if base_url is not None else None
        with self._transaction():
            self._db.execute("UPDATE sessions SET model = ?, base_url = COALESCE(?, base_url) WHERE id = ?",
                             (model, base_url, session_id))

    def set_modes(self, session_id: str, approval: str, sandbox: str) -> None:
        """Record the approval policy and sandbox mode the session now runs under."""
        with self._transaction():
            self._db.execute("UPDATE sessions SET approval = ?, sandbox = ? WHERE id = ?",
                             (approval, sandbox, session_id))

    def delete(self, session_id: str) -> SessionInfo:
        """Delete a session, its messages, checkpoints, file backups and snapshots, and the image files and
        snapshot contents no other session
        references (module docstring); returns what was deleted.

        Raises:
            SessionInUse: another process is writing it.
            SessionError: no such session.
        """
        info = self.get(session_id)
        self.lock(info.id)
        try:
            with self._transaction():
                files = self._image_files("m.session_id = :sid", "c.session_id = :sid", {"sid": info.id})
                self._db.execute("DELETE FROM messages WHERE session_id = ?", (info.id,))
                self._db.execute("DELETE FROM sessions WHERE id = ?", (info.id,))  # its snapshots go with it
                self._remove_unreferenced(files)
                self._remove_unused_snapshots()
        finally:
            self.release(info.id)
        return info

    # messages

    def append(self, session_id: str, message: Message, *, title: str | None = None) -> int:
        """Store `message` after the session's last one and commit; returns its 0-based position.

        The first user message also gives the session its title: `title` when given (the prompt as typed,
        without the piped input or attached files the message also holds), else the message's text.
        """
        now = time.time()
        with self._transaction():  # an image file is written under the write lock: a delete never races it
            data = json.dumps(by_reference(message, self._keep_image), ensure_ascii=False)
            (position,) = self._db.execute("SELECT COALESCE(MAX(position) + 1, 0) FROM messages WHERE session_id = ?",
                                           (session_id,)).fetchone()
            self._db.execute("INSERT INTO messages VALUES (?, ?, ?)", (session_id, position, data))
            self._db.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (now, session_id))
            if message.get("role") == "user":
                self._db.execute("UPDATE sessions SET title = ? WHERE id = ? AND title = ''",
                                 (_title(message.get("content") if title is None else title), session_id))
        return int(position)

    def messages(self, session_id: str) -> list[Message]:
        """The stored messages in order, exactly as appended (no repair).

        Raises:
            SessionStoreDamaged: a row is not JSON.
            SessionDamaged: a row is JSON but not a message (`message_problem`).
        """
        rows = self._read("SELECT message FROM messages WHERE session_id = ? ORDER BY position", (session_id,))
        try:
            messages: list[Message] = [self._with_images(json.loads(r[0])) for r in rows]
        except ValueError as exc:
            raise SessionStoreDamaged(self.path, f"a message of session {session_id} is not JSON") from exc
        for n, message in enumerate(messages, 1):
            if (problem := message_problem(message)) is not None:
                raise SessionDamaged(session_id, f"message {n} of {len(messages)}: {problem}")
        return messages

    def load(self, session_id: str) -> list[Message]:
        """The history of a session, ready to send: a turn cut by a crash or Ctrl-C is closed first.

        Tool calls of the last assistant message that have no result get an "interrupted" result,
        which is also stored, so the session stays valid on disk. The session is held by this store
        from now on (`lock`): only a crashed or finished process's turn is ever repaired.

        Raises:
            SessionInUse: another process is writing it (its turn in flight is not cut).
        """
        held = session_id in self._locks
        self.lock(session_id)
        try:
            history = self.messages(session_id)
        except SessionError:  # damaged: not left held by a store that only tried to load it
            if not held:
                self.release(session_id)
            raise
        for message in repair_history(history, "interrupted"):
            self.append(session_id, message)
        return history

    def truncate(self, session_id: str, keep: int) -> None:
        """Drop every message from position `keep` on (used by `/retry`), and the checkpoints, file backups and
        snapshots past it, and the image files and snapshot contents that no remaining row references (module
        docstring)."""
        with self._transaction():
            where = {"sid": session_id, "keep": keep}
            files = self._image_files("m.session_id = :sid AND m.position >= :keep",
                                      "c.session_id = :sid AND c.position > :keep", where)
            self._db.execute("DELETE FROM messages WHERE session_id = ? AND position >= ?", (session_id, keep))
            self._db.execute("DELETE FROM checkpoints WHERE session_id = ? AND position > ?", (session_id, keep))
            self._db.execute("DELETE FROM file_backups WHERE session_id = ? AND position >= ?", (session_id, keep))
            self._db.execute("DELETE FROM subagent_runs WHERE session_id = ? AND position >= ?", (session_id, keep))
            if self._db.execute("DELETE FROM snapshots WHERE session_id = ? AND position >= ?",
                                (session_id, keep)).rowcount:
                self._remove_unused_snapshots()
            self._remove_unreferenced(files)

    def clear_title_if_unprompted(self, session_id: str) -> bool:
        """Give the session no title (`""`: its next user message gives it one) when no user message is left,
        so the title never names a prompt undo or rewind removed; returns whether it did."""
        with self._transaction():
            return bool(self._db.execute(
                "UPDATE sessions SET title = '' WHERE id = ? AND title != '' AND NOT EXISTS (SELECT 1 FROM messages "
                "WHERE session_id = ? AND json_valid(message) AND json_extract(message, '$.role') = 'user')",
                (session_id, session_id)).rowcount)

    # file backups for undo (`tools.backup`): a file's content before crow's file tools changed it

    def add_file_backup(self, session_id: str, position: int, path: str, content: bytes | None,
                        written: str = "") -> None:
        """Keep `path`'s content (None: it did not exist) from before a write made while the session
        held `position` messages, and `written`, the SHA-256 (hex) of what that write put there."""
        with self._transaction():
            self._db.execute("INSERT INTO file_backups (session_id, position, path, content, created_at, written) "
                             "VALUES (?, ?, ?, ?, ?, ?)", (session_id, position, path, content, time.time(),
                                                           written or None))

    def file_backups(self, session_id: str, since: int) -> list[tuple[str, bytes | None, str | None]]:
        """For each file written at or after message `since`: its path, its earliest kept content (None:
        it did not exist then) and the SHA-256 of what crow wrote to it last (None: not known, a
        session from an older crow), in the order the files were first written."""
        rows = self._read("SELECT path, content, written FROM file_backups WHERE session_id = ? AND position >= ? "
                          "ORDER BY position, rowid", (session_id, since))
        first: dict[str, bytes | None] = {}
        last: dict[str, str | None] = {}
        for path, content, written in rows:
            first.setdefault(path, content)
            last[path] = written
        return [(path, content, last[path]) for path, content in first.items()]

    # workspace snapshots for rewind (`rewind`): each manifest and each file content stored once

    def add_snapshot(self, session_id: str, position: int, kind: str, workspace: str, manifest: dict[str, Any],
                     contents: dict[str, bytes]) -> list[str]:
        """Keep a snapshot of the workspace (`StoredSnapshot`) taken while the session held `position` messages;
        `contents` maps the SHA-256 (hex) of file contents the store may not hold yet to the contents (one
        already held is not written again). Returns the hashes of the manifest's contents the store holds
        neither before nor in `contents`: then nothing is stored (the caller reads those files again)."""
        data = json.dumps(manifest, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        digest = hashlib.sha256(data.encode("utf-8")).hexdigest()
        with self._transaction():
            self._db.executemany("INSERT OR IGNORE INTO snapshot_blobs VALUES (?, ?)", contents.items())
            missing = [str(r[0]) for r in self._db.execute(
                "SELECT DISTINCT json_extract(f.value, '$[0]') AS h FROM json_each(?, '$.files') f "
                "WHERE NOT EXISTS (SELECT 1 FROM snapshot_blobs b WHERE b.hash = h)", (data,))]
            if not missing:
                self._db.execute("INSERT OR IGNORE INTO snapshot_manifests VALUES (?, ?)", (digest, data))
                self._db.execute("INSERT INTO snapshots VALUES (?, ?, ?, ?, ?, ?)",
                                 (session_id, position, kind, workspace, digest, time.time()))
        return missing

    def snapshots(self, session_id: str, since: int = 0) -> list[StoredSnapshot]:
        """The session's snapshots taken at or after message `since`, in the order they were taken.

        Raises:
            SessionStoreDamaged: a manifest is not JSON.
        """
        rows = self._read("SELECT s.position, s.kind, s.workspace, m.manifest FROM snapshots s JOIN snapshot_manifests "
                          "m ON m.hash = s.manifest WHERE s.session_id = ? AND s.position >= ? "
                          "ORDER BY s.position, s.rowid", (session_id, since))
        try:
            return [StoredSnapshot(p, k, w, json.loads(m)) for p, k, w, m in rows]
        except ValueError as exc:
            raise SessionStoreDamaged(self.path, f"a snapshot of session {session_id} is not JSON") from exc

    def snapshot_content(self, digest: str) -> bytes | None:
        """The file content whose SHA-256 (hex) is `digest`, None when the store does not hold it."""
        rows = self._read("SELECT content FROM snapshot_blobs WHERE hash = ?", (digest,))
        return bytes(rows[0][0]) if rows else None

    def _remove_unused_snapshots(self) -> None:
        """Remove the manifests no snapshot row references, then the contents no manifest names (in the
        caller's transaction)."""
        self._db.execute("DELETE FROM snapshot_manifests WHERE hash NOT IN (SELECT manifest FROM snapshots)")
        self._db.execute("DELETE FROM snapshot_blobs WHERE hash NOT IN (SELECT json_extract(f.value, '$[0]') "
                         "FROM snapshot_manifests m, json_each(m.manifest, '$.files') f)")

    # subagents' transcripts (`surfaces.task`), linked to the parent's `task` call

    def add_subagent_run(self, session_id: str, position: int, call_id: str, call_index: int, agent: str,
                         messages: list[Message]) -> None:
        """Keep a subagent's whole history, linked to the parent's call `call_id` (at `call_index` in its turn),
        whose result comes at message `position`. Images are kept as `[image]` notes (the image files belong
        to the session's own messages)."""
        with self._transaction():
            data = json.dumps([_without_images(m) for m in messages], ensure_ascii=False)
            self._db.execute("INSERT INTO subagent_runs VALUES (?, ?, ?, ?, ?, ?, ?)",
                             (session_id, position, call_id, call_index, agent, time.time(), data))

    def subagent_runs(self, session_id: str) -> list[StoredSubagentRun]:
        """The session's subagent transcripts, in the order they ended.

        Raises:
            SessionStoreDamaged: a row is not JSON.
        """
        rows = self._read("SELECT position, call_id, call_index, agent, created_at, messages FROM subagent_runs "
                          "WHERE session_id = ? ORDER BY position, rowid", (session_id,))
        try:
            return [StoredSubagentRun(p, c, i, a, t, json.loads(m)) for p, c, i, a, t, m in rows]
        except ValueError as exc:
            raise SessionStoreDamaged(self.path, f"a subagent transcript of session {session_id} is not JSON") from exc

    # compaction checkpoints (`context.compact`): the messages are never changed by them

    def add_checkpoint(self, session_id: str, position: int, view: list[Message], tokens_before: int,
                       tokens_after: int, summary: str | None = None) -> None:
        """Store a compacted view that stands for the session's first `position` messages."""
        with self._transaction():
            data = json.dumps([by_reference(m, self._keep_image) for m in view], ensure_ascii=False)
            self._db.execute("INSERT INTO checkpoints VALUES (?, ?, ?, ?, ?, ?, ?)",
                             (session_id, position, time.time(), tokens_before, tokens_after, summary, data))

    def checkpoints(self, session_id: str) -> list[StoredCheckpoint]:
        """The session's compaction checkpoints, oldest first (later requests start from the last)."""
        rows = self._read("SELECT position, created_at, tokens_before, tokens_after, summary, view "
                                "FROM checkpoints WHERE session_id = ? ORDER BY position, rowid", (session_id,))
        return [StoredCheckpoint(p, c, b, a, s, [self._with_images(m) for m in json.loads(v)])
                for p, c, b, a, s, v in rows]

    # images, stored once each by content hash

    def _keep_image(self, file: str, image: Image) -> None:
        """Write `image` to `images/FILE` unless it is there (its name is its content's hash)."""
        target = self.images_dir / file
        if target.exists():
            return
        try:
            private_dir(self.images_dir)
            write_atomic(target, image.data, private=True)
        except OSError as exc:
            raise SessionError(f"cannot store an image of the session in {str(self.images_dir)!r}: {exc}") from exc

    def _image_files(self, messages: str, checkpoints: str, args: dict[str, Any]) -> list[str]:
        """The image files the message rows matching `messages` and the checkpoint rows matching `checkpoints`
        reference (SQL conditions on `m` and `c`, with named `args`); inside the caller's transaction."""
        references = _REFERENCES.format(messages=messages, checkpoints=checkpoints)
        rows = self._db.execute(f"SELECT DISTINCT file FROM ({references}) WHERE file IS NOT NULL", args).fetchall()
        return [str(r[0]) for r in rows]

    def _remove_unreferenced(self, files: list[str]) -> None:
        """Remove those of `files` no row of the store references any more (a query over every session's rows,
        in the caller's transaction: an `append` that would reference one waits for it, and writes the file
        again). A file that cannot be removed stays: it is unused, not damage."""
        if not files:
            return
        everywhere = _REFERENCES.format(messages="1", checkpoints="1")  # one pass over the rows, for every file
        rows = self._db.execute(f"SELECT value FROM json_each(?) WHERE value NOT IN (SELECT file FROM ({everywhere}) "
                                "WHERE file IS NOT NULL)", (json.dumps(files),)).fetchall()
        for (file,) in rows:
            if isinstance(file, str) and _IMAGE_FILE.fullmatch(file):
                with suppress(OSError):
                    (self.images_dir / file).unlink(missing_ok=True)

    def _with_images(self, message: Any) -> Any:
        """A stored row with its image references replaced by the images (`data:` URL parts); an image whose
        file is gone becomes a text part saying so, so the session still loads and can be sent."""
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list) or not any(_image_ref(p) is not None for p in content):
            return message
        parts: list[Any] = []
        for part in content:
            ref = _image_ref(part)
            if ref is None:
                parts.append(part)
                continue
            file = str(ref.get("file") or "")
            try:
                data = (self.images_dir / Path(file).name).read_bytes() if file else b""
            except OSError:
                data = b""
            if data:
                parts.append(image_part(Image(data, str(ref.get("mime_type") or ""), str(ref.get("name") or ""))))
            else:
                parts.append({"type": "text", "text": f"[image {file or '(unnamed)'}: missing from the session "
                                                      f"store's images folder]"})
        return {**message, "content": parts}


_REFERENCES = """
    SELECT json_extract(p.value, '$.crow_image.file') AS file FROM messages m,
        json_each(CASE WHEN json_valid(m.message) THEN m.message ELSE '{{}}' END, '$.content') p
        WHERE ({messages}) AND instr(m.message, '"crow_image"') AND p.type = 'object'
    UNION ALL
    SELECT json_extract(p.value, '$.crow_image.file') FROM checkpoints c,
        json_each(CASE WHEN json_valid(c.view) THEN c.view ELSE '[]' END) v, json_each(v.value, '$.content') p
        WHERE ({checkpoints}) AND instr(c.view, '"crow_image"') AND v.type = 'object' AND p.type = 'object'"""
"""Every stored image reference (one row each, `file`) of the message rows and checkpoint views matching the
conditions; a row that is no JSON references nothing (it is reported when read, never here)."""

_SELECT = ("SELECT s.id, s.title, s.created_at, s.updated_at, s.model, s.base_url, s.cwd, "
           "(SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id), s.approval, s.sandbox FROM sessions s")


def _without_images(message: Message) -> Message:
    """`message` with each image part as a text part `[image]` (the other parts as they are)."""
    content = message.get("content")
    if not isinstance(content, list):
        return message
    parts = [{"type": "text", "text": "[image]"} if isinstance(p, dict) and p.get("type") == "image_url" else p
             for p in content]
    return cast(Message, {**message, "content": parts})


def _title(content: str | list[ContentPart] | None) -> str:
    line = " ".join(content_text(content).split())
    return line if len(line) <= _TITLE_CHARS else line[: _TITLE_CHARS - 1] + "…"
