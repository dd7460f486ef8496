"""Which hooks a run has, and the question that decides whether a project's own may act.

    crow's config.toml [[hooks.EVENT]]      always (the person's own configuration)
    PROJECT/.crow/settings.toml             only in a folder the person trusts (`trust.is_trusted`)

`trust_question` asks once on a terminal ("Trust this folder?"), naming what the repository brings (its hooks,
its `.crow/skills`, its `.crow/agents`), before anything of the project is read, and remembers the answer
(`trust.TrustStore`); skills and agents, read later, go by the same decision. Without a terminal (`crow run` in a
pipe, an editor, `crow mcp`) nothing is asked: an untrusted project's hooks do not run, and `load_hooks` says so
in one line naming the file.
"""

from __future__ import annotations

import os
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from ..config import Settings
from ..errors import ConfigError
from ..modes import PERMISSION_MODES
from ..text import strip_controls
from ..tools.hooks import PROJECT_SETTINGS, Hooks, HookSpec, parse_hooks, read_project_hooks
from ..trust import TrustStore, is_trusted, project_root

__all__ = ["PERMISSION_MODES", "hook_specs", "load_hooks", "project_brings", "trust_question"]



def project_brings(workspace: Path) -> list[str]:
    """What the repository around `workspace` brings that acts only when trusted, as the question names it:
    `.crow/settings.toml (hooks)` and its status line command, its skills folders (`.crow/skills`,
    `.agents/skills`, `.claude/skills`) and agents folders (`.crow/agents`, `.claude/agents`), those present at
    its root."""
    root = project_root(workspace)
    found = []
    settings = root / PROJECT_SETTINGS
    try:
        if settings.is_file() and read_project_hooks(settings):
            found.append(f"{PROJECT_SETTINGS} (hooks: commands crow runs as you)")
    except ConfigError:
        found.append(f"{PROJECT_SETTINGS} (hooks, not readable)")
    if _status_command(settings):
        found.append(f"{PROJECT_SETTINGS} (a status line command crow chat runs as you)")
    for folder, what in ((".crow/skills", "skills"), (".agents/skills", "skills"), (".claude/skills", "skills"),
                         (".crow/agents", "agents"), (".claude/agents", "agents")):
        if (root / folder).is_dir():
            found.append(f"{folder} ({what})")
    return found


def _status_command(settings: Path) -> bool:
    """Whether the project settings file sets `[chat] status_line` to a command (`surfaces.chat.status`)."""
    try:
        chat = tomllib.loads(settings.read_bytes().decode("utf-8-sig")).get("chat")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    line = chat.get("status_line") if isinstance(chat, dict) else None
    return isinstance(line, str) and bool(line.strip())


def trust_question(workspace: Path, *, stdin: TextIO | None = None, err: TextIO | None = None,
                   store: TrustStore | None = None) -> bool | None:
    """Ask once whether the repository around `workspace` is trusted, when it brings something (`project_brings`),
    nobody has answered for it yet and `stdin` and `err` are a terminal; remember the answer.

    Returns:
        The decision in force (True, False), or None when none was made (nothing asked, nothing to trust).
    """
    stdin = stdin or sys.stdin
    err = err or sys.stderr
    store = store or TrustStore()
    root = project_root(workspace)
    decided = store.decision(root)
    if decided is not None:
        return decided
    brings = project_brings(workspace)
    if not brings or stdin is None or err is None or not stdin.isatty() or not err.isatty():
        return None
    err.write(f"\nThis folder brings its own configuration: {strip_controls(str(root))}\n")
    for item in brings:
        err.write(f"  {strip_controls(item)}\n")
    err.write("Trust this folder? Its hooks run as you, outside the sandbox; skills and agents shape what the "
              "model is told. [y]es / [N]o: ")
    err.flush()
    try:
        reply = stdin.readline()  # Ctrl-C: KeyboardInterrupt, crow ends (exit 130) and nothing is remembered
    except OSError:
        reply = ""
    if not reply:  # end of input (Ctrl-D): not trusted for this run, asked again next time
        err.write("\nNot trusted for this run.\n")
        err.flush()
        return False
    trusted = reply.strip().lower() in ("y", "yes")
    try:
        store.set(root, trusted)
    except OSError as exc:
        err.write(f"crow: warning: the answer could not be remembered ({exc.strerror or exc}); it holds for this "
                  "run\n")
    err.write("Trusted: this folder's hooks, skills and agents are used.\n" if trusted else
              "Not trusted: this folder's hooks, skills and agents are not used.\n")
    err.flush()
    return trusted


def hook_specs(settings: Settings, workspace: Path, *, warn: Callable[[str], None] | None = None,
               store: TrustStore | None = None) -> list[HookSpec]:
    """The hooks that run here, in order: the config file's, then (in a trusted folder) the project's.

    Raises:
        ConfigError: a hooks table of either file is invalid (`tools.hooks.parse_hooks`).
    """
    source = settings.config_path or "config.toml"
    specs = parse_hooks(settings.hooks, source) if settings.hooks else []
    path = project_root(workspace) / PROJECT_SETTINGS
    if not path.is_file():
        return specs
    if is_trusted(workspace, store):
        return [*specs, *read_project_hooks(path)]
    try:
        found = read_project_hooks(path)
    except ConfigError:
        found = [HookSpec("Stop", "?")]  # unreadable and untrusted: still worth the line
    if found and warn is not None:
        warn(f"the project hooks in {path} do not run: this folder is not trusted (`crow chat` here asks)")
    return specs


def load_hooks(settings: Settings, workspace: Path, *, warn: Callable[[str], None] | None = None,
               store: TrustStore | None = None) -> Hooks | None:
    """The run's `Hooks` (`hook_specs`), told the workspace, the run's secrets and its approval mode; None when
    no hook is configured.

    Raises:
        ConfigError: a hooks table is invalid.
    """
    specs = hook_specs(settings, workspace, warn=warn, store=store)
    if not specs:
        return None
    secrets = tuple(s for s in (settings.api_key, *settings.secrets) if s)
    return Hooks(specs, cwd=Path(os.path.realpath(workspace)), secrets=secrets,
                 permission_mode=PERMISSION_MODES.get(settings.approval or "ask", "default"))
