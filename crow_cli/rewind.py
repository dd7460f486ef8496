"""Rewind the workspace: put its files back as they were before a prompt's tool calls, `run_shell` included.

Before and after each tool call that may write, the surface takes a snapshot of the workspace and stores it
with the session; rewinding to a prompt puts back each file that differs, asking first about files changed
outside crow. Snapshots are bounded and cheap (`Scanner`); `plan_rewind` tells what a rewind restores and
what it cannot; `apply_rewind` writes atomically, never through a link or outside the workspace.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import shutil
import stat
import subprocess
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .atomic import write_atomic
from .paths import resolve_path
from .sessions import SessionStore, StoredSnapshot

__all__ = [
    "BOUNDS_NOTE",
    "IGNORED_FOLDERS",
    "MAX_FILES",
    "MAX_FILE_BYTES",
    "FileChange",
    "RewindPlan",
    "Scan",
    "Scanner",
    "apply_rewind",
    "plan_rewind",
]

MAX_FILE_BYTES = 1024 * 1024
"""Files larger than this (bytes) are not kept in a snapshot (nor restored)."""
MAX_FILES = 5000
"""A workspace of more files than this is not snapshotted."""
IGNORED_FOLDERS = frozenset({".git", ".hg", ".svn", "node_modules", ".venv", "venv", "__pycache__", ".mypy_cache",
                             ".pytest_cache", ".ruff_cache", ".tox"})
"""Folders never snapshotted, wherever they are in the workspace (git-ignored files are not either)."""
BOUNDS_NOTE = (f"(never snapshotted: files over {MAX_FILE_BYTES // (1024 * 1024)} MiB, ignored folders and files: "
               f"node_modules, .venv, .git, .gitignore's; a workspace of over {MAX_FILES} files)")
"""What rewind never restores, said once with each plan."""

_Key = tuple[int, int, int, int]


@dataclass(frozen=True)
class Scan:
    """One look at the workspace."""

    manifest: dict[str, Any]
    """As `sessions.StoredSnapshot.manifest`: `files`, `big`, `over`, and `links` (a symbolic link's path: its
    target, so a link a command replaced by a file, as `sed -i` does, is linked again)."""
    contents: dict[str, bytes] = field(default_factory=dict, repr=False)
    """The contents read this time (files new or changed since the scanner last looked), by SHA-256 (hex)."""


class Scanner:
    """Takes snapshots of one workspace folder, hashing only the files whose size, times or inode changed since
    it last looked. Thread-safe (a scan runs in a worker thread).

    A snapshot (`Scanner.scan`, stored by `SessionStore.add_snapshot`) is taken around each call that may write
    (`tools.approval.may_write`: not a read, not a command the shell rules find read-only): a manifest of every
    file git would show (tracked and untracked, not ignored; without git, every file outside `IGNORED_FOLDERS`),
    each by the SHA-256 of its content, each content stored once. What was hashed is remembered by the file's
    size, times and inode, so a snapshot of an unchanged workspace reads no file: a tool call costs a listing and
    a `stat` per file.

    Bounded: a file over `MAX_FILE_BYTES` is listed (its size) but not kept, so it is never restored; a
    workspace of more than `MAX_FILES` files is not snapshotted at all (the manifest says how many it held);
    ignored folders (`node_modules`, `.venv`, `.git` …) and git-ignored files are never looked at.

    Args:
        root: the workspace folder (resolved).
        max_bytes: files over this many bytes are listed, not kept.
        max_files: a workspace of more files than this is not snapshotted.
        exclude: files and folders never snapshotted (the session store's own, when it is in the workspace).
    """

    def __init__(self, root: Path, *, max_bytes: int = MAX_FILE_BYTES, max_files: int = MAX_FILES,
                 exclude: Iterable[Path] = ()) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.max_files = max_files
        self._exclude = {p.relative_to(root).as_posix() for p in (_absolute(e) for e in exclude)
                         if p.is_relative_to(root) and p != root}
        self._seen: dict[str, tuple[_Key, str]] = {}
        self._lock = threading.Lock()

    def forget(self) -> None:
        """Hash every file again at the next scan (the store may have dropped contents this scanner read)."""
        with self._lock:
            self._seen.clear()

    def scan(self) -> Scan:
        """The workspace's files now; never raises for a file that vanished or cannot be read (it is left out).

        Raises:
            OSError: the workspace folder cannot be listed.
        """
        with self._lock:
            names = self._listing()
            if len(names) > self.max_files:  # told from the listing alone: no file of it is looked at
                return Scan({"files": {}, "big": {}, "over": len(names)})
            files: dict[str, list[Any]] = {}
            big: dict[str, int] = {}
            links: dict[str, str] = {}
            contents: dict[str, bytes] = {}
            seen: dict[str, tuple[_Key, str]] = {}
            for name in names:
                try:
                    info = os.lstat(self.root / name)
                except OSError:
                    continue
                if stat.S_ISLNK(info.st_mode):
                    with contextlib.suppress(OSError):
                        links[name] = os.readlink(self.root / name)
                    continue
                if not stat.S_ISREG(info.st_mode):
                    continue
                if info.st_size > self.max_bytes:
                    big[name] = info.st_size
                    continue
                key = (info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino)
                known = self._seen.get(name)
                if known is not None and known[0] == key:
                    digest = known[1]
                else:
                    data = _read(self.root / name)
                    if data is None:
                        continue
                    digest = hashlib.sha256(data).hexdigest()
                    contents[digest] = data
                files[name] = [digest, stat.S_IMODE(info.st_mode)]
                seen[name] = (key, digest)
            self._seen = seen
            return Scan({"files": files, "big": big, "over": None, "links": links}, contents)

    def _listing(self) -> list[str]:
        """The workspace's files, relative, as git lists them (tracked and untracked, not ignored), or a walk
        that leaves out `IGNORED_FOLDERS` when git is missing or the folder is no repository."""
        names = self._git_listing()
        if names is None:
            names = self._walk()
        return [n for n in names if n and not n.endswith("/") and not IGNORED_FOLDERS.intersection(n.split("/"))
                and not self._excluded(n)]

    def _excluded(self, name: str) -> bool:
        return any(name == e or name.startswith(e + "/") for e in self._exclude)

    def _git_listing(self) -> list[str] | None:
        git = shutil.which("git")
        if git is None:
            return None
        # a repository's config can name a program git runs (core.fsmonitor): never one here; no index write
        env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}
        try:
            done = subprocess.run([git, "-c", "core.fsmonitor=false", "ls-files", "-z", "--cached", "--others",
                                   "--exclude-standard", "--deduplicate"], cwd=self.root, env=env,
                                  capture_output=True, timeout=60, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        if done.returncode != 0:
            return None
        return [os.fsdecode(n) for n in done.stdout.split(b"\0")]

    def _walk(self) -> list[str]:
        names: list[str] = []
        for folder, dirs, files in os.walk(self.root):
            dirs[:] = [d for d in dirs if d not in IGNORED_FOLDERS]
            relative = Path(folder).relative_to(self.root)
            names += [(relative / f).as_posix() for f in files]
            if len(names) > self.max_files:  # enough to know it is over the bound
                break
        return names


def _absolute(path: Path) -> Path:
    """`path` with its folder's links resolved (the file itself may not exist yet)."""
    try:
        return resolve_path(path.parent) / path.name
    except OSError:
        return path


def _read(path: Path) -> bytes | None:
    """The bytes of the regular file at `path`, None when it is gone, unreadable or not a regular file now."""
    try:
        with open(path, "rb", opener=lambda p, flags: os.open(p, flags | os.O_NONBLOCK | os.O_NOFOLLOW)) as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                return None
            return fh.read()
    except OSError:
        return None


Action = Literal["restore", "create", "remove", "link"]


@dataclass(frozen=True)
class FileChange:
    """One file a rewind puts back."""

    path: str
    """Relative to the workspace, with `/`."""
    action: Action
    """`restore` its content, `create` it again (deleted since), `remove` it (made since), `link` it again to
    `target` (a symbolic link then)."""
    digest: str | None = None
    """The SHA-256 (hex) of the content to put back (None for `remove`)."""
    mode: int = 0o644
    """Its permission bits then."""
    outside: bool = False
    """It changed outside crow since the snapshot: overwritten only when the person says so."""
    target: str | None = None
    """For `link`: what the link led to."""


@dataclass(frozen=True)
class RewindPlan:
    """What rewinding the workspace to a prompt does."""

    root: Path
    """The workspace."""
    changes: list[FileChange] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What is not restored and why (a file over the size bound, a workspace over the count bound …)."""

    def outside(self) -> list[FileChange]:
        """The changes to files changed outside crow since the snapshot."""
        return [c for c in self.changes if c.outside]

    def describe(self) -> list[str]:
        """Lines saying what the rewind would do, for a surface to show before asking."""
        lines = [f"  {_VERB[c.action]} {c.path}" + (" (changed outside crow since)" if c.outside else "")
                 for c in self.changes]
        if not self.changes:
            lines.append("  no file to restore: the workspace is as it was then")
        return lines + [f"  {note}" for note in self.notes]


_VERB = {"restore": "restores", "create": "creates", "remove": "removes", "link": "restores the link"}
_DONE = {"restore": "restored", "create": "created", "remove": "removed", "link": "restored the link"}


def _state(manifest: dict[str, Any], path: str) -> tuple[Any, ...] | None:
    """How `path` stands in `manifest`: (digest, mode), ("big", size), ("link", target), or None (no such file)."""
    if (target := manifest.get("links", {}).get(path)) is not None:
        return ("link", target)
    if (entry := manifest.get("files", {}).get(path)) is not None:
        return (entry[0], entry[1])
    if (size := manifest.get("big", {}).get(path)) is not None:
        return ("big", size)
    return None


def _changed_outside(chain: list[StoredSnapshot], now: dict[str, Any], path: str) -> bool:
    """Whether `path` changed between what a call left and what the next found, or since the last call."""
    states = [(s.kind, s.manifest) for s in chain] + [("before", now)]
    for (kind, left), (next_kind, found) in itertools.pairwise(states):
        if kind == "after" and next_kind == "before" and not left.get("over") and not found.get("over") \
                and _state(left, path) != _state(found, path):
            return True
    return False


def plan_rewind(store: SessionStore, session_id: str, keep: int, now: Scan, root: Path) -> RewindPlan:
    """What putting the workspace `root` back as it was when the session held `keep` messages does, `now`
    being the workspace as it is (nothing is changed).

    It compares the first snapshot taken at or after the prompt with the workspace now: each file that differs
    is restored, created again (deleted since) or removed (made since). A file changed outside crow since (its
    state differs between what one call left and what the next found, or between what the last call left and
    now) is marked: the surface names it and asks before it is overwritten. The plan names what it cannot
    restore (a file too large, a workspace too large, an ignored file). A restore is atomic
    (`atomic.write_atomic`) and never writes through a link or outside the workspace.

    Raises:
        SessionError: the store cannot be read.
    """
    stored = store.snapshots(session_id, keep)
    chain = [s for s in stored if s.workspace == str(root)]
    notes = []
    others = sorted({s.workspace for s in stored} - {str(root)})
    if others:
        notes.append(f"tool calls in another workspace are not rewound ({', '.join(others)})")
    if not chain:
        return RewindPlan(root, [], notes)
    then = chain[0].manifest
    if then.get("over"):
        return RewindPlan(root, [], [*notes, f"not snapshotted: the workspace held more than {MAX_FILES} files "
                                               f"({then['over']}), so no file is restored"])
    if now.manifest.get("over"):
        return RewindPlan(root, [], [*notes, f"the workspace holds more than {MAX_FILES} files now "
                                               f"({now.manifest['over']}): rewind cannot tell what changed, so no "
                                               "file is restored"])
    changes = []
    paths = set(then["files"]) | set(then["big"]) | set(then.get("links", {})) | set(now.manifest["files"]) \
        | set(now.manifest["big"])  # a link made since is left as it is
    for path in sorted(paths):
        was, is_now = _state(then, path), _state(now.manifest, path)
        if was == is_now:
            continue
        if was is not None and was[0] == "big":
            notes.append(f"not restored: {path} (over {MAX_FILE_BYTES // 1024} KiB, not snapshotted)")
            continue
        outside = _changed_outside(chain, now.manifest, path)
        if was is not None and was[0] == "link":
            changes.append(FileChange(path, "link", outside=outside, target=was[1]))
        elif was is None:
            changes.append(FileChange(path, "remove", outside=outside))
        else:
            changes.append(FileChange(path, "create" if is_now is None else "restore", was[0], was[1], outside))
    return RewindPlan(root, changes, notes)


def apply_rewind(store: SessionStore, plan: RewindPlan, *, overwrite: bool = False) -> tuple[list[str], list[str]]:
    """Put the plan's files back; `overwrite`: the files changed outside crow too. Returns what was done
    ("restored a.txt", "created …", "removed …") and the problems (each a line: a file not restored and
    why). Never writes through a symbolic link or outside the workspace."""
    done: list[str] = []
    problems: list[str] = []
    kept_folders = {str(Path(c.path).parent) for c in plan.changes if c.action != "remove"}
    for change in plan.changes:
        if change.outside and not overwrite:
            problems.append(f"not restored: {change.path} (changed outside crow since)")
            continue
        file = plan.root / change.path
        try:
            if change.action == "link" and resolve_path(file.parent).is_relative_to(plan.root) \
                    and not (file.is_dir() and not file.is_symlink()):
                assert change.target is not None
                file.unlink(missing_ok=True)  # the file or link in its place: the link is what was there
                file.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(change.target, file)
                done.append(f"{_DONE[change.action]} {change.path}")
                continue
            if change.action == "link" or not resolve_path(file.parent).is_relative_to(plan.root) \
                    or os.path.islink(file):
                problems.append(f"not restored: {change.path} (it now leads outside the workspace or is a link)")
                continue
            if change.action == "remove":
                file.unlink(missing_ok=True)
                _remove_empty_folders(file.parent, plan.root, kept_folders)
            else:
                assert change.digest is not None
                content = store.snapshot_content(change.digest)
                if content is None:
                    problems.append(f"not restored: {change.path} (its content is missing from the session store)")
                    continue
                file.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(file, content)
                os.chmod(file, change.mode)
        except OSError as exc:
            problems.append(f"could not restore {change.path}: {exc.strerror or exc}")
            continue
        done.append(f"{_DONE[change.action]} {change.path}")
    return done, problems


def _remove_empty_folders(folder: Path, root: Path, kept: set[str]) -> None:
    """Remove `folder` and its parents up to `root` while they are empty (a folder a tool made for a file the
    rewind removed), but none a restored file goes into."""
    while folder != root and folder.is_relative_to(root) and str(folder.relative_to(root)) not in kept:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent
