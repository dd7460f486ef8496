"""`crow acp`: crow as an Agent Client Protocol agent, for editors (Zed, JetBrains IDEs, Neovim, Emacs).

    editor ──JSON-RPC on stdin/stdout (acp SDK)──► CrowAgent ──► Session.prompt ──► Driver.run
       ▲                                                                              │ events
       └──────────── session/update, session/request_permission ◄── Session.handle ◄──┘

Protocol version 1 (`acp.PROTOCOL_VERSION`) through the `agent-client-protocol` SDK: it parses and
validates every message (malformed params are a -32602 error, an unknown method -32601) and runs each
request as a task of its own, so `session/cancel` arrives while a prompt runs.

- stdout is the protocol's alone: at start-up the real descriptor 1 is duplicated to a private one and
  descriptor 1 is pointed at stderr, so whatever a tool, plugin, subprocess or library prints lands on
  stderr. Logs go to stderr.
- ACP sessions are crow sessions (the SQLite store): `crow sessions list` shows them and `crow chat
  --resume ID` continues one; `session/load` replays a stored history as `session/update` notifications.
  A session created but never prompted is deleted when the process ends.
- ACP tool-call ids are crow's own, `"{turn}-{index}"` with a turn counter per session (unique within the
  session, also across prompts and after a load); the model's ids go into the history unchanged
  (`../shared/reference/streaming-tool-calls.md` §7).
- When the editor offers `fs/read_text_file` and `fs/write_text_file`, the file tools use them
  (`acp_tools`): unsaved buffers are read, edits show in the editor.
- Session modes are approval policies: `ask`, `auto-edit`, `yolo` (crow's own) and `read-only` (every
  tool that needs approval is refused). "Allow always" / "reject always" hold for the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import stat
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast
from urllib.parse import unquote, urlparse

import acp
from acp import PROTOCOL_VERSION, RequestError
from acp.schema import (
    AgentCapabilities,
    AllowedOutcome,
    AudioContentBlock,
    BlobResourceContents,
    ClientCapabilities,
    EmbeddedResourceContentBlock,
    HttpMcpServer,
    ImageContentBlock,
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    McpCapabilities,
    McpServerStdio,
    NewSessionResponse,
    PermissionOption,
    PromptCapabilities,
    PromptResponse,
    ResourceContentBlock,
    SessionCapabilities,
    SessionListCapabilities,
    SessionMode,
    SessionModeState,
    SetSessionModeResponse,
    StopReason,
    TextContentBlock,
    TextResourceContents,
    ToolCallLocation,
    ToolCallUpdate,
    ToolKind,
)
from acp.schema import SessionInfo as AcpSessionInfo

from .. import __version__
from ..config import Settings
from ..driver import Driver
from ..errors import ConfigError, OutsideWorkspace, SessionError, ToolDenied
from ..events import (
    Event,
    MessageAppended,
    Notice,
    ReasoningDelta,
    RunFinished,
    TextDelta,
    ToolResultReady,
    ToolRunStarted,
    TurnFinished,
    WarningEvent,
)
from ..history import Message, ToolCall, user_message
from ..sessions import SessionInUse, SessionStore
from ..text import strip_controls
from ..tools.approval import Answer, Approvals, check_rule_names, make_approver
from ..tools.context import ToolContext
from ..tools.mcp import McpServers
from ..tools.registry import Tool, ToolRegistry
from ..tools.workspace import resolve_in_workspace
from ..wire.client import ChatClient
from .acp_tools import client_file_tools
from .common import build_client, build_compactor, build_registry, loop_settings, short_json
from .persist import SessionRecorder, open_session

__all__ = ["MODES", "AcpOptions", "CrowAgent", "serve_acp", "tool_kind"]

log = logging.getLogger("crow.acp")

MODES: dict[str, tuple[str, str]] = {
    "ask": ("Ask", "Ask before every tool that changes files or runs commands"),
    "auto-edit": ("Auto-edit", "Edit files in the workspace without asking; ask before commands"),
    "read-only": ("Read-only", "Refuse every tool that changes files or runs commands"),
    "yolo": ("Yolo", "Run every tool without asking (deny rules still apply)"),
}
"""Session mode id → (name, description). Every mode but `read-only` is a crow approval policy."""

_STDIN_LIMIT = 50 * 1024 * 1024
"""Bytes one JSON-RPC line may hold (an embedded file): the SDK's own default."""
_LIST_PAGE = 100


