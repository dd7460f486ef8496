"""Path confinement for file tools: `resolve_in_workspace(path)`, against the current call's workspace.

The workspace is that of the `ToolContext` dispatch runs the call with (see `tools.context`); outside
a call it is the working directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import OutsideWorkspace, ToolError
from ..paths import resolve_path
from .context import ToolContext, current_context

__all__ = ["resolve_for_read", "resolve_for_write", "resolve_in_workspace", "shown_path", "workspace_root"]


def workspace_root() -> Path:
    """The resolved workspace root of the current call (the working directory outside a call)."""
    return current_context().workspace


def resolve_in_workspace(path: str | os.PathLike[str], root: Path | None = None) -> Path:
    """Resolve `path` (relative to the root, or absolute) and check it stays inside the root.

    `root` defaults to the current call's workspace. A leading `~` is the home folder (expanded first,
    as a shell would); symlinks are followed before the check, so a link that leads out is refused
    too. The refusal names the resolved path when it differs from the one given.

    Raises:
        OutsideWorkspace: the resolved path is not the root or below it.
    """
    root = root if root is not None else workspace_root()
    given = os.fspath(path)
    raw = Path(given).expanduser()
    try:
        candidate = resolve_path(raw if raw.is_absolute() else root / raw)
    except OSError as exc:  # a symlink loop
        raise ToolError(f"{given!r}: {exc.strerror or exc}") from exc
    if candidate != root and root not in candidate.parents:
        tilde = " (~ is the home folder)" if given.startswith("~") else ""
        where = " is" if str(candidate) == given else f" is {str(candidate)!r}{tilde},"
        raise OutsideWorkspace(f"{given!r}{where} outside the workspace {str(root)!r}; refused")
    return candidate


def resolve_for_write(path: str | os.PathLike[str], context: ToolContext | None = None) -> Path:
    """`resolve_in_workspace(path)` for a file tool about to write it (`context` defaults to the current
    call's): also refused is what the run's sandbox keeps read-only inside the workspace (its `.git`), so a
    file tool cannot write the hook or config a later git command runs outside the sandbox.

    Raises:
        OutsideWorkspace: the resolved path is not the root or below it.
        ToolError: the sandbox protects the resolved path.
    """
    context = context if context is not None else current_context()
    file = resolve_in_workspace(path, context.workspace)
    if context.sandbox.protects(file, context.workspace):
        raise ToolError(f"{os.fspath(path)!r} is in the workspace's .git, which the sandbox keeps read-only (hooks "
                        "and config there run at the next git command, outside the sandbox); refused")
    return file


def resolve_for_read(path: str | os.PathLike[str], context: ToolContext | None = None) -> Path:
    """`resolve_in_workspace(path)` for a file tool about to read it (`context` defaults to the current call's):
    also taken is a path inside a folder of the run's skills (`ToolContext.skills`), which a loaded skill
    lists for the model to read: a user's skill lives in crow's config folder, outside every workspace.
    Symlinks are followed first, so a link in a skill's folder that leads out of it is refused too.

    Raises:
        OutsideWorkspace: the resolved path is neither in the workspace nor in a skill's folder.
    """
    context = context if context is not None else current_context()
    try:
        return resolve_in_workspace(path, context.workspace)
    except OutsideWorkspace:
        folders = context.skills.folders if context.skills is not None else ()
        raw = Path(os.fspath(path)).expanduser()
        candidate = resolve_path(raw if raw.is_absolute() else context.workspace / raw)  # a loop raised above
        if any(candidate == folder or folder in candidate.parents for folder in folders):
            return candidate
        raise


def shown_path(path: Path, context: ToolContext | None = None) -> str:
    """`path` (resolved) as a tool's answer names it: relative to the workspace when inside it (`.` for the root),
    else absolute (a skill's file)."""
    root = (context if context is not None else current_context()).workspace
    try:
        return path.relative_to(root).as_posix() or "."
    except ValueError:
        return str(path)
