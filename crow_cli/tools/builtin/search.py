"""`search_files`: a regular-expression search over the workspace's text files.

Lines are matched with the `regex` package (mrab-regex), not `re`: its default syntax (`VERSION0`)
is that of `re`, but a match can release the GIL (`concurrent=True`) and be given a `timeout=`. A
pattern that backtracks catastrophically (`^(a|aa)+$`) under `re` held the GIL for good, so neither
the event loop, nor the tool timeout, nor Ctrl-C ran again; now the search gives up after
`SEARCH_BUDGET_S` seconds, and the loop keeps running meanwhile.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from ...errors import ToolError
from ..registry import tool
from ..workspace import resolve_in_workspace, workspace_root

__all__ = ["search_files"]

MAX_MATCHES = 200
MAX_LINE_CHARS = 300
MAX_FILE_BYTES = 1024 * 1024
SEARCH_BUDGET_S = 30.0
"""Seconds one search may spend matching, in all (below the default tool timeout of 120 s)."""
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
    and similar folders are. At most 200 matches are shown. A search stops after 30 s of matching (a
    pattern that backtracks catastrophically): an error, or the matches found so far under a note.

    Args:
        pattern: a Python regular expression, matched against each line.
        path: a file or folder to search, relative to the workspace root.
    """
    import regex  # ~20 ms: imported when a search runs, not at start-up

    try:
        compiled = regex.compile(pattern)
    except (regex.error, OverflowError) as exc:
        raise ToolError(f"invalid regular expression {pattern!r}: {exc}") from exc
    root = workspace_root()
    base = resolve_in_workspace(path)
    if base.is_file():
        files: list[Path] = [base]
    elif base.is_dir():
        files = _git_files(base) or list(_walk(base))
    else:
        raise ToolError(f"{path!r} does not exist")
    deadline = time.monotonic() + SEARCH_BUDGET_S
    matches: list[str] = []
    more = 0
    stopped = ""
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
            try:
                found = compiled.search(line, concurrent=True, timeout=max(deadline - time.monotonic(), 0.001))
            except TimeoutError:
                stopped = (f"search stopped after {SEARCH_BUDGET_S:g} s at {shown}:{number}: the pattern "
                           f"{pattern!r} backtracks too much (nested or overlapping repeats such as (a+)+ or "
                           "(a|aa)+)")
                break
            if found:
                if len(matches) >= MAX_MATCHES:
                    more += 1
                    continue
                if len(line) > MAX_LINE_CHARS:
                    line = line[:MAX_LINE_CHARS] + "…"
                matches.append(f"{shown}:{number}: {line}")
        if stopped:
            break
    if stopped and not matches:
        raise ToolError(f"{stopped}; simplify it or narrow the path")
    if not matches:
        return f"no matches for {pattern!r}"
    if more:
        matches.append(f"[… {more} more matches not shown; narrow the pattern or the path]")
    if stopped:
        matches.insert(0, f"[{stopped}; the matches found before are shown]")
    return "\n".join(matches)
