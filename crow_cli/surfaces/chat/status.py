"""The chat's status line: one line under the prompt (prompt-toolkit's bottom toolbar).

Built in it reads `model · mode · context · session` (`builtin_line`); `[chat] status_line` in the config
may turn it off or name a command whose output is the line (`status_setting`). A command runs only when it
comes from the person's own config file or from the `.crow/settings.toml` of a folder they trust
(`trust.is_trusted`): a cloned repository's settings run nothing on their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...text import strip_controls
from ...tools.hooks import PROJECT_SETTINGS, kill_group
from ...trust import TrustStore, is_trusted, project_root

__all__ = ["COMMAND_TIMEOUT_S", "StatusInfo", "StatusLine", "builtin_line", "status_setting"]

COMMAND_TIMEOUT_S = 1.0
"""How long a status line command may take before the built-in line stays (and the chat says so, once)."""
MAX_LINE_CHARS = 300
"""A command's line is cut to this many characters (a status line is one row)."""


@dataclass(frozen=True, slots=True)
class StatusInfo:
    """What the status line tells, as the chat knows it when the line is drawn."""

    model: str
    mode: str
    """The approval mode (`ask`, `auto-edit`, `plan`, `yolo`, `read-only`)."""
    session_id: str | None
    """None: nothing is stored yet (a new session before its first message) or the chat is not recorded."""
    cwd: str
    context_tokens: int
    """The conversation's size in tokens as the next request would send it (counted by the server, the rest
    estimated)."""
    context_window: int | None
    """The model's context window in tokens; None when unknown."""
    recorded: bool = True
    """Whether the chat is stored at all (False: `--no-session`, or the store could not be opened)."""

    def as_json(self) -> dict[str, Any]:
        """What a status line command reads on stdin: `{"model", "mode", "session_id", "cwd", "context":
        {"tokens", "window"}}` (`session_id` and `window` may be null)."""
        return {"model": self.model, "mode": self.mode, "session_id": self.session_id, "cwd": self.cwd,
                "context": {"tokens": self.context_tokens, "window": self.context_window}}


def _tokens(count: int) -> str:
    return f"{count / 1000:.1f}k" if count >= 1000 else str(count)


def builtin_line(info: StatusInfo) -> str:
    """`model · mode · 12% of 128k context · session ID` (`3.4k tokens of context` when the window is unknown;
    `new session` before anything is stored, `not recorded` under --no-session); without control characters.

    The model, the approval mode (`plan` while planning), how much of the context window the conversation takes
    (a share of the window when it is known, else its size in tokens) and the session's id.
    """
    if info.context_window:
        context = f"{100 * info.context_tokens // info.context_window}% of {_tokens(info.context_window)} context"
    else:
        context = f"{_tokens(info.context_tokens)} tokens of context"
    session = f"session {info.session_id}" if info.session_id else "new session" if info.recorded else "not recorded"
    return strip_controls(f"{info.model} · {info.mode} · {context} · {session}")


def status_setting(chat: dict[str, Any], config_path: str | None, workspace: Path, *,
                   store: TrustStore | None = None,
                   warn: Callable[[str], None] | None = None) -> tuple[bool | str, str]:
    """The `[chat] status_line` in force and where it was set: a trusted project's `.crow/settings.toml`,
    else the config file's `[chat]` (`chat`), else True (the built-in line).

    The values:

        true (the default)  the built-in line
        false or ""         no status line
        "COMMAND"           a shell command whose first line of stdout is the line (as Claude Code's
                            `statusLine` command): it is given `StatusInfo.as_json()` on stdin, runs in the
                            workspace, at most `COMMAND_TIMEOUT_S`; its output loses its control characters

    A trusted project's `[chat] status_line` replaces the config file's. While a command has not answered yet,
    or when it fails or times out (said once in the chat), the built-in line is shown (`StatusLine`).

    Returns:
        (True: the built-in line, False: none, a string: a command), and the file it came from ("" for the
        default). An untrusted project's command is not taken (`warn` says so); nor is a project file that
        cannot be read (`warn` says why).
    """
    value: bool | str = True
    source = ""
    if "status_line" in chat:
        value, source = _setting(chat["status_line"]), config_path or "config.toml"
    path = project_root(workspace) / PROJECT_SETTINGS
    try:
        project = tomllib.loads(path.read_bytes().decode("utf-8-sig")).get("chat")
    except FileNotFoundError:
        return value, source
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        if warn is not None:
            warn(f"{path} is not read for the status line: {exc}")
        return value, source
    if not isinstance(project, dict) or "status_line" not in project:
        return value, source
    wanted = project["status_line"]
    if not isinstance(wanted, bool | str):
        if warn is not None:
            warn(f"{path}: [chat] status_line must be true, false or a shell command (a string); it is not used")
        return value, source
    if isinstance(wanted, str) and wanted.strip() and not is_trusted(workspace, store):
        if warn is not None:
            warn(f"the status line command in {path} does not run: this folder is not trusted")
        return value, source
    return _setting(wanted), str(path)


