"""The built-in system prompt: what the model is told before the `--system` text and the AGENTS.md files.

The text is a package data file (`data/system.md`) with `$name` placeholders filled in here: the workspace,
OS, the shell that runs commands (`/bin/sh`, never `$SHELL`: `command_shell`), today's date, the sandbox
and approval mode in force (so a refused write reads as a policy; `retell_modes` keeps them true when they
change), and how to use the built-in tools offered. It stays small (well under 1k tokens): small local
models have small context windows. `system_prompt_file` (`--system-file FILE`) replaces it, with the same
placeholders; `default_prompt = false` (`--no-default-prompt`) leaves it out. A continued session keeps the
system message it was started with, so a prompt dated yesterday is still the session's own (`without_default`).
"""

from __future__ import annotations

import datetime
import os
import platform
import re
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from string import Template

from .modes import SENTENCES
from .prompt_files import read_text_file

__all__ = ["FIRST_LINE", "command_shell", "default_prompt", "mode_phrases", "retell_modes", "without_default"]

_TEMPLATE = resources.files("crow_cli").joinpath("data/system.md").read_text(encoding="utf-8").strip()
FIRST_LINE = _TEMPLATE.split("\n", 1)[0]
"""The default prompt's first line: how a stored system message is known to start with it."""
_PARAGRAPHS = _TEMPLATE.count("\n\n") + 1

_SANDBOX = {
    "workspace-write": "commands run confined: they may write only inside the workspace (and the temp folder), "
                       "its .git is read-only",
    "read-only": "commands run confined and may write nowhere",
    "off": "commands run unconfined, with the user's rights",
}
# one sentence per mode (`modes.SENTENCES`), shared with the notes that tell the model of a later change
_APPROVAL: dict[str, str] = {str(mode): sentence for mode, sentence in SENTENCES.items()}
_TOOL_HINTS = (
    ("read_file", "Read a file before you edit it (read_file; list_directory and search_files find files)."),
    ("edit_file", "Change files with small edits (edit_file: old_string must match exactly once); write_file "
                  "only for new files or full rewrites."),
    ("run_shell", "Run tests, builds and git with run_shell, and check the exit code."),
    ("task", "Hand a self-contained search or review to a subagent with task: it sees none of this conversation, "
             "so its prompt must say everything it needs."),
    ("todo_write", "For a task of three steps or more, keep a todo list with todo_write."),
)


def command_shell(sh: str = "/bin/sh") -> str:
    """What runs the model's commands (`run_shell` runs `/bin/sh -c`; `$SHELL`, the user's login shell, never
    does), named with what `/bin/sh` is here: "/bin/sh (dash: POSIX sh, no bash extensions …)"."""
    real = os.path.basename(os.path.realpath(sh))
    what = f"{real}: POSIX sh" if real not in ("sh", "") else "POSIX sh"
    return f"{sh} ({what}, no bash extensions such as [[ ]], {{1..3}}, source, pipefail; bash -c '…' for them)"


def mode_phrases(*, approval: str | None, sandbox: str, network: bool = False) -> tuple[str, str]:
    """What the prompt says of the modes a run's calls run under: (the sandbox's phrase, the approval's).

    Args:
        approval: the approval policy in force (`--yes` already made `yolo`; None: `ask`).
        sandbox: the sandbox mode; `network`: whether confined commands may use the network.
    """
    sandboxed = _SANDBOX.get(sandbox, sandbox)
    if sandbox != "off":
        sandboxed += ", with the network on" if network else ", with no network"
    return sandboxed, _APPROVAL.get(approval or "ask", approval or "ask")


_TOLD_SANDBOX = re.compile("|".join(f"{re.escape(p)}(?:, with the network on|, with no network)?"
                                    for p in sorted(_SANDBOX.values(), key=len, reverse=True)))
