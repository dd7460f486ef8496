"""`search_files`: a regular-expression search over the workspace's text files.

Lines are matched with the `regex` package (mrab-regex), not `re`: its default syntax (`VERSION0`)
is that of `re`, but a match can release the GIL (`concurrent=True`) and be given a `timeout=`. A
pattern that backtracks catastrophically (`^(a|aa)+$`) under `re` held the GIL for good, so neither
the event loop, nor the tool timeout, nor Ctrl-C ran again; now the search gives up after
`SEARCH_BUDGET_S` seconds, and the loop keeps running meanwhile.
"""

from __future__ import annotations

import bisect
import io
import itertools
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...errors import ToolError
from ...paths import resolve_path
from ..context import current_context
from ..tool import tool
from ..workspace import resolve_in_workspace, workspace_root
from .files import file_type
from .shell import scrubbed_environ

__all__ = ["SKIP_DIRS", "git_files", "search_files", "whole_file_safe"]

MAX_MATCHES = 200
MAX_LINE_CHARS = 300
MAX_FILE_BYTES = 1024 * 1024
"""Larger files in a searched folder are listed as not searched; a file named as the path may be larger."""
MAX_NAMED_FILE_BYTES = 64 * 1024 * 1024
SEARCH_BUDGET_S = 30.0
"""Seconds one search may spend matching, in all (below the default tool timeout of 120 s)."""
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", ".venv", "venv", "__pycache__", ".mypy_cache",
                       ".pytest_cache", ".ruff_cache", ".tox", "dist", "build"})


# Git runs programs a repository configures (core.fsmonitor runs on `ls-files`; hooks on other
# commands): crow's own git call turns them off, and gets run_shell's environment (no API keys).
_GIT_SAFE = ("-c", "core.fsmonitor=false", "-c", f"core.hooksPath={os.devnull}", "-c", "core.untrackedCache=false")