@dataclass(frozen=True)
class AcpOptions:
    """`crow acp`'s own options (the connection and approval ones are in `Settings`)."""

    tools_dirs: tuple[str, ...] = ()
    no_tools: bool = False
    yes: bool = False
    """Start sessions in the `yolo` mode."""
    debug: bool = False


def tool_kind(tool: Tool | None, name: str) -> ToolKind:
    """The ACP `kind` of a tool: read, edit, execute, search, fetch or other.

    The one place that maps it: the tool's own `kind` (`Tool.acp_kind`), search for `search_files`, and
    read for an MCP tool marked read-only.
    """
    if name == "search_files":
        return "search"
    if tool is None:
        return "other"
    if tool.source.startswith("mcp:") and not tool.needs_approval:
        return "read"
    return cast(ToolKind, tool.acp_kind)  # read / edit / execute / other


def _arguments(call: ToolCall) -> dict[str, Any] | None:
    try:
        args = json.loads(call.arguments)
    except ValueError:
        return None
    return args if isinstance(args, dict) else None


def _title(call: ToolCall, args: dict[str, Any] | None) -> str:
    name = strip_controls(call.name) or "(no name)"
    if args is not None and isinstance(args.get("command"), str):
        return f"{name}: {short_json(args['command'], 120)}"
    if args is not None and isinstance(args.get("path"), str):
        return f"{name} {short_json(args['path'], 120)}"
    return f"{name}({short_json(call.arguments)})"


def _locations(args: dict[str, Any] | None, root: Path) -> list[ToolCallLocation] | None:
    if args is None or not isinstance(args.get("path"), str):
        return None
    try:
        path = resolve_in_workspace(args["path"], root)
    except (OutsideWorkspace, OSError, ValueError):
        return None
    line = args.get("start_line")
    return [ToolCallLocation(path=str(path), line=line if isinstance(line, int) and line >= 0 else None)]


def _edit_target(call: ToolCall, args: dict[str, Any] | None, root: Path) -> Path | None:
    """The file an edit (`write_file`, `edit_file`) will change; None for another call or a bad path."""
    if args is None or call.name not in ("write_file", "edit_file") or not isinstance(args.get("path"), str):
        return None
    try:
        return resolve_in_workspace(args["path"], root)
    except (OutsideWorkspace, OSError, ValueError):
        return None


def _diff_of(call: ToolCall, args: dict[str, Any], file: Path, old: str | None) -> Any | None:
    """The `diff` content block an edit of `file` (now `old`, None: absent) will make; None when unknown."""
    if call.name == "write_file":
        new = args.get("content")
    else:
        o, n = args.get("old_string"), args.get("new_string")
        if old is None or not isinstance(o, str) or not isinstance(n, str) or not o or o not in old:
            return None
        new = old.replace(o, n) if args.get("replace_all") else old.replace(o, n, 1)
    return acp.tool_diff_content(str(file), new, old) if isinstance(new, str) else None


def _diff(call: ToolCall, args: dict[str, Any] | None, root: Path) -> Any | None:
    """The `diff` content block (old and new text) an edit will make, from the disk; None when unknown."""
    file = _edit_target(call, args, root)
    if file is None or args is None:
        return None
    try:
        old = file.read_text("utf-8") if file.is_file() else None
    except (OSError, UnicodeDecodeError):
        return None
    return _diff_of(call, args, file, old)


def _stored_diff(call: ToolCall, args: dict[str, Any] | None, root: Path) -> Any | None:
    """The diff of a stored `edit_file` call for a replay: the replaced text and its replacement (the whole
    file before and after is not stored); None for another call."""
    file = _edit_target(call, args, root) if call.name == "edit_file" else None
    if file is None or args is None:
        return None
    old, new = args.get("old_string"), args.get("new_string")
    return acp.tool_diff_content(str(file), new, old) if isinstance(old, str) and isinstance(new, str) else None