def _setting(value: bool | str) -> bool | str:
    return value if isinstance(value, bool) else value if value.strip() else False


class StatusLine:
    """The chat's status line: `text()` is what the bottom toolbar shows now.

    Args:
        setting: True (the built-in line), False (none) or a shell command (`status_setting`).
        info: what the line tells now, asked at each draw and before each command run.
        warn: says a command's failure, once in the chat.
        cwd: where a command runs (the workspace).
    """

    def __init__(self, setting: bool | str, info: Callable[[], StatusInfo], warn: Callable[[str], None],
                 cwd: Path) -> None:
        self.setting = setting
        self.info = info
        self.warn = warn
        self.cwd = cwd
        self._from_command: str | None = None  # the command's last line; None: the built-in line stands
        self._warned = False
        self._running: asyncio.Task[None] | None = None

    @property
    def shown(self) -> bool:
        """Whether there is a status line at all."""
        return self.setting is not False

    def text(self) -> str:
        """The line to draw now: the command's last line, else the built-in one."""
        if self._from_command is not None:
            return self._from_command
        return builtin_line(self.info())

    def update(self, redraw: Callable[[], None] | None = None) -> None:
        """Run the command again in the background (none runs twice at once); `redraw` once its line is in."""
        if not isinstance(self.setting, str) or (self._running is not None and not self._running.done()):
            return
        self._running = asyncio.ensure_future(self._run(self.setting, redraw))

    async def close(self) -> None:
        """Stop a command still running (the chat ends)."""
        if self._running is not None and not self._running.done():
            self._running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._running

    async def _run(self, command: str, redraw: Callable[[], None] | None) -> None:
        line = await self._line(command)
        if line is None:
            self._from_command = None
        elif line != self._from_command:
            self._from_command = line
            if redraw is not None:
                redraw()

    async def _line(self, command: str) -> str | None:
        """The command's first line of stdout, cleaned; None (said once) when it fails or times out."""
        payload = json.dumps(self.info().as_json()).encode()
        try:
            proc = await asyncio.create_subprocess_shell(
                command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL, cwd=self.cwd, start_new_session=True)
        except OSError as exc:
            self._failed(f"it could not start ({exc.strerror or exc})")
            return None
        try:
            async with asyncio.timeout(COMMAND_TIMEOUT_S):
                out, _ = await proc.communicate(payload)
        except TimeoutError:
            kill_group(proc.pid)
            await proc.wait()
            self._failed(f"it took longer than {COMMAND_TIMEOUT_S:g} s")
            return None
        except asyncio.CancelledError:
            kill_group(proc.pid)
            raise
        if proc.returncode:
            self._failed(f"it ended with exit code {proc.returncode}")
            return None
        first = out.decode("utf-8", "replace").split("\n", 1)[0]
        return strip_controls(first.rstrip("\r")).strip()[:MAX_LINE_CHARS]

    def _failed(self, why: str) -> None:
        if not self._warned:
            self._warned = True
            self.warn(f"the status line command is not used: {why}; the built-in line is shown")
