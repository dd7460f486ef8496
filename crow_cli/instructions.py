"""Project instructions: `AGENTS.md` files (the agents.md convention) put into the system prompt.

crow reads them on its own, with no tool call and no approval, so they get the file tools' care: a project file
must resolve inside the project, every file must be a regular file on a real filesystem (`/proc/self/environ` is a
"regular" file holding every API key), the run's secrets are masked, and each file and all of them together are
bounded (`MAX_BYTES`, `MAX_TOTAL_BYTES`, nearest first). Which files, in which order: `find_instructions`.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from .paths import SymlinkLoop, resolve_path
from .text import decode_text, mask_secrets

__all__ = ["FALLBACK", "FILENAME", "MAX_BYTES", "MAX_TOTAL_BYTES", "Instructions", "find_instructions",
           "project_folders", "system_prompt"]

FILENAME = "AGENTS.md"
FALLBACK = "CLAUDE.md"
"""Read in a project folder that has no `AGENTS.md`: the same kind of file, kept for Claude Code."""
MAX_BYTES = 32 * 1024
"""Bytes read of one instructions file at most (as codex's `project_doc_max_bytes`)."""
MAX_TOTAL_BYTES = 64 * 1024
"""Bytes of instructions text in all, nearest files first: 40 nested files must not make every request
carry a megabyte of system prompt."""
_PSEUDO_FILESYSTEMS = (Path("/proc"), Path("/sys"), Path("/dev"))


@dataclass(frozen=True, slots=True)
class Instructions:
    """One instructions file as loaded."""

    path: Path
    text: str
    """Its text (cut at `MAX_BYTES`, with a note saying so)."""
    size: int
    """Its size on disk, bytes."""
    scope: str
    """`global` (crow's config folder) or `project`."""


def project_folders(workspace: Path) -> list[Path]:
    """The folders from the repository root (the nearest folder up from `workspace` that has a `.git`) down to
    `workspace`; only `workspace` outside a repository. The first is the project's root."""
    chain = [workspace, *workspace.parents]
    for n, folder in enumerate(chain):
        if (folder / ".git").exists():
            return list(reversed(chain[: n + 1]))
    return [workspace]


def _inside(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def _read(path: Path, scope: str, allowed: tuple[Path, ...] | None, warn: Callable[[str], None]
          ) -> Instructions | None:
    """The file at `path`, or None when it is missing, empty or skipped (`warn` is told why).

    `allowed`: the folders it must resolve inside (None: anywhere, for the user's own global file)."""
    try:
        if not os.path.lexists(path):
            return None
        real = resolve_path(path, strict=True)
    except SymlinkLoop:
        warn(f"{path} is a symlink loop; not read")
        return None
    except OSError:
        if path.is_symlink():
            warn(f"{path} is a symlink to nothing; not read")
        return None
    if allowed is not None and not _inside(real, allowed):
        warn(f"{path} leads to {real}, outside the project; not read")
        return None
    if _inside(real, _PSEUDO_FILESYSTEMS):
        warn(f"{path} leads to {real}, not a file on disk; not read")
        return None
    try:
        # O_NONBLOCK: a FIFO swapped in after the check must not hang the start-up; fstat decides
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        warn(f"{path} cannot be read ({exc.strerror or exc}); not read")
        return None
    with open(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            if not stat.S_ISDIR(info.st_mode):
                warn(f"{path} is not a regular file; not read")
            return None
        try:
            data = fh.read(MAX_BYTES)
        except OSError as exc:
            warn(f"{path} cannot be read ({exc.strerror or exc}); not read")
            return None
    text = decode_text(data).strip()
    if info.st_size > MAX_BYTES:
        text += f"\n\n[crow: {path.name} is {info.st_size:,} bytes; only its first {MAX_BYTES:,} were read]"
    return Instructions(path, text, info.st_size, scope) if text else None


def _within_budget(found: list[Instructions], budget: int) -> list[Instructions]:
    """`found` (global first, nearest last) keeping the nearest files whose text fits `budget` bytes in
    all; a note at the end names what was left out."""
    kept: list[Instructions] = []
    left_out: list[Instructions] = []
    used = 0
    for item in reversed(found):  # nearest first
        size = len(item.text.encode("utf-8", "replace"))
        if used + size <= budget:
            kept.append(item)
            used += size
        else:
            left_out.append(item)
    kept.reverse()
    if left_out and kept:
        names = ", ".join(str(item.path) for item in reversed(left_out))
        last = kept[-1]
        note = (f"\n\n[crow: instructions are capped at {budget:,} bytes in all, nearest first; "
                f"left out: {names}]")
        kept[-1] = Instructions(last.path, last.text + note, last.size, last.scope)
    return kept


def find_instructions(workspace: Path, config_dir: Path | None, *, secrets: Iterable[str | None] = (),
                      warn: Callable[[str], None] | None = None) -> list[Instructions]:
    """The instructions files that apply to `workspace`, global first, nearest last (the most specific has the
    last word): `AGENTS.md` in crow's config folder, then each folder's `AGENTS.md` from the repository root (the
    nearest folder up with a `.git`) down to the workspace root (outside a repository, the workspace root's
    only); a folder without `AGENTS.md` but with Claude Code's `CLAUDE.md` has that read, with one line saying so.
    Each file is UTF-8 (or UTF-16/32 after its byte-order mark), cut at `MAX_BYTES` with a note; together they get
    `MAX_TOTAL_BYTES`, nearest first, and what does not fit is left out with a note naming it.

    Args:
        workspace: the resolved workspace root.
        config_dir: crow's config folder (None: no global file).
        secrets: values (API keys) replaced by `[REDACTED]` in the files' text.
        warn: told, in one line each, of a file skipped (a link out of the project, a symlink loop, a
            non-regular file, one on /proc) or left out by the total budget; default: ignored.
    """
    tell = warn if warn is not None else (lambda _line: None)
    found: list[Instructions] = []
    folders = project_folders(workspace)
    project: tuple[Path, ...] = (folders[0],)
    if config_dir is not None:
        with contextlib.suppress(OSError):
            project += (resolve_path(config_dir),)
        if (item := _read(config_dir / FILENAME, "global", None, tell)) is not None:
            found.append(item)
    for folder in folders:
        item = _read(folder / FILENAME, "project", project, tell)
        if item is None and not os.path.lexists(folder / FILENAME):
            item = _read(folder / FALLBACK, "project", project, tell)
            if item is not None:
                tell(f"no {FILENAME} in {folder}: reading its {FALLBACK} instead (an {FILENAME} is read first)")
        if item is not None and item.path not in {f.path for f in found}:
            found.append(item)
    kept = _within_budget(found, MAX_TOTAL_BYTES)
    for item in found:
        if item not in kept and not any(k.path == item.path for k in kept):
            tell(f"{item.path} left out: instructions are capped at {MAX_TOTAL_BYTES:,} bytes in all")
    masked = tuple(s for s in secrets if s)
    return [Instructions(i.path, mask_secrets(i.text, masked), i.size, i.scope) for i in kept]


def system_prompt(system: str | None, instructions: list[Instructions], default: str | None = None) -> str | None:
    """The system prompt: `default` (crow's built-in one, `default_prompt`), then `system` (the configured one),
    then each file's text under a heading naming where it came from; None when there is none of them."""
    parts = [p for p in (default, system) if p]
    for item in instructions:
        where = "global instructions" if item.scope == "global" else "project instructions"
        parts.append(f"# {item.path.name} ({where}: {item.path})\n\n{item.text}")
    return "\n\n".join(parts) if parts else None