def git_files(base: Path, secrets: tuple[str, ...], timeout_s: float) -> list[str] | None:
    """The files git shows under the folder `base` (tracked, and untracked but not ignored: .gitignore is
    respected), as paths relative to `base` with `/`, in git's order; None when git cannot say (no git, not
    a work tree, no answer within `timeout_s` seconds). Git runs with the repository's programs turned off
    and an environment without `secrets` (the run's API keys)."""
    if shutil.which("git") is None:
        return None
    env = scrubbed_environ(secrets)
    env.update(GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0")
    try:
        proc = subprocess.run(["git", *_GIT_SAFE, "ls-files", "-z", "--cached", "--others", "--exclude-standard",
                               "--", "."], cwd=base, capture_output=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None  # not a git work tree
    return list(dict.fromkeys(n for n in proc.stdout.decode("utf-8", "surrogateescape").split("\0") if n))


def _git_files(base: Path, deadline: float) -> list[Path] | None:
    """Tracked and untracked-but-not-ignored files under `base`, or None when git cannot say (in time)."""
    names = git_files(base, current_context().secrets, _left(deadline))
    return None if names is None else [base / n for n in names]


def _walk(base: Path) -> Iterator[Path]:
    for folder, dirs, files in os.walk(base):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(files):
            yield Path(folder) / name


# Constructs whose per-line meaning a match in the whole file can miss: \A \Z \z \G and lookarounds see
# past a line's ends; atomic groups and possessive repeats may swallow a newline and not give it back;
# "(?-" could turn MULTILINE off. A pattern with none of them that matches some line matches the file's
# lines joined by "\n" (MULTILINE: ^ and $ at each line's ends); the converse need not hold (\s, [^x]
# can cross lines), so the whole-file search only skips files, and lines are still matched one by one.
# Inline flags that change which match is found first (r: reverse, b/e: fuzzy best/enhanced, p: POSIX
# leftmost-longest) or where lines end (w) or the syntax (V) also rule it out.
_LINE_BOUND = ("\\A", "\\Z", "\\z", "\\G", "(?=", "(?!", "(?<=", "(?<!", "(?>", "*+", "++", "?+", "}+", "(?-")
_ORDER_FLAGS = re.compile(r"\(\?[a-zA-Z]*[beprwV]")


MAX_REPEAT_PRODUCT = 100_000
"""Pattern elements after counted repeats are expanded, at most: `(?:x{65535}){65535}` took over 20 GB
while compiling, before any time budget applies; 100 000 take ~25 MB."""


def _expanded_size(pattern: str) -> int:
    """How many elements `pattern` holds once its counted repeats (`{n}`, `{n,m}`, `{n,}`) are expanded,
    as the compiler expands them: nested repeats multiply, a sequence or alternatives add. An over-count
    (group names and flags are counted as elements) errs on the side of refusing."""
    totals = [0]  # per open group: its size so far
    last = [0]  # per open group: the size of its last element (what a repeat applies to)
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "(":
            totals.append(0)
            last.append(0)
            i += 1
            continue
        if c == ")" and len(totals) > 1:
            size = totals.pop()
            last.pop()
            totals[-1] += size
            last[-1] = size
            i += 1
            continue
        if c == "{" and (counted := _COUNTED.match(pattern, i)) and (counted.group(1) or counted.group(2)):
            times = max(int(counted.group(1) or 0), int(counted.group(2) or 0))
            totals[-1] += last[-1] * (times - 1)
            last[-1] *= times
            if totals[-1] > MAX_REPEAT_PRODUCT * 10:  # no need to count on (and no huge integers)
                return totals[-1]
            i = counted.end()
            continue
        if c == "\\":
            i += 2
        elif c == "[":  # a class is one element: skip to its closing bracket
            i += 1
            if i < n and pattern[i] == "^":
                i += 1
            if i < n and pattern[i] == "]":
                i += 1
            while i < n and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
            i += 1
        else:
            i += 1
        totals[-1] += 1
        last[-1] = 1
    return sum(totals)


_COUNTED = re.compile(r"\{(\d*),?(\d*)\}")


def whole_file_safe(pattern: str) -> bool:
    """True when no match of `pattern` on a line can be missed by a MULTILINE search of the joined lines."""
    return not any(construct in pattern for construct in _LINE_BOUND) and not _ORDER_FLAGS.search(pattern)


def _split_lines(text: str) -> list[str]:
    """Lines as `read_file` counts them: ended by `\\n`, `\\r\\n` or `\\r` only (not `\\f`, U+0085, U+2028 …)."""
    return [line.rstrip("\r\n") for line in io.StringIO(text, newline="")]


def _candidates(lines: list[str], whole: Any, deadline: float) -> Iterator[int]:
    """The 1-based numbers of the lines that may match: all of them without a whole-file pattern; else
    those where a MULTILINE search of the joined lines, restarted at the line after each hit, finds one
    starting (any line matching on its own holds the leftmost hit from its start or lies after it).
    Raises TimeoutError when the deadline passes."""
    if whole is None or not lines:
        yield from range(1, len(lines) + 1)
        return
    text = "\n".join(lines)
    starts = list(itertools.accumulate((len(line) + 1 for line in lines[:-1]), initial=0))
    pos = 0
    while pos <= len(text):
        hit = whole.search(text, pos, concurrent=True, timeout=_left(deadline))
        if hit is None:
            return
        index = bisect.bisect_right(starts, hit.start()) - 1
        yield index + 1
        if index + 1 >= len(starts):
            return
        pos = starts[index + 1]


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.001)


def _stopped(pattern: str, where: str, *, backtracking: bool = True) -> str:
    if not backtracking:  # many files or lines, each quick: the budget is spent all the same
        return f"search stopped after {SEARCH_BUDGET_S:g} s at {where}: the time budget of one search is spent"
    return (f"search stopped after {SEARCH_BUDGET_S:g} s at {where}: the pattern {pattern!r} backtracks too much "
            "(nested or overlapping repeats such as (a+)+ or (a|aa)+)")


@tool(kind="search")
def search_files(pattern: str, path: str = ".") -> str:
    """Search the workspace's text files for a regular expression; one `file:line: text` per match, at most 200.

    Files git ignores (elsewhere .git, node_modules, .venv …) are skipped; a file over 1 MiB in a folder is
    listed as not searched (name it as `path` to search it).

    Args:
        pattern: a Python regular expression, matched against each line.
        path: a file or folder to search, relative to the workspace root.
    """
    import regex  # ~20 ms: imported when a search runs, not at start-up

    deadline = time.monotonic() + SEARCH_BUDGET_S  # the whole call: git, compiling, reading, matching
    if (size := _expanded_size(pattern)) > MAX_REPEAT_PRODUCT:
        raise ToolError(f"the pattern {pattern[:100]!r} repeats too much: its counted repeats expand to "
                        f"{size:,} elements, over {MAX_REPEAT_PRODUCT:,}; use smaller counts or + and *")
    try:
        compiled = regex.compile(pattern)
        whole = regex.compile(pattern, regex.MULTILINE) if whole_file_safe(pattern) else None
    except (regex.error, OverflowError) as exc:
        raise ToolError(f"invalid regular expression {pattern!r}: {exc}") from exc
    root = workspace_root()
    base = resolve_in_workspace(path)
    if base.is_file():
        files: list[Path] = [base]
    elif base.is_dir():
        files = _git_files(base, deadline) or list(_walk(base))
    else:
        what = file_type(base)
        raise ToolError(f"{path!r} does not exist" if what == "missing" else f"{path!r} is {what}; not searched")
    matches: list[str] = []
    more = 0
    stopped = ""
    too_big: list[str] = []
    size_limit = MAX_NAMED_FILE_BYTES if base.is_file() else MAX_FILE_BYTES
    for file in files:
        try:
            real = resolve_path(file)  # a symlink loop is an OSError: skipped
            if (real != root and root not in real.parents) or not real.is_file():
                continue  # a symlink leading out of the workspace, or gone
            if real.stat().st_size > size_limit:
                too_big.append(file.relative_to(root).as_posix() if file.is_relative_to(root) else str(file))
                continue
            data = real.read_bytes()
        except OSError:
            continue
        if b"\0" in data[:8192]:
            continue
        shown = file.relative_to(root).as_posix() if file.is_relative_to(root) else str(file)
        lines = _split_lines(data.decode("utf-8", "replace"))
        try:
            for number in _candidates(lines, whole, deadline):
                if time.monotonic() > deadline:  # regex timeouts bound one match; this bounds them all
                    stopped = _stopped(pattern, f"{shown}:{number}", backtracking=False)
                    break
                line = lines[number - 1]
                try:
                    if not compiled.search(line, concurrent=True, timeout=_left(deadline)):
                        continue
                except TimeoutError:
                    stopped = _stopped(pattern, f"{shown}:{number}")
                    break
                if len(matches) >= MAX_MATCHES:
                    more += 1
                    continue
                if len(line) > MAX_LINE_CHARS:
                    line = line[:MAX_LINE_CHARS] + "…"
                matches.append(f"{shown}:{number}: {line}")
        except TimeoutError:  # in the whole-file search
            stopped = _stopped(pattern, shown)
        if stopped:
            break
    if stopped and not matches:
        raise ToolError(f"{stopped}; simplify it or narrow the path")
    notes = []
    if too_big:
        limit = "64 MiB" if base.is_file() else "1 MiB"
        named = ", ".join(too_big[:5]) + (f" and {len(too_big) - 5} more" if len(too_big) > 5 else "")
        hint = "" if base.is_file() else "; name it as the path to search it"
        notes.append(f"[{len(too_big)} file{'s' if len(too_big) > 1 else ''} over {limit} not searched: {named}{hint}]")
    if not matches:
        return "\n".join([f"no matches for {pattern!r}", *notes])
    if more:
        matches.append(f"[… {more} more matches not shown; narrow the pattern or the path]")
    if stopped:
        matches.insert(0, f"[{stopped}; the matches found before are shown]")
    return "\n".join(notes + matches)