def prompt_text(blocks: Sequence[Any]) -> str:
    """The user message of a `session/prompt`: text, resource links and embedded resources, in order.

    A link becomes a line naming it (a `file://` link by its path, for the file tools); an embedded
    text resource is included whole inside `<context uri="…">` tags (a `</context` in its text is
    written `<\\/context`, a `"` in its uri `%22`, so it cannot end the wrapper); a binary one is named only.

    Raises:
        RequestError: -32602 for an image or audio block (not advertised in `promptCapabilities`), or a
            prompt with no text at all.
    """
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, TextContentBlock):
            parts.append(block.text)
        elif isinstance(block, ResourceContentBlock):
            parts.append(f"[{block.name}]({_uri_text(block.uri)})")
        elif isinstance(block, EmbeddedResourceContentBlock):
            resource = block.resource
            if isinstance(resource, TextResourceContents):
                uri = _uri_text(resource.uri).replace('"', "%22")  # neither can end the wrapper early
                body = resource.text.replace("</context", "<\\/context")
                parts.append(f'<context uri="{uri}">\n{body}\n</context>')
            elif isinstance(resource, BlobResourceContents):
                parts.append(f"[attached binary {_uri_text(resource.uri)} ({resource.mime_type or 'unknown type'}), "
                             "not shown]")
        elif isinstance(block, ImageContentBlock | AudioContentBlock):
            raise RequestError(-32602, f"crow accepts text, resource links and embedded resources, not {block.type}")
    text = "\n\n".join(parts)
    if not text.strip():
        raise RequestError(-32602, "the prompt is empty")
    return text


def _uri_text(uri: str) -> str:
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme == "file" else uri


