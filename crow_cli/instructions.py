"""Project instructions: `AGENTS.md` files (the agents.md convention) put into the system prompt.

Read, in this order (nearest last, so the most specific instructions have the last word):

1. the global one, `AGENTS.md` in crow's config folder (`~/.config/crow/AGENTS.md` on Linux);
2. in the repository: from the repository root (the nearest folder up from the workspace that has a
   `.git`) down to the workspace root, each folder's `AGENTS.md`. Outside a repository only the
   workspace root's own `AGENTS.md` is read.

Each file is read as UTF-8 (undecodable bytes replaced) and cut at 32 KiB with a note. Standard
library only; nothing is read until `find_instructions` is called.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["FILENAME", "MAX_BYTES", "Instructions", "find_instructions", "system_prompt"]

FILENAME = "AGENTS.md"
MAX_BYTES = 32 * 1024
"""Bytes read of one instructions file at most (as codex's `project_doc_max_bytes`)."""


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


def _project_folders(workspace: Path) -> list[Path]:
    """The folders from the repository root down to `workspace` (only `workspace` outside a repository)."""
    chain = [workspace, *workspace.parents]
    for n, folder in enumerate(chain):
        if (folder / ".git").exists():
            return list(reversed(chain[: n + 1]))
    return [workspace]


def _read(path: Path, scope: str) -> Instructions | None:
    try:
        if not path.is_file():
            return None
        size = path.stat().st_size
        with path.open("rb") as fh:
            data = fh.read(MAX_BYTES)
    except OSError:
        return None
    text = data.decode("utf-8", "replace").strip()
    if size > MAX_BYTES:
        text += f"\n\n[crow: {path.name} is {size:,} bytes; only its first {MAX_BYTES:,} were read]"
    return Instructions(path, text, size, scope) if text else None


def find_instructions(workspace: Path, config_dir: Path | None) -> list[Instructions]:
    """The instructions files that apply to `workspace`, global first, nearest last.

    Args:
        workspace: the resolved workspace root.
        config_dir: crow's config folder (None: no global file).
    """
    found = []
    if config_dir is not None and (item := _read(config_dir / FILENAME, "global")) is not None:
        found.append(item)
    for folder in _project_folders(workspace):
        if (item := _read(folder / FILENAME, "project")) is not None and item.path not in {f.path for f in found}:
            found.append(item)
    return found


def system_prompt(system: str | None, instructions: list[Instructions]) -> str | None:
    """The system prompt: `system` (the configured one) followed by each file's text under a heading
    naming where it came from; None when there is neither."""
    parts = [system] if system else []
    for item in instructions:
        where = "global instructions" if item.scope == "global" else "project instructions"
        parts.append(f"# {FILENAME} ({where}: {item.path})\n\n{item.text}")
    return "\n\n".join(parts) if parts else None
