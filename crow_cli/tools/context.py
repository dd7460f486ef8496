"""`ToolContext`: what a run hands its tools (the workspace root, the secrets commands must not see, what
`[web]` allows, the run's background commands).

The surface builds one per run (`ToolContext.for_workspace(settings.workspace, secrets=[api_key])`) and
passes it to `dispatch`. For the length of each call, dispatch makes it the *current* context, so a tool
that declares a parameter typed `ToolContext` receives it, and `workspace.resolve_in_workspace(path)`
confines paths to its workspace; outside a call, the current context is the working directory with no
secrets.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from ..errors import ConfigError
from ..history import Message
from ..paths import resolve_path
from .sandbox import Sandbox

if TYPE_CHECKING:
    from ..skills import Skills
    from .hooks import Hooks
    from .jobs import BackgroundShells

__all__ = ["ModeSwitch", "SnapshotHook", "ToolContext", "WebAccess", "current_context", "resolve_workspace",
           "using_context"]


SnapshotHook = Callable[[Literal["before", "after"]], Awaitable[None]]
"""Awaited by the orchestrator before and after each tool call that may write (`approval.may_write`), on the
loop's thread, so the surface keeps the workspace's files as the call found and left them (`crow_cli.rewind`);
it never raises."""


@dataclass(frozen=True, slots=True)
class WebAccess:
    """What the configuration's `[web]` table lets the web tools do (`tools.web`)."""

    allow_hosts: tuple[str, ...] = ()
    """Hosts `web_fetch` fetches without asking, whatever the approval policy, even when they are loopback,
    private or link-local addresses (`localhost`, `10.0.0.7`, `*.corp.example`)."""
    search_url: str | None = None
    """A SearXNG instance (its JSON API) that `web_search` asks; None: no `web_search` tool."""


class ModeSwitch(Protocol):
    """What the built-in `exit_plan_mode` asks of the run's approvals (`approval.Approvals` is one)."""

    async def exit_plan(self, plan: str) -> str:
        """Hand `plan` over (the person reviews it, or the run ends with it); the tool result's text.

        Raises:
            ToolDenied: not planning, or the person wants the model to keep planning (their note says why).
        """
        ...


@dataclass(frozen=True)
class ToolContext:
    """The state a run shares with its tools, passed explicitly to `dispatch`."""

    workspace: Path = field(default_factory=lambda: Path.cwd().resolve())
    """The resolved folder file tools are confined to and commands run in."""
    secrets: tuple[str, ...] = ()
    """Values (API keys) that `run_shell` keeps out of commands' environment and masks in their output."""
    sandbox: Sandbox = field(default_factory=Sandbox)
    """How `run_shell` confines commands (`tools.sandbox`; the default: `off`). The surfaces set the
    `sandbox` setting's mode here; approval asks about every command when it cannot be had."""
    backup: Callable[[Path, bytes | None, str], None] | None = None
    """Called by crow's file tools before they write a file, with the file, its content (None: the file
    is new) and the SHA-256 (hex) of what they are about to write, so that `/undo` can restore it and
    tell whether it changed since (`tools.backup`); None keeps nothing."""
    snapshot: SnapshotHook | None = None
    """Takes a snapshot of the workspace before and after each tool call that may write, for `/rewind`
    (`SnapshotHook`); None takes none."""
    skills: Skills | None = None
    """The run's skills (`crow_cli.skills`): what the `skill` tool loads. `read_file` and `list_directory` may read
    their folders outside the workspace too (never write them); None: no skills."""
    hooks: Hooks | None = None
    """The run's lifecycle hooks (`tools.hooks`): the orchestrator fires `PreToolUse`/`PostToolUse`, the loop
    `Stop`, the `task` tool `SubagentStop`; None: no hooks."""
    keep_transcript: Callable[[str, int, str, list[Message]], None] | None = None
    """Called by the `task` tool when its subagent ends, with the parent call's id and position, the agent's
    name and the child's whole history, to keep it with the session (`SessionRecorder.keep_transcript`);
    None keeps nothing."""
    web: WebAccess = field(default_factory=WebAccess)
    """What `[web]` in the configuration allows the web tools (default: nothing without asking)."""
    background: BackgroundShells | None = None
    """The run's commands that keep running (`run_shell` with `background`), stopped when the run ends;
    None: no command may run in the background here."""
    modes: ModeSwitch | None = None
    """The run's approvals while a call runs (the orchestrator sets it): how `exit_plan_mode` hands over
    its plan; None when nobody decides about calls."""

    @classmethod
    def for_workspace(cls, path: str | os.PathLike[str] | None = None, *,
                      secrets: Iterable[str | None] = (), sandbox: Sandbox | None = None) -> ToolContext:
        """A context for the folder `path` (None: the working directory), keeping the non-blank `secrets`,
        commands confined by `sandbox` (None: not confined).

        Raises:
            ConfigError: `path` does not exist or is not a folder.
        """
        kept = tuple(dict.fromkeys(s for s in secrets if isinstance(s, str) and s.strip()))
        return cls(resolve_workspace(path), kept, sandbox or Sandbox())

    @staticmethod
    def current() -> ToolContext:
        """The context of the tool call running in this task or thread (see `current_context`)."""
        return current_context()


def resolve_workspace(path: str | os.PathLike[str] | None = None) -> Path:
    """The workspace folder `path` names (`~` expanded, symlinks resolved; None: the working directory), as a
    run's tool context holds it: what a command needs of the workspace before any run is assembled.

    Raises:
        ConfigError: `path` does not exist or is not a folder.
    """
    if path is None:
        return Path.cwd().resolve()
    try:
        root = resolve_path(Path(path).expanduser())
    except OSError as exc:  # a symlink loop
        raise ConfigError(f"workspace {os.fspath(path)!r} is {exc.strerror or exc}") from exc
    if not root.is_dir():
        raise ConfigError(f"workspace {os.fspath(path)!r} is not an existing folder")
    return root


_CURRENT: contextvars.ContextVar[ToolContext | None] = contextvars.ContextVar("crow_tool_context", default=None)


def current_context() -> ToolContext:
    """The context of the tool call running in this task or thread; outside a call, the working directory."""
    context = _CURRENT.get()
    return context if context is not None else ToolContext()


@contextlib.contextmanager
def using_context(context: ToolContext) -> Iterator[ToolContext]:
    """Make `context` current inside the `with` block (dispatch does this around each call; tests too)."""
    token = _CURRENT.set(context)
    try:
        yield context
    finally:
        _CURRENT.reset(token)