class Session:
    """One ACP session: its history (a stored crow session), tools, approvals, driver and update stream.

    It is the driver's sink: `handle` turns events into `session/update` notifications, queued in
    order and sent by one task, so a slow client never blocks the loop.
    """

    def __init__(self, agent: CrowAgent, session_id: str, cwd: Path, history: list[Message],
                 recorder: SessionRecorder, registry: ToolRegistry | None, client: ChatClient) -> None:
        self.agent = agent
        self.id = session_id
        self.cwd = cwd
        self.history = history
        self.recorder = recorder
        self.registry = registry
        settings = agent.settings
        self.mode = "yolo" if agent.options.yes else (settings.approval or "ask")
        self.approvals: Approvals = make_approver(self.mode if self.mode in ("ask", "auto-edit", "yolo") else "ask",
                                                  allow=settings.allow, deny=settings.deny, ask=self.ask)
        fs = agent.capabilities.fs
        self.editor_reads = registry is not None and bool(fs and fs.read_text_file)
        """The file tools read through the editor: edit diffs come from its buffers."""
        self.rejected: set[str] = set()
        """Tool names the user rejected for the rest of the session ("reject always")."""
        self.context = replace(ToolContext.for_workspace(cwd, secrets=[settings.api_key, *settings.secrets]),
                               backup=recorder.backup)  # files crow's tools change: undo restores them
        self.driver = Driver(client, registry, loop_settings(settings), self.approve, self.context,
                             build_compactor(settings, recorder))  # compaction near the context window
        self.turns = 0
        """Model turns with tool calls so far in this session (the first part of ACP tool-call ids)."""
        self.calls: dict[int, str] = {}
        """ACP tool-call id of each call of the current turn, by the call's position."""
        self.diffs: dict[int, Any] = {}
        self.refused = False
        self.finish_reason = ""
        """The last model turn's finish_reason (`length` → `max_tokens`, `content_filter` → `refusal`)."""
        self.busy = False
        self.idle = asyncio.Event()
        """Set while no prompt runs."""
        self.idle.set()
        self._outbox: asyncio.Queue[Any] = asyncio.Queue()
        self._sender: asyncio.Task[None] | None = None

    # the update stream

    def send(self, update: Any) -> None:
        """Queue one `session/update` (sent in order by the sender task)."""
        self._outbox.put_nowait(update)
        if self._sender is None or self._sender.done():
            self._sender = asyncio.get_running_loop().create_task(self._send_all(), name=f"acp-updates-{self.id}")

    async def _send_all(self) -> None:
        while not self._outbox.empty():
            update = self._outbox.get_nowait()
            try:
                await self.agent.client().session_update(session_id=self.id, update=update)
            except Exception as exc:  # the editor went away or refused it: nothing else to tell
                log.warning("session/update not delivered: %s", exc)
            finally:
                self._outbox.task_done()

    async def flush(self) -> None:
        """Wait until every queued update has been written."""
        await self._outbox.join()

    # modes and approvals

    def modes(self) -> SessionModeState:
        return SessionModeState(current_mode_id=self.mode, available_modes=[
            SessionMode(id=mode, name=name, description=description) for mode, (name, description) in MODES.items()])

    def set_mode(self, mode: str) -> None:
        """Switch the approval policy; "always" answers given so far stay."""
        if mode not in MODES:
            raise RequestError(-32602, f"unknown mode {mode!r} (modes: {', '.join(MODES)})")
        self.mode = mode
        if mode != "read-only":
            self.approvals.policy = replace(self.approvals.policy, mode=mode)

    async def approve(self, call: ToolCall, tool: Tool) -> bool:
        """The driver's approver: the session's mode and rules, then the editor (`session/request_permission`).

        Raises:
            ToolDenied: refused (read-only mode, a deny rule, "reject always", or the user's answer).
        """
        self._refuse(tool)
        if self.editor_reads:
            await self._buffer_diff(call)
        await self.approvals(call, tool)
        self._update(call.index, status="in_progress")
        return True

    async def _buffer_diff(self, call: ToolCall) -> None:
        """The diff of an edit from the editor's buffer (`fs/read_text_file`), sent before it is asked about."""
        args = _arguments(call)
        file = _edit_target(call, args, self.cwd)
        if file is None or args is None:
            return
        try:
            old: str | None = (await self.agent.client().read_text_file(session_id=self.id, path=str(file))).content
        except Exception:  # no such buffer or file (a new file), or the editor refused: as absent
            old = None
        diff = _diff_of(call, args, file, old)
        if diff is not None:
            self.diffs[call.index] = diff
            self._update(call.index, content=[diff])

    def _refuse(self, tool: Tool) -> None:
        """Raise ToolDenied when the read-only mode or a "reject always" refuses `tool`."""
        if self.mode == "read-only":
            raise ToolDenied(f"{tool.name} was not run: the editor's session is in read-only mode. Do not retry it; "
                             "say what you would change instead")
        if tool.name in self.rejected:
            raise ToolDenied(f"the user rejected {tool.name} for this session; it was not run. Do not retry it")

    async def ask(self, call: ToolCall, tool: Tool, preview: str) -> Answer:
        """Ask the editor about one call: allow once / always, reject once / always.

        It runs one at a time (the approvals' lock): an answer or mode change given while this call
        waited its turn ("reject always", a switch to yolo or read-only) decides it without asking.
        """
        self._refuse(tool)
        if self.approvals.policy.allowed_by(tool, None) is not None:  # the mode changed to yolo / auto-edit
            return "yes"
        acp_id = self.calls.get(call.index, "")
        args = _arguments(call)
        diff = self.diffs.get(call.index)
        content = [diff] if diff is not None else [acp.tool_content(acp.text_block(preview))]
        options = [
            PermissionOption(option_id="allow_once", name="Allow", kind="allow_once"),
            PermissionOption(option_id="allow_always", name=f"Always allow {tool.name}", kind="allow_always"),
            PermissionOption(option_id="reject_once", name="Reject", kind="reject_once"),
            PermissionOption(option_id="reject_always", name=f"Always reject {tool.name}", kind="reject_always"),
        ]
        await self.flush()  # the editor knows the call before it is asked about it
        response = await self.agent.client().request_permission(
            session_id=self.id, options=options,
            tool_call=ToolCallUpdate(tool_call_id=acp_id, title=_title(call, args), kind=tool_kind(tool, call.name),
                                     status="pending", content=content, raw_input=args))
        outcome = response.outcome
        choice = outcome.option_id if isinstance(outcome, AllowedOutcome) else "cancelled"
        if choice == "allow_once":
            return "yes"
        if choice == "allow_always":
            return "always"
        if choice == "reject_always":
            self.rejected.add(tool.name)
        return "no"

    # the driver's sink

    def handle(self, event: Event) -> None:
        """Turn one loop event into `session/update` notifications (never blocks)."""
        match event:
            case TextDelta(text=text):
                self.send(acp.update_agent_message_text(text))
            case ReasoningDelta(text=text):
                self.send(acp.update_agent_thought_text(text))
            case TurnFinished(finish_reason=finish, tool_calls=calls):
                self.finish_reason = finish
                if calls:
                    self._announce(calls)
            case ToolRunStarted(call=call):
                tool = self.registry.get(call.name) if self.registry is not None else None
                if tool is None or not tool.needs_approval:  # those go in progress once approved
                    self._update(call.index, status="in_progress")
            case ToolResultReady(result=result):
                diff = self.diffs.get(result.index) if result.ok else None
                output = acp.tool_content(acp.text_block(result.output))
                self._update(result.index, status="completed" if result.ok else "failed",
                             content=[diff, output] if diff is not None else [output])
            case MessageAppended(message=message) if message.get("role") == "assistant":
                self.refused = bool(message.get("refusal"))
            case Notice(code="turn_restarted"):
                self.send(acp.update_agent_message_text("\n\n[crow: the stream broke; the answer starts again]\n\n"))
            case Notice(message=message) | WarningEvent(message=message):
                log.warning("session %s: %s", self.id, message)
            case RunFinished(status="error", error=error):
                log.warning("session %s: %s", self.id, error)

    def _announce(self, calls: Sequence[ToolCall]) -> None:
        self.turns += 1
        self.calls, self.diffs = {}, {}
        for call in calls:
            acp_id = self.calls[call.index] = f"{self.turns}-{call.index}"
            args = _arguments(call)
            tool = self.registry.get(call.name) if self.registry is not None else None
            diff = None if self.editor_reads else _diff(call, args, self.cwd)  # else from the buffer, in approve
            if diff is not None:
                self.diffs[call.index] = diff
            self.send(acp.start_tool_call(acp_id, _title(call, args), kind=tool_kind(tool, call.name),
                                          status="pending", locations=_locations(args, self.cwd),
                                          raw_input=args if args is not None else call.arguments,
                                          content=[diff] if diff is not None else None))

    def _update(self, index: int, **fields: Any) -> None:
        acp_id = self.calls.get(index)
        if acp_id is not None:
            self.send(acp.update_tool_call(acp_id, **fields))

    # prompts and replays

    async def prompt(self, blocks: Sequence[Any]) -> PromptResponse:
        """Run one prompt to its end; every update is sent before the answer.

        Raises:
            RequestError: -32600 while another prompt of the session runs; -32602 for a block crow does not
                accept; -32603 with crow's one-line error when the run fails (401, unknown model,
                unreachable server …); the session stays usable.
        """
        if self.busy:
            raise RequestError(-32600, "a prompt is already running in this session")
        text = prompt_text(blocks)
        self.busy, self.refused, self.finish_reason = True, False, ""
        self.idle.clear()
        try:
            self.history.append(user_message(text))
            finished = await self.driver.run(self.history, self, self.recorder)
            await self.flush()
        finally:
            self.busy = False
            self.idle.set()
        if finished.status == "error":
            raise RequestError(-32603, finished.error or "the run failed", {"exitCode": finished.exit_code})
        reason: StopReason = "refusal" if self.refused or self.finish_reason == "content_filter" else "end_turn"
        if self.finish_reason == "length":
            reason = "max_tokens"
        if finished.status == "max_turns":
            reason = "max_turn_requests"
        elif finished.status == "cancelled":
            reason = "cancelled"
        return PromptResponse(stop_reason=reason)

    async def replay(self) -> None:
        """Send the stored history as `session/update` notifications: messages, tool calls with their outcome."""
        messages = self.history
        for i, message in enumerate(messages):
            role, content = message.get("role"), _content_text(message.get("content"))
            if role == "user" and content:
                self.send(acp.update_user_message_text(content))
            elif role == "assistant":
                reasoning = message.get("reasoning_content") or message.get("reasoning")
                if isinstance(reasoning, str) and reasoning:
                    self.send(acp.update_agent_thought_text(reasoning))
                if content:
                    self.send(acp.update_agent_message_text(content))
                calls = message.get("tool_calls") or []
                if calls:
                    self.turns += 1
                for n, wire in enumerate(calls):
                    result = messages[i + 1 + n] if i + 1 + n < len(messages) else {}
                    fn = wire.get("function") or {}
                    call = ToolCall(wire.get("id") or "", str(fn.get("name") or ""), str(fn.get("arguments") or ""), n)
                    args = _arguments(call)
                    output = _content_text(result.get("content")) if result.get("role") == "tool" else ""
                    tool = self.registry.get(call.name) if self.registry is not None else None
                    failed = output.startswith("Error:")
                    shown = [acp.tool_content(acp.text_block(output))]
                    diff = None if failed else _stored_diff(call, args, self.cwd)
                    self.send(acp.start_tool_call(
                        f"{self.turns}-{n}", _title(call, args), kind=tool_kind(tool, call.name),
                        status="failed" if failed else "completed", locations=_locations(args, self.cwd),
                        raw_input=args if args is not None else call.arguments,
                        content=[diff, *shown] if diff is not None else shown))
        await self.flush()


