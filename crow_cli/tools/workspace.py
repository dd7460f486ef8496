"""The workspace root and path confinement for file tools.

The root is held in a context variable, so concurrent runs (and the worker threads sync tools run in,
which copy the context) each see their own; it defaults to the working directory.
"""

from __future__ import annotations

import contextvars
import os
from pathlib import Path

from ..errors import OutsideWorkspace

__all__ = ["resolve_in_workspace", "set_workspace", "use_workspace", "workspace_root"]

_ROOT: contextvars.ContextVar[Path | None] = contextvars.ContextVar("crow_workspace_root", default=None)


def workspace_root() -> Path:
    """The resolved workspace root (the working directory unless `set_workspace` said otherwise)."""
    root = _ROOT.get()
    return root if root is not None else Path.cwd().resolve()


def set_workspace(root: str | os.PathLike[str]) -> contextvars.Token[Path | None]:
    """Confine file tools to `root` in this context; returns the token to reset it."""
    return _ROOT.set(Path(root).expanduser().resolve())


def resolve_in_workspace(path: str | os.PathLike[str]) -> Path:
    """Resolve `path` (relative to the root, or absolute) and check it stays inside the root.

    A leading `~` is the home folder (expanded first, as a shell would); symlinks are followed
    before the check, so a link that leads out is refused too. The refusal names the resolved path
    when it differs from the one given.

    Raises:
        OutsideWorkspace: the resolved path is not the root or below it.
    """
    root = workspace_root()
    given = os.fspath(path)
    raw = Path(given).expanduser()
    candidate = (raw if raw.is_absolute() else root / raw).resolve()
    if candidate != root and root not in candidate.parents:
        tilde = " (~ is the home folder)" if given.startswith("~") else ""
        where = " is" if str(candidate) == given else f" is {str(candidate)!r}{tilde},"
        raise OutsideWorkspace(f"{given!r}{where} outside the workspace {str(root)!r}; refused")
    return candidate


def use_workspace(path: str | os.PathLike[str] | None) -> Path:
    """Check `path` (None: the working directory) is an existing folder and confine file tools to it.

    Returns the resolved root. Raises:
        ConfigError: `path` does not exist or is not a folder.
    """
    from ..errors import ConfigError

    if path is None:
        root = Path.cwd().resolve()
    else:
        root = Path(path).expanduser().resolve()
        if not root.is_dir():
            raise ConfigError(f"workspace {os.fspath(path)!r} is not an existing folder")
    set_workspace(root)
    return root
