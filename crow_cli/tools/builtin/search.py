"""`search_files`: a regular-expression search over the workspace's text files."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from ...errors import ToolError
from ..registry import tool
from ..workspace import resolve_in_workspace, workspace_root

__all__ = ["search_files"]

MAX_MATCHES = 200
MAX_LINE_CHARS = 300
MAX_FILE_BYTES = 1024 * 1024
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", ".venv", "venv", "__pycache__", ".mypy_cache",
                       ".pytest_cache", ".ruff_cache", ".tox", "dist", "build"})


def _git_files(base: Path) -> list[Path] | None:
    """Tracked and untracked-but-not-ignored files under `base`, or None when git cannot say."""
    if shutil.which("git") is None:
        return None
    try:
        proc = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "."],
                              cwd=base, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None  # not a git work tree
    names = dict.fromkeys(n for n in proc.stdout.decode("utf-8", "surrogateescape").split("\0") if n)
    return [base / n for n in names]


def _walk(base: Path) -> Iterator[Path]:
    for folder, dirs, files in os.walk(base):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(files):
            yield Path(folder) / name


@tool
def search_files(pattern: str, path: str = ".") -> str:
    """Search the workspace's text files for a regular expression (Python syntax); one `file:line: text` per match.

    Files ignored by git (.gitignore) are skipped in a git repository; elsewhere .git, node_modules, .venv
    and similar folders are. At most 200 matches are shown.

    Args:
        pattern: a Python regular expression, matched against each line.
        path: a file or folder to search, relative to the workspace root.
    """
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise ToolError(f"invalid regular expression {pattern!r}: {exc}") from exc
    root = workspace_root()
    base = resolve_in_workspace(path)
    if base.is_file():
        files: list[Path] = [base]
    elif base.is_dir():
        files = _git_files(base) or list(_walk(base))
    else:
        raise ToolError(f"{path!r} does not exist")
    matches: list[str] = []
    more = 0
    for file in files:
        try:
            real = file.resolve()
            if (real != root and root not in real.parents) or not real.is_file():
                continue  # a symlink leading out of the workspace, or gone
            if real.stat().st_size > MAX_FILE_BYTES:
                continue
            data = real.read_bytes()
        except OSError:
            continue
        if b"\0" in data[:8192]:
            continue
        shown = file.relative_to(root).as_posix() if file.is_relative_to(root) else str(file)
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if regex.search(line):
                if len(matches) >= MAX_MATCHES:
                    more += 1
                    continue
                if len(line) > MAX_LINE_CHARS:
                    line = line[:MAX_LINE_CHARS] + "…"
                matches.append(f"{shown}:{number}: {line}")
    if not matches:
        return f"no matches for {pattern!r}"
    if more:
        matches.append(f"[… {more} more matches not shown; narrow the pattern or the path]")
    return "\n".join(matches)
