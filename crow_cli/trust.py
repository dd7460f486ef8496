"""Folders the person trusts: where what a repository brings (hooks, skills, agents, settings) may act.

A repository's `.crow/` files make crow do things: hooks run commands, skills and agents shape what the
model is told and which server it uses. A cloned repository is someone else's code, so they act only in a
folder the person said they trust (Claude Code's and Codex's "Do you trust this folder?"): asked once on a
terminal by a surface, remembered here. Trusting a folder trusts the folders under it; a "no" is remembered
too, so the question is not asked again.

The record is `trusted_folders.json` in crow's state folder (`~/.local/state/crow/` on Linux), written whole
(`atomic.write_atomic`), 0600: `{"version": 1, "folders": {"/abs/folder": {"trusted": true, "at": "ISO
time"}}}`. A record that cannot be read counts as nothing trusted (fail closed), with the reason kept in
`TrustStore.problem`. Standard library and platformdirs only.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import platformdirs

from .atomic import write_atomic
from .instructions import project_folders
from .private import private_dir

__all__ = ["TrustStore", "default_path", "is_trusted", "project_root"]


def default_path() -> Path:
    """Where the trust record lives: `trusted_folders.json` in crow's per-user state folder."""
    return Path(platformdirs.user_state_dir("crow", appauthor=False)) / "trusted_folders.json"


def project_root(workspace: Path) -> Path:
    """The folder a trust decision is about for `workspace`: the repository root (the nearest folder up
    that has a `.git`), or the workspace itself outside a repository. Both resolved."""
    return project_folders(Path(os.path.realpath(workspace)))[0]


@dataclass
class TrustStore:
    """The remembered trust decisions, read from `path` when made.

    `decision(folder)` is True (trusted), False (the person said no) or None (never asked); the nearest
    decided folder at or above `folder` counts. `set` records a decision and writes the file.
    """

    path: Path = field(default_factory=default_path)
    """The JSON record (see the module)."""
    problem: str | None = None
    """Why the record could not be read (then nothing counts as trusted), or None."""
    _folders: dict[str, dict[str, object]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return
        except OSError as exc:
            self.problem = f"{self.path}: {exc.strerror or exc}"
            return
        try:
            data = json.loads(raw)
            folders = data["folders"]
            if not isinstance(folders, dict) or not all(
                    isinstance(k, str) and isinstance(v, dict) and isinstance(v.get("trusted"), bool)
                    for k, v in folders.items()):
                raise ValueError("folders is not a map of folder to decision")
        except (ValueError, KeyError, TypeError) as exc:
            self.problem = f"{self.path} is not a trust record ({exc}); nothing is trusted"
            return
        self._folders = folders

    def decision(self, folder: Path) -> bool | None:
        """True when `folder` or the nearest decided folder above it is trusted, False when the person said
        no there, None when nobody was asked (or the record could not be read)."""
        real = Path(os.path.realpath(folder))
        for candidate in (real, *real.parents):
            entry = self._folders.get(str(candidate))
            if entry is not None:
                return bool(entry["trusted"])
        return None

    def trusted(self, folder: Path) -> bool:
        """Whether what `folder`'s repository brings may act (`decision(folder) is True`)."""
        return self.decision(folder) is True

    def set(self, folder: Path, trusted: bool) -> None:
        """Remember `trusted` for `folder` (resolved) and write the record.

        Raises:
            OSError: the record cannot be written (the decision still holds for this store).
        """
        real = str(Path(os.path.realpath(folder)))
        self._folders[real] = {"trusted": trusted, "at": datetime.now(UTC).isoformat(timespec="seconds")}
        private_dir(self.path.parent)
        body = {"version": 1, "folders": self._folders}
        write_atomic(self.path, json.dumps(body, indent=1, sort_keys=True).encode(), private=True)


def is_trusted(workspace: Path, store: TrustStore | None = None) -> bool:
    """Whether what the repository around `workspace` brings may act: its project root is trusted in `store`
    (read from the default record when None). The surfaces ask the question before a run starts (and write
    the answer), so every reader after that sees the same decision."""
    return (store or TrustStore()).trusted(project_root(workspace))