def _content_text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


class CrowAgent:
    """The ACP agent: sessions, prompts, modes and cancellation over one client connection.

    Args:
        settings: the connection, model, approval policy and rules.
        options: tool loading and the start mode.
        store: the session store (its own connection; closed by `close`).
        registry: the tools every session starts with (None: no tools); a session copies it and adds
            the MCP servers the editor names.
        client: streams the model's turns for every session.
    """

    def __init__(self, settings: Settings, options: AcpOptions, store: SessionStore,
                 registry: ToolRegistry | None, client: ChatClient) -> None:
        self.settings = settings
        self.options = options
        self.store = store
        self.registry = registry
        self.model_client = client
        self.sessions: dict[str, Session] = {}
        self.capabilities = ClientCapabilities()
        self._conn: acp.Client | None = None
        self._exit = contextlib.AsyncExitStack()

    def on_connect(self, conn: acp.Client) -> None:
        self._conn = conn

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
        try:
            info = self.store.create(model=self.settings.model, base_url=self.settings.base_url, cwd=str(root))
        except SessionError as exc:
            raise RequestError(-32603, str(exc)) from None
        history: list[Message] = [{"role": "system", "content": self.settings.system}] if self.settings.system else []
        session = await self._open(info.id, root, history, SessionRecorder(self.store, self.settings, info),
                                   mcp_servers or [])
        return NewSessionResponse(session_id=session.id, modes=session.modes())

    async def load_session(self, cwd: str, session_id: str, mcp_servers: list[Any] | None = None,
                           additional_directories: list[str] | None = None, **kwargs: Any) -> LoadSessionResponse:
        """A stored crow session by its full id, replayed to the editor before the answer."""
        root = _workspace(cwd)
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
        return LoadSessionResponse(modes=session.modes())

    async def list_sessions(self, cwd: str | None = None, cursor: str | None = None,
                            **kwargs: Any) -> ListSessionsResponse:
        """Stored sessions with messages, most recent first (all of crow's, or those of `cwd`), 100 a page."""
        try:
            start = int(cursor or 0)
        except ValueError:
            start = -1
        if start < 0:
            raise RequestError(-32602, f"invalid cursor {cursor!r}")
        folder = None if cwd is None else Path(cwd).resolve()  # a trailing slash or a symlink names the same
        found = [i for i in self.store.recent() if os.path.isabs(i.cwd) and (i.messages or i.id in self.sessions)
                 and (folder is None or Path(i.cwd).resolve() == folder)]
        page = found[start: start + _LIST_PAGE]
        return ListSessionsResponse(
            sessions=[AcpSessionInfo(session_id=i.id, cwd=i.cwd, title=i.title or None,
                                     updated_at=datetime.fromtimestamp(i.updated_at, UTC).isoformat()) for i in page],
            next_cursor=str(start + _LIST_PAGE) if len(found) > start + _LIST_PAGE else None)

    async def set_session_mode(self, session_id: str, mode_id: str, **kwargs: Any) -> SetSessionModeResponse:
        """Switch the session's approval policy (`MODES`)."""
        self._session(session_id).set_mode(mode_id)
        return SetSessionModeResponse()

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
        if self.registry is not None:
            registry = ToolRegistry()
            for tool in client_file_tools(self.registry, self.client(), session_id, self.capabilities.fs):
                registry.register(tool)
            tables = _mcp_tables(mcp_servers)
            if tables:
                try:
                    servers = McpServers(tables, workspace=root)  # stdio servers start in the workspace
                except ConfigError as exc:
                    raise RequestError(-32602, str(exc)) from None
                await self._exit.enter_async_context(servers)
                await servers.register_tools(registry)
                registry.schemas()
                for problem in registry.errors:
                    log.warning("session %s: %s", session_id, problem)
        session = Session(self, session_id, root, history, recorder, registry, self.model_client)
        if keep is not None:
            session.set_mode(keep.mode)
            session.approvals.always |= keep.approvals.always
            session.rejected |= keep.rejected
        self.sessions[session_id] = session
        return session

    async def close(self) -> None:
        """Stop the sessions' MCP servers, delete sessions never prompted, close the store."""
        try:
            await self._exit.aclose()
        finally:
            for session in self.sessions.values():
                if session.recorder.stored == 0 and session.recorder.session_id is not None:
                    with contextlib.suppress(SessionError):
                        self.store.delete(session.recorder.session_id)
            self.store.close()


