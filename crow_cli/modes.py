"""The modes of a run, declared once: the approval modes (their names, from the strictest to the loosest,
what the model is told of each, the order Shift+Tab cycles through, the note that tells the model of a
change), the sandbox modes, and when a turn's reasoning goes back to the server (`ReasoningEcho`).

Every layer takes these names from here (a leaf): the config checks its values against them, `tools`
(approval policy, sandbox), `wire` (reasoning echo) and the surfaces (`crow mcp`'s arguments, ACP's
session modes, a continued session's stricter modes) type theirs with them. What the
model reads of the mode in force is one sentence per mode (`SENTENCES`): the system prompt's `$approval`
(`default_prompt`) at the start, and a short user note (`mode_note`) appended to the history when the
mode changes later (`/approval`, Shift+Tab, an editor's mode switch, an approved plan). A note rather than
a rewritten system message keeps every request a prefix of the next (a server's prompt cache stays warm),
and the stored session says when the mode changed. Pure: standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args

__all__ = ["APPROVAL_MODES", "APPROVAL_ORDER", "CYCLE", "MODE_NOTE_HEAD", "PERMISSION_MODES", "REASONING_ECHO",
           "SANDBOX_MODES", "SANDBOX_ORDER", "SENTENCES", "ApprovalMode", "ReasoningEcho", "SandboxMode",
           "is_mode_note", "mode_note", "next_mode", "told_mode"]

ApprovalMode = Literal["ask", "auto-edit", "yolo", "read-only", "plan"]
"""The approval policy: `ask` the user, `auto-edit` (built-in file edits approved), `yolo` (all approved),
`read-only` (every call that needs approval refused), `plan` (reads and read-only commands only, until the
model hands over its plan with `exit_plan_mode`)."""
APPROVAL_MODES: tuple[ApprovalMode, ...] = get_args(ApprovalMode)
APPROVAL_ORDER: tuple[ApprovalMode, ...] = ("read-only", "plan", "ask", "auto-edit", "yolo")
"""The approval modes from the strictest to the loosest: a continued session, or a `crow mcp` call, is never
looser than what it may be."""

SandboxMode = Literal["workspace-write", "read-only", "off"]
"""How `run_shell` commands are confined (`tools.sandbox`): writes only in the workspace and the temp
folder, nowhere, or not confined at all."""
SANDBOX_MODES: tuple[SandboxMode, ...] = get_args(SandboxMode)
SANDBOX_ORDER: tuple[SandboxMode, ...] = ("read-only", "workspace-write", "off")
"""The sandbox modes from the strictest to the loosest (as `APPROVAL_ORDER`)."""

ReasoningEcho = Literal["auto", "always", "never"]
"""Whether a turn's reasoning goes back to the server (`wire.outgoing`): where the server needs it, always,
or never."""
REASONING_ECHO: tuple[ReasoningEcho, ...] = get_args(ReasoningEcho)

SENTENCES: dict[ApprovalMode, str] = {
    "ask": "the user approves each file change and command before it runs",
    "auto-edit": "file changes in the workspace apply without asking; commands are approved by the user",
    "yolo": "calls run without asking",
    "read-only": "file changes and commands that are not read-only are refused",
    "plan": "you are planning: read files and run read-only commands only (every change is refused); when the "
            "plan is ready, call exit_plan_mode with it in Markdown for the user to review",
}
"""What the model is told of each mode (the system prompt's mode sentence, and every later note)."""

PERMISSION_MODES: dict[ApprovalMode, str] = {"ask": "default", "auto-edit": "acceptEdits", "yolo": "bypassPermissions",
                                             "read-only": "plan", "plan": "plan"}
"""Each approval mode by the `permission_mode` name Claude Code's hooks are sent (`read-only` as its nearest,
`plan`): what crow's hooks are told of the mode in force."""

CYCLE: tuple[ApprovalMode, ...] = ("ask", "auto-edit", "plan")
"""The modes Shift+Tab cycles through in chat (`yolo` and `read-only` are chosen by name: `/approval`)."""

MODE_NOTE_HEAD = "[crow: the approval mode is now "
"""How a mode note starts: how one is known in a stored history."""


def next_mode(mode: ApprovalMode) -> ApprovalMode:
    """The mode after `mode` in `CYCLE` (`ask` after a mode outside it)."""
    return CYCLE[(CYCLE.index(mode) + 1) % len(CYCLE)] if mode in CYCLE else CYCLE[0]


def mode_note(mode: ApprovalMode) -> dict[str, Any]:
    """The user message telling the model the approval mode is now `mode`: `[crow: the approval mode is now
    auto-edit: file changes … ]`."""
    return {"role": "user", "content": f"{MODE_NOTE_HEAD}{mode}: {SENTENCES[mode]}]"}


def _noted(message: Mapping[str, Any]) -> ApprovalMode | None:
    content = message.get("content")
    if message.get("role") != "user" or not isinstance(content, str) or not content.startswith(MODE_NOTE_HEAD):
        return None
    name = content[len(MODE_NOTE_HEAD):].split(":", 1)[0]
    return next((mode for mode in APPROVAL_MODES if mode == name), None)


def is_mode_note(message: Mapping[str, Any]) -> bool:
    """Whether `message` is a note `mode_note` made (not the user's prompt)."""
    return _noted(message) is not None


def told_mode(history: Sequence[Mapping[str, Any]]) -> ApprovalMode | None:
    """The mode the last mode note of `history` names; None when it has none (the system prompt's holds)."""
    for message in reversed(history):
        if (mode := _noted(message)) is not None:
            return mode
    return None
