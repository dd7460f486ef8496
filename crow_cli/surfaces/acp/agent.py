"""The ACP agent: sessions, prompts, modes and cancellation over one editor connection."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import acp
from acp import PROTOCOL_VERSION, RequestError
from acp.schema import (
    AgentCapabilities,
    ClientCapabilities,
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    McpCapabilities,
    NewSessionResponse,
    PromptCapabilities,
    PromptResponse,
    SessionCapabilities,
    SessionListCapabilities,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
)
from acp.schema import SessionInfo as AcpSessionInfo

from ... import __version__
from ...config import Settings
from ...errors import ConfigError, SessionError
from ...history import Message
from ...paths import resolve_path
from ...sessions import SessionInUse, SessionStore
from ...tools.mcp import McpServers
from ...tools.registry import ToolRegistry
from ..options import SurfaceOptions
from ..persist import SessionRecorder, open_session
from ..runtime import Runtime
from .convert import for_editor, mcp_tables
from .editor_files import client_file_tools
from .session import Session

__all__ = ["CrowAgent"]

log = logging.getLogger("crow.acp")

_LIST_PAGE = 100


class CrowAgent:
    """The ACP agent: sessions, prompts, modes and cancellation over one client connection.

    - stdout is the protocol's alone (`stdout.private_stdout`): the real descriptor 1 is kept for it and
      descriptor 1 points at stderr, so whatever a tool, plugin, subprocess or library prints lands on
      stderr. Logs go to stderr.
    - ACP sessions are crow sessions (the SQLite store): `crow sessions list` shows them and `crow chat
      --resume ID` continues one; `session/load` replays a stored history as `session/update` notifications.
      A session created but never prompted is deleted when the process ends.
    - ACP tool-call ids are crow's own, `"{turn}-{index}"` with a turn counter per session (unique within the
      session, also across prompts and after a load); the model's ids go into the history unchanged
      (`../shared/reference/streaming-tool-calls.md` §7).
    - When the editor offers `fs/read_text_file` and `fs/write_text_file`, the file tools use them
      (`editor_files`): unsaved buffers are read, edits show in the editor.
    - Session modes are approval policies: `ask`, `auto-edit`, `yolo` (crow's own) and `read-only` (every
      tool that needs approval is refused). "Allow always" / "reject always" hold for the session.

    Args:
        settings: the connection, model, approval policy and rules.
        options: tool loading and the start mode (`yes`: sessions start in the `yolo` mode).
        store: the session store (its own connection; closed by `close`).
        runtime: the run's parts: its registry holds the tools every session starts with (None: no tools;
            a session copies it and adds the MCP servers the editor names), its client streams the model's
            turns, and it makes each session's tool context and driver.
        starting: when given, the runtime is not started yet: this task (the configured MCP servers
            starting, `Runtime.start`); session requests wait for it, `initialize` does not.
    """

    def __init__(self, settings: Settings, options: SurfaceOptions, store: SessionStore, runtime: Runtime,
                 starting: asyncio.Future[None] | None = None) -> None:
        self.settings = settings
        self.options = options
        self.store = store
        self.runtime = runtime
        self.starting = starting
        self.sessions: dict[str, Session] = {}
        self.capabilities = ClientCapabilities()
        self._conn: acp.Client | None = None
        self._servers: dict[str, McpServers] = {}
        """The editor's MCP servers of each open session (one set per session: a reload replaces it)."""

    async def ready(self) -> None:
        """Wait for the configured MCP servers to have started (session requests need their tools).

        Raises:
            RequestError: the start failed (-32603; crow then ends the connection, exit 2).
        """
        if self.starting is None:
            return
        try:
            await asyncio.shield(self.starting)
        except Exception as exc:
            raise RequestError(-32603, f"crow could not start: {exc}") from None

    def on_connect(self, conn: acp.Client) -> None:
        self._conn = conn

    @property
    def yes(self) -> bool:
        """`--yes`: sessions start in yolo mode."""
        return self.options.yes

    def client(self) -> acp.Client:
        """The editor's side of the connection."""
        assert self._conn is not None, "used before the connection was made"
        return self._conn

    async def initialize(self, protocol_version: int, client_capabilities: ClientCapabilities | None = None,
                         client_info: Implementation | None = None, **kwargs: Any) -> InitializeResponse:
        """Protocol version 1 whatever the client asked (the only one crow speaks) and crow's capabilities."""
        self.capabilities = client_capabilities or ClientCapabilities()
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                load_session=True,
                prompt_capabilities=PromptCapabilities(embedded_context=True, image=False, audio=False),
                mcp_capabilities=McpCapabilities(http=True, sse=False),
                session_capabilities=SessionCapabilities(list=SessionListCapabilities()),
            ),
            agent_info=Implementation(name="crow", title="crow", version=__version__),
        )

    async def new_session(self, cwd: str, additional_directories: list[str] | None = None,
                          mcp_servers: list[Any] | None = None, **kwargs: Any) -> NewSessionResponse:
        """A new crow session in the store, its workspace `cwd`, with the editor's MCP servers added."""
        root = _workspace(cwd)
        await self.ready()
        try:
            info = self.store.create(model=self.settings.model, base_url=self.settings.base_url, cwd=str(root))
        except SessionError as exc:
            raise RequestError(-32603, str(exc)) from None
        # the project's AGENTS.md files, as crow run and crow chat load them (read off the loop: files on disk)
        settings = await asyncio.to_thread(self.runtime.settings_for, root, self.options.project_instructions)
        history: list[Message] = [{"role": "system", "content": settings.system}] if settings.system else []
        session = await self._open(info.id, root, history, SessionRecorder(self.store, self.settings, info),
                                   mcp_servers or [])
        return NewSessionResponse(session_id=session.id, modes=session.modes(),
                                  config_options=session.config_options())

    async def load_session(self, cwd: str, session_id: str, mcp_servers: list[Any] | None = None,
                           additional_directories: list[str] | None = None, **kwargs: Any) -> LoadSessionResponse:
        """A stored crow session by its full id, replayed to the editor before the answer."""
        root = _workspace(cwd)
        await self.ready()
        session = self.sessions.get(session_id)
        if session is None:
            try:
                if self.store.get(session_id).id != session_id:
                    raise SessionError(f"no session {session_id!r} (give its full id)")
                recorder, history = open_session(self.settings, session_id=session_id, store=self.store)
            except SessionInUse as exc:
                raise RequestError(-32603, str(exc)) from None
            except SessionError as exc:
                raise RequestError(-32602, str(exc)) from None
            session = await self._open(session_id, root, history, recorder, mcp_servers or [])
        elif session.busy:
            raise RequestError(-32600, "a prompt is running in this session")
        else:  # loaded again (perhaps with another cwd or MCP servers): a new context, tools and driver
            session = await self._open(session_id, root, session.history, session.recorder, mcp_servers or [],
                                       keep=session)
        await session.replay()
        return LoadSessionResponse(modes=session.modes(), config_options=session.config_options())

    async def list_sessions(self, cwd: str | None = None, cursor: str | None = None,
                            **kwargs: Any) -> ListSessionsResponse:
        """Stored sessions with messages, most recent first (all of crow's, or those of `cwd`), 100 a page."""
        try:
            start = int(cursor or 0)
        except ValueError:
            start = -1
        if start < 0:
            raise RequestError(-32602, f"invalid cursor {cursor!r}")
        folder = None if cwd is None else _resolved(cwd)  # a trailing slash or a symlink names the same
        found = [i for i in self.store.recent() if os.path.isabs(i.cwd) and (i.messages or i.id in self.sessions)
                 and (folder is None or _resolved(i.cwd) == folder)]
        page = found[start: start + _LIST_PAGE]
        return ListSessionsResponse(
            sessions=[AcpSessionInfo(session_id=i.id, cwd=i.cwd, title=i.title or None,
                                     updated_at=datetime.fromtimestamp(i.updated_at, UTC).isoformat()) for i in page],
            next_cursor=str(start + _LIST_PAGE) if len(found) > start + _LIST_PAGE else None)

    async def set_session_mode(self, session_id: str, mode_id: str, **kwargs: Any) -> SetSessionModeResponse:
        """Switch the session's approval policy (`MODES`)."""
        self._session(session_id).set_mode(mode_id)
        return SetSessionModeResponse()

    async def set_config_option(self, config_id: str, session_id: str, value: str | bool,
                                **kwargs: Any) -> SetSessionConfigOptionResponse:
        """Change a session config option: `sandbox` (`Session.config_options`)."""
        session = self._session(session_id)
        if config_id != "sandbox" or not isinstance(value, str):
            raise RequestError(-32602, f"unknown config option {config_id!r} or value {value!r} (options: sandbox)")
        session.set_sandbox(value)
        return SetSessionConfigOptionResponse(config_options=session.config_options())

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        """Run one prompt in a session (`Session.prompt`)."""
        return await self._session(session_id).prompt(prompt)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        """Stop the session's prompt: the stream and running tools stop, the prompt answers `cancelled`."""
        session = self.sessions.get(session_id)
        if session is not None:
            session.driver.cancel("cancelled by the editor", 130)

    async def stop_prompts(self) -> None:
        """Cancel every running prompt through its driver (tools stop, the history closes and is stored)
        and wait until each has answered."""
        running = [s for s in self.sessions.values() if s.busy]
        for session in running:
            session.driver.cancel("the editor ended crow", 130)
        await asyncio.gather(*(s.idle.wait() for s in running))

    def _session(self, session_id: str) -> Session:
        session = self.sessions.get(session_id)
        if session is None:
            raise RequestError(-32602, f"unknown session {session_id!r} (session/new or session/load first)")
        return session

    async def _open(self, session_id: str, root: Path, history: list[Message], recorder: SessionRecorder,
                    mcp_servers: Sequence[Any], keep: Session | None = None) -> Session:
        """A session with its workspace `root`, the editor's MCP servers added; `keep`: the open session it
        replaces, whose mode and "always" answers carry over."""
        registry = None
        if self.runtime.registry is not None:
            registry = ToolRegistry()
            for tool in client_file_tools(self.runtime.registry, self.client(), session_id, self.capabilities.fs):
                registry.register(tool)
            tables = mcp_tables(mcp_servers)
            servers = None
            if tables:
                try:
                    servers = McpServers(tables, workspace=root)  # stdio servers start in the workspace
                except ConfigError as exc:
                    raise RequestError(-32602, str(exc)) from None
            if (old := self._servers.pop(session_id, None)) is not None:  # the session's servers, replaced
                await old.__aexit__(None, None, None)
            if servers is not None:
                await servers.__aenter__()
                self._servers[session_id] = servers
                await servers.register_tools(registry)
                registry.schemas()
                for problem in registry.errors:
                    log.warning("session %s: %s", session_id, for_editor(problem))
        session = Session(self, session_id, root, history, recorder, registry)
        if keep is not None:
            session.set_mode(keep.mode)
            session.approvals.always |= keep.approvals.always
            session.approvals.never |= keep.approvals.never
        self.sessions[session_id] = session
        return session

    async def close(self) -> None:
        """Stop the sessions' MCP servers, delete sessions never prompted, close the store."""
        try:
            servers, self._servers = list(self._servers.values()), {}
            await asyncio.gather(*(s.__aexit__(None, None, None) for s in servers), return_exceptions=True)
        finally:
            for session in self.sessions.values():
                if session.recorder.stored == 0 and session.recorder.session_id is not None:
                    with contextlib.suppress(SessionError):
                        self.store.delete(session.recorder.session_id)
            self.store.close()


def _resolved(folder: str) -> Path:
    """`folder` with its symlinks followed; as given when they loop (it then names no session's folder)."""
    try:
        return resolve_path(folder)
    except OSError:
        return Path(folder)


def _workspace(cwd: str) -> Path:
    path = Path(cwd)
    if not path.is_absolute() or not path.is_dir():
        raise RequestError(-32602, f"cwd {cwd!r} is not an absolute path to an existing folder")
    return path.resolve()