def _workspace(cwd: str) -> Path:
    path = Path(cwd)
    if not path.is_absolute() or not path.is_dir():
        raise RequestError(-32602, f"cwd {cwd!r} is not an absolute path to an existing folder")
    return path.resolve()


def _mcp_tables(servers: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """The editor's MCP servers as crow `[mcp_servers]` tables (stdio and streamable HTTP)."""
    tables: dict[str, dict[str, Any]] = {}
    for server in servers:
        if isinstance(server, McpServerStdio):
            tables[server.name] = {"command": server.command, "args": list(server.args),
                                   "env": {v.name: v.value for v in server.env}}
        elif isinstance(server, HttpMcpServer):
            if server.headers:
                log.warning("MCP server %r: crow sends no HTTP headers; connecting without them", server.name)
            tables[server.name] = {"url": server.url}
        else:
            log.warning("MCP server %r: transport %r is not supported; skipped", getattr(server, "name", "?"),
                        getattr(server, "type", "?"))
    return tables


def _one_line(record: logging.LogRecord) -> bool:
    """Without --debug a log record is one line: an exception (the SDK logs an unknown notification's
    with its traceback) is reduced to its message."""
    if record.exc_info and record.exc_info[1] is not None:
        text = f"{record.getMessage()}: {record.exc_info[1]}"
        record.msg, record.args, record.exc_info, record.exc_text = " ".join(text.split()), (), None, None
    return True


def _claim_stdout() -> int:
    """Keep the real stdout for the protocol (returned as a new descriptor); descriptor 1 becomes stderr."""
    sys.stdout.flush()
    protocol_fd = os.dup(1)
    os.dup2(2, 1)
    return protocol_fd


async def _streams(protocol_fd: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """asyncio streams on stdin and the protocol descriptor (what `acp.stdio_streams` does on fd 0 and 1)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_STDIN_LIMIT)
    mode = os.fstat(sys.stdin.fileno()).st_mode
    if stat.S_ISCHR(mode) and not sys.stdin.isatty():  # /dev/null: accepted by asyncio, then unpollable
        raise ConfigError("crow acp talks to an editor over pipes on stdin and stdout (stdin is a device)")
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        transport, protocol = await loop.connect_write_pipe(
            lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader()), os.fdopen(protocol_fd, "wb", buffering=0))
    except ValueError as exc:  # a terminal or a regular file, not a pipe
        raise ConfigError(f"crow acp talks to an editor over pipes on stdin and stdout ({exc})") from None
    return reader, asyncio.StreamWriter(transport, protocol, None, loop)


def _line_error(line: bytes) -> dict[str, Any] | None:
    """The JSON-RPC error answering one input line that is not a JSON object (None: pass it on).

    JSON-RPC 2.0 §5.1: -32700 for a line that is not JSON (or not UTF-8), -32600 for JSON that is not a
    request object (`[]`, `42`, `null`, a batch: crow does not take batches), both with id null.
    """
    try:
        message = json.loads(line.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError is one
        return {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}
    if isinstance(message, dict):
        return None
    what = "a batch (not supported)" if isinstance(message, list) and message else "not a JSON-RPC object"
    return {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": f"Invalid Request: {what}"}}


async def _read_line(source: asyncio.StreamReader) -> bytes:
    """One line of any length (b"" at the end of input)."""
    chunks: list[bytes] = []
    while True:
        try:
            chunks.append(await source.readuntil(b"\n"))
            return b"".join(chunks)
        except asyncio.LimitOverrunError as exc:
            chunks.append(await source.readexactly(exc.consumed))
        except asyncio.IncompleteReadError as exc:
            chunks.append(exc.partial)
            return b"".join(chunks)


async def _objects_only(source: asyncio.StreamReader, sink: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        agent: CrowAgent) -> None:
    """Pass the JSON objects of `source` on to `sink` (the SDK's reader); answer every other line here.

    The SDK's reader takes any JSON value for a message (a non-object ends its receive loop, `null` reads
    as the end of input) and drops unparsable lines without an answer. At the end of `source`, or when
    cancelled (SIGTERM, SIGHUP), the running prompts are stopped (`CrowAgent.stop_prompts`) before
    `sink` ends, so their histories close and are stored.
    """
    try:
        while line := await _read_line(source):
            if not line.strip():
                continue
            error = _line_error(line.strip())
            if error is None:
                sink.feed_data(line if line.endswith(b"\n") else line + b"\n")
            else:
                log.debug("answered a malformed line: %s", error["error"]["message"])
                writer.write(json.dumps(error).encode() + b"\n")
    finally:
        try:
            await agent.stop_prompts()
        finally:
            sink.feed_eof()


async def serve_acp(settings: Settings, options: AcpOptions) -> int:
    """Serve one editor on stdin/stdout until it closes stdin; returns the exit code (0).

    Raises:
        ConfigError: stdin/stdout are not pipes, an MCP table is invalid.
        SessionError: the session store cannot be opened.
    """
    protocol_fd = _claim_stdout()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("crow acp: %(levelname)s: %(message)s"))
    if not options.debug:
        handler.addFilter(_one_line)
    logging.basicConfig(level=logging.DEBUG if options.debug else logging.WARNING, handlers=[handler])
    stdin, writer = await _streams(protocol_fd)  # before anything slow: a terminal is refused at once
    registry = None if options.no_tools else build_registry(settings, extra_dirs=options.tools_dirs)
    store = SessionStore()
    async with McpServers({} if registry is None else settings.mcp_servers,
                          errlog=sys.stderr if options.debug else None) as mcp:
        if registry is not None:
            await mcp.register_tools(registry)
            registry.schemas()  # a tool that cannot be described is reported now
            for problem in registry.errors:
                log.warning("%s", problem)
            # a rule naming no tool (a typo) would never apply: ConfigError, exit 2, as crow run
            check_rule_names(settings.allow, settings.deny, [*(t.name for t in registry), *registry.unusable])
        client = build_client(settings)
        agent = CrowAgent(settings, options, store, registry, client)
        reader = asyncio.StreamReader(limit=_STDIN_LIMIT)
        loop = asyncio.get_running_loop()
        objects = loop.create_task(_objects_only(stdin, reader, writer, agent), name="acp-stdin")
        signalled: list[int] = []

        def end(signum: int) -> None:  # as the end of stdin: prompts stop, then the connection closes
            signalled.append(signum)
            objects.cancel()

        for signum in (signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(signum, end, signum)
        try:
            await acp.run_agent(cast(acp.Agent, agent), writer, reader)  # the methods crow serves
        finally:
            for signum in (signal.SIGTERM, signal.SIGHUP):
                loop.remove_signal_handler(signum)
            objects.cancel()
            await agent.close()
            await client.aclose()
    return 128 + signalled[0] if signalled else 0