_TOLD_APPROVAL = re.compile("|".join(re.escape(p) for p in sorted(_APPROVAL.values(), key=len, reverse=True)))


def retell_modes(system: str, *, approval: str | None, sandbox: str, network: bool = False) -> str:
    """`system` (a system message built with `default_prompt`, or from a file with `$sandbox` and `$approval`)
    telling the modes given instead of the ones it was built with: the first phrase of each kind is replaced.

    The one place a change of mode keeps the model told the truth: a continued session whose modes were
    tightened, a `crow mcp` call stricter than the server, and any later change of mode mid-session. A text
    that names no mode is returned as it is."""
    sandboxed, approved = mode_phrases(approval=approval, sandbox=sandbox, network=network)
    system = _TOLD_SANDBOX.sub(lambda _m: sandboxed, system, count=1)
    return _TOLD_APPROVAL.sub(lambda _m: approved, system, count=1)


def default_prompt(*, workspace: Path, sandbox: str, network: bool = False, approval: str | None = None,
                   tools: Iterable[str] = (), file: str | None = None, today: datetime.date | None = None,
                   skills: Iterable[str] = ()) -> str:
    """The default system prompt (or `file`'s text) with its placeholders filled in.

    Args:
        workspace: the workspace root.
        sandbox: the sandbox mode (`workspace-write`, `read-only`, `off`); `network`: whether confined
            commands may use the network.
        approval: the approval mode (None: the surface's default, which asks).
        tools: the names of the tools offered: only the hints of those offered are given.
        file: `system_prompt_file`: a text replacing the built-in one (the same `$name` placeholders).
        today: the date given (default: today, local time).
        skills: the skills' lines (`skills.Skills.listing`), listed with the tools' hints when `skill` is offered.

    Raises:
        ConfigError: `file` cannot be read, or is not UTF-8 text.
    """
    template = _TEMPLATE
    if file is not None:
        template = _read_prompt_file(file)
    offered = set(tools)
    hints = [hint for name, hint in _TOOL_HINTS if name in offered]
    listed = list(skills) if "skill" in offered else []
    if listed:  # names and descriptions only: a skill's body costs tokens when it is loaded
        hints.append("Skills (load one with the skill tool before a task its description matches, then follow it):\n"
                     + "\n".join(listed))
    sandboxed, approved = mode_phrases(approval=approval, sandbox=sandbox, network=network)
    values = {
        "workspace": str(workspace), "os": f"{platform.system()} {platform.release()}".strip(),
        "shell": command_shell(), "date": (today or datetime.date.today()).isoformat(),
        "sandbox": sandboxed, "approval": approved,
        "tools": "\n".join(hints) if hints else "No tools are offered: answer from what you are told.",
    }
    # a value never adds a paragraph: `without_default` counts them
    return Template(template).safe_substitute({k: " ".join(v.split()) if k != "tools" else v.replace("\n\n", "\n")
                                               for k, v in values.items()})


MAX_FILE_BYTES = 64 * 1024
"""Bytes of a system prompt file at most: it goes with every request (AGENTS.md files get the same)."""


def _read_prompt_file(file: str) -> str:
    """The text of a system prompt file (`prompt_files.read_text_file`: a regular file of at most
    `MAX_FILE_BYTES`, UTF-8).

    Raises:
        ConfigError: it cannot be read, is not a regular file, is larger, or is not UTF-8 text.
    """
    return read_text_file(Path(file).expanduser(), f"system prompt file {file!r}", MAX_FILE_BYTES)


def without_default(system: str | None) -> str | None:
    """A stored system message without the built-in prompt it starts with (any date, workspace or mode), so a
    continued session's prompt is compared by what the user gave: `--system` and the AGENTS.md files."""
    if system is None or not system.startswith(FIRST_LINE):
        return system
    rest = system.split("\n\n", _PARAGRAPHS)
    return rest[_PARAGRAPHS] if len(rest) > _PARAGRAPHS else None
