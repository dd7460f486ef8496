"""Tab completion at the chat's prompt: `/` completes the commands (and prompt files' names), `@` the workspace's
paths (files and folders, what `attachments.mentioned_files` attaches).

The paths are git's view of the workspace in a git work tree (tracked, and untracked but not ignored:
.gitignore is respected, `search.git_files`); elsewhere the folders `search_files` skips (.git, node_modules,
.venv …) are left out. They are listed again at each Tab, so a file made since shows; a path is completed one
folder at a time, as a shell does. Names a mention cannot carry (white space) or a terminal must not show
(control characters) are not offered.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ...text import strip_controls
from ...tools.builtin.search import SKIP_DIRS, git_files

if TYPE_CHECKING:
    from prompt_toolkit.completion import CompleteEvent, Completer, Completion
    from prompt_toolkit.document import Document

__all__ = ["MAX_LISTED", "MAX_SHOWN", "chat_completer", "path_completions", "workspace_paths"]

MAX_LISTED = 50_000
"""Files looked at for one Tab, at most (a walk of a huge folder outside git stops there)."""
MAX_SHOWN = 200
"""Completions offered for one Tab, at most."""
GIT_TIMEOUT_S = 5.0
"""How long git may take to list the workspace before the folders are walked instead."""
_MENTION = re.compile(r"(?:^|\s)@(\S*)$")
"""An `@path` being typed, at the cursor (as `attachments` reads one: `@` at the start or after white space)."""


def workspace_paths(root: Path, secrets: tuple[str, ...] = ()) -> list[str]:
    """The workspace's files, relative to `root` with `/`: git's (ignored ones left out) in a git work tree,
    else a walk that skips `search.SKIP_DIRS`; at most `MAX_LISTED`."""
    listed = git_files(root, secrets, GIT_TIMEOUT_S)
    if listed is not None:
        return listed[:MAX_LISTED]
    found: list[str] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        base = Path(folder).relative_to(root)
        found += ((base / name).as_posix() for name in sorted(files))
        if len(found) >= MAX_LISTED:
            return found[:MAX_LISTED]
    return found


def path_completions(typed: str, paths: Iterable[str]) -> list[str]:
    """What `@typed` completes to among the files `paths`: the next part of each path starting with `typed`, a
    folder with `/` after it (`src/` completes to `src/app.py` and `src/lib/`), sorted, each once; none
    with white space or a control character."""
    folder = typed[: typed.rfind("/") + 1]
    found: dict[str, None] = {}
    for path in paths:
        if not path.startswith(typed):
            continue
        rest = path[len(folder):]
        part, slash, _ = rest.partition("/")
        shown = folder + part + slash
        if not part or any(c.isspace() for c in shown) or strip_controls(shown) != shown:
            continue
        found[shown] = None
    return sorted(found)[:MAX_SHOWN]


def chat_completer(commands: Callable[[], list[str]], root: Callable[[], Path],
                   secrets: Callable[[], tuple[str, ...]]) -> Completer:
    """prompt-toolkit's completer for the chat's prompt: an `@path` at the cursor completes among the files of
    the workspace `root()` (listed with `secrets()` kept out of git's environment), anything else among the
    `commands()` (`/help` …, matched against the whole line). Asked again at each Tab; the files are listed in a
    thread, so a slow git never freezes the prompt."""
    from prompt_toolkit.completion import Completer, Completion, WordCompleter

    words = WordCompleter(commands, sentence=True)

    def completions(typed: str, paths: list[str]) -> Iterator[Completion]:
        for path in path_completions(typed, paths):
            yield Completion(path, start_position=-len(typed), display=path[path.rstrip("/").rfind("/") + 1:])

    class ChatCompleter(Completer):
        def get_completions(self, document: Document, complete_event: CompleteEvent) -> Iterator[Completion]:
            mention = _MENTION.search(document.text_before_cursor)
            if mention is None:
                yield from words.get_completions(document, complete_event)
            else:
                yield from completions(mention.group(1), workspace_paths(root(), secrets()))

        async def get_completions_async(self, document: Document,
                                        complete_event: CompleteEvent) -> AsyncGenerator[Completion, None]:
            mention = _MENTION.search(document.text_before_cursor)
            if mention is None:  # at once, as before: nothing to wait for
                for completion in words.get_completions(document, complete_event):
                    yield completion
                return
            paths = await asyncio.to_thread(workspace_paths, root(), secrets())
            for completion in completions(mention.group(1), paths):
                yield completion

    return ChatCompleter()
