"""`crow mcp`: crow as a Model Context Protocol server on stdin/stdout, for other agents and MCP clients.

    client ──JSON-RPC lines on stdin/stdout──► mcp SDK `Server` (lowlevel) ──► McpSurface.call_tool
       ▲                                                                           │ one crow run
       └── notifications/progress, elicitation/create, the tool's result ◄── Run (the driver's sink)

Two tools, named and shaped as Codex's `codex` / `codex-reply` (`codex mcp-server`) so a client that
knows one knows the other: `crow_run` runs a new session to its end, `crow_reply` continues one (the
session store `crow run -c` uses). How a call runs, reports, is cancelled and asks is told at `McpSurface`.
Protocol: https://modelcontextprotocol.io/specification/2025-11-25 (tools, progress, cancellation,
elicitation); the SDK opens the era the client asks for.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .. import __version__
from ..config import Settings
from ..driver import Driver, editor_interrupts
from ..errors import SessionError
from ..events import Event, Notice, RunFinished, ToolResultReady, ToolRunStarted, TurnFinished, WarningEvent
from ..history import Message, user_message
from ..modes import APPROVAL_ORDER, SANDBOX_ORDER, ApprovalMode, SandboxMode
from ..sessions import SessionStore
from ..stdout import private_stdout
from ..text import strip_controls
from ..tools.approval import Choice, Policy, Question
from ..tools.mcp import end_task
from .approve import approver_for
from .common import build_client, short_json
from .options import SurfaceOptions
from .persist import RunModes, SessionRecorder, open_session, settle_modes
from .runtime import Runtime, assemble_driver
from .stdio import LineTooLong, ProtocolOutput, log_handler, pipes, read_line, too_long_answer

__all__ = ["McpSurface", "ReplyArgs", "RunArgs", "no_looser", "serve_mcp", "tool_list"]

log = logging.getLogger("crow.mcp")


class RunArgs(BaseModel):
    """`crow_run`'s arguments (Codex's `codex` tool: `prompt`, `cwd`, `model`, `approval-policy`, `sandbox`)."""

    model_config = ConfigDict(extra="forbid")
    prompt: str = Field(min_length=1, description="The task for crow: what the first user message says.")
    cwd: str | None = Field(None, description="The session's workspace, an absolute path to a folder "
                            "(default: the server's workspace).")
    model: str | None = Field(None, description="The model (default: the server's).")
    approval: ApprovalMode | None = Field(
        None, description="Approval policy for tool calls: read-only (refuse every call that changes files or runs "
        "commands), plan (reads and read-only commands only; the answer is the plan the model hands over), ask "
        "(ask the client), auto-edit (file edits approved) or yolo; never looser than the server's.")
    sandbox: SandboxMode | None = Field(
        None, description="How commands are confined; never looser than the server's.")


class ReplyArgs(BaseModel):
    """`crow_reply`'s arguments (Codex's `codex-reply`: a session id and the next prompt)."""

    model_config = ConfigDict(extra="forbid")
    session_id: str = Field(min_length=1, description="The session_id a crow_run (or crow run) returned.")
    prompt: str = Field(min_length=1, description="The next user message.")
    approval: ApprovalMode | None = Field(
        None, description="Approval policy for this reply and the session from now on (default: the session's); "
        "never looser than the server's.")
    sandbox: SandboxMode | None = Field(
        None, description="How commands are confined for this reply and the session from now on (default: the "
        "session's); never looser than the server's.")


_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "session_id": {"type": ["string", "null"], "description": "Continue it with crow_reply."},
        "status": {"type": "string", "description": "completed, max_turns, cancelled or error."},
        "turns": {"type": "integer", "description": "Model turns of this call."},
        "usage": {"type": "object", "description": "Tokens of this call, summed over its turns."},
    },
    "required": ["session_id", "status", "turns", "usage"],
}

_APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string", "title": "Run it?", "enum": ["yes", "no", "always"],
                              "enumNames": ["Yes, once", "No", "Always for this tool"]}},
    "required": ["answer"],
}
_ESCALATION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string", "title": "Run it outside the sandbox once?", "enum": ["yes", "no"],
                              "enumNames": ["Yes, this once", "No"]}},
    "required": ["answer"],
}


def tool_list() -> list[types.Tool]:
    """The two tools crow serves, their input schemas from the argument models."""
    return [
        types.Tool(name="crow_run", title="Run crow",
                   description="Start a crow session: crow works on the prompt with its tools (files, commands) "
                   "until it has an answer, and returns it with the session_id to continue with crow_reply.",
                   input_schema=RunArgs.model_json_schema(), output_schema=_OUTPUT_SCHEMA),
        types.Tool(name="crow_reply", title="Continue a crow session",
                   description="Continue a crow session with the next prompt (the session keeps its history).",
                   input_schema=ReplyArgs.model_json_schema(), output_schema=_OUTPUT_SCHEMA),
    ]


_Mode = TypeVar("_Mode", bound=str)


def no_looser(asked: _Mode | None, allowed: _Mode, order: tuple[_Mode, ...], what: str) -> _Mode:
    """`asked` when it is at most as loose as `allowed` in `order` (`modes.APPROVAL_ORDER`, `SANDBOX_ORDER`:
    strictest first; None: `allowed`).

    Raises:
        MCPError: INVALID_PARAMS when `asked` is looser.
    """
    if asked is None:
        return allowed
    if order.index(asked) > order.index(allowed):
        raise MCPError(types.INVALID_PARAMS, f"{what} {asked!r} is looser than the server's {allowed!r}")
    return asked


def _add_usage(total: dict[str, int], usage: dict[str, Any] | None) -> None:
    for key, value in (usage or {}).items():
        if isinstance(value, int) and not isinstance(value, bool):
            total[key] = total.get(key, 0) + value


class Run:
    """One call's crow run: the driver's sink, turning tool activity into progress notifications.

    `handle` never blocks: progress messages are queued and sent in order by one task.
    """

    def __init__(self, ctx: ServerRequestContext[Any]) -> None:
        self.ctx = ctx
        self.usage: dict[str, int] = {}
        self._progress = 0
        self._outbox: asyncio.Queue[str] = asyncio.Queue()
        self._sender: asyncio.Task[None] | None = None

    def say(self, message: str) -> None:
        """Queue one progress message."""
        self._outbox.put_nowait(strip_controls(message))
        if self._sender is None or self._sender.done():
            self._sender = asyncio.get_running_loop().create_task(self._send_all(), name="mcp-progress")

    async def _send_all(self) -> None:
        while not self._outbox.empty():
            message = self._outbox.get_nowait()
            self._progress += 1
            try:
                await self.ctx.session.report_progress(self._progress, None, message)
            except Exception as exc:  # the client went away: nobody left to show it to
                log.debug("progress not delivered: %s", exc)
            finally:
                self._outbox.task_done()

    async def flush(self) -> None:
        """Wait until every queued progress message has been written."""
        await self._outbox.join()

    def handle(self, event: Event) -> None:
        """Tool calls and their outcomes, warnings and notices as progress; usage summed; errors logged."""
        match event:
            case ToolRunStarted(call=call):
                self.say(f"→ {call.name}({short_json(call.arguments)})")
            case ToolResultReady(result=r):
                detail = "" if r.ok else f": {short_json(r.output, 160)}"
                self.say(f"{'✓' if r.ok else '✗'} {r.name} {r.outcome} {r.duration_s:.2f}s{detail}")
            case TurnFinished(usage=usage):
                _add_usage(self.usage, usage)
            case WarningEvent(message=message):
                log.warning("%s", strip_controls(message))
                self.say(f"warning: {message}")
            case Notice(message=message):  # a retry, a compaction, a stream that starts again
                self.say(message)
            case RunFinished(status="error", error=error):
                log.warning("%s", strip_controls(error or "the run failed"))

    async def ask(self, question: Question) -> Choice:
        """Ask the client (`elicitation/create`, form mode) whether the call may run; anything but an
        accepted yes / always is no."""
        tool = question.tool
        unconfined = question.outside
        message = f"crow wants to run {tool.name}:\n{question.preview}"
        await self.flush()  # the client has shown the call before it is asked about it
        try:
            result = await self.ctx.session.elicit_form(message, _ESCALATION_SCHEMA if unconfined
                                                        else _APPROVAL_SCHEMA, related_request_id=self.ctx.request_id)
        except Exception as exc:  # refused or failed: nobody said yes
            log.warning("the approval request for %s failed: %s", tool.name, exc)
            return "no"
        answer = (result.content or {}).get("answer") if result.action == "accept" else None
        if answer == "always" and not unconfined:
            return "always"
        return "yes" if answer in ("yes", "always") else "no"


class McpSurface:
    """The MCP server's handlers: list the tools, run one call to its end.

    The result is the final answer as text content, with `structuredContent` `{session_id, status, turns, usage}`.

    - Each call is its own crow run, in its own session and driver, so several calls run concurrently.
    - While a call runs, each tool call and its outcome is a `notifications/progress` with the client's
      progress token (none is sent when the client gave none: the SDK's `report_progress`).
    - `notifications/cancelled` cancels the handler (the SDK's interrupt mode); the run is then stopped as
      Ctrl-C stops `crow run` (`Driver.cancel`): running tools are cancelled, the history is closed and
      stored, and, as the spec says, the cancelled request gets no answer.
    - A call that needs approval is asked of the client through `elicitation/create` where the client
      declared the elicitation capability; otherwise nobody can answer and it is denied, as in `crow run`
      without a terminal. A call's `approval` and `sandbox` may only be stricter than the server's; they are
      stored with the session, and a reply keeps them (`persist.settle_modes`) unless it names its own.
    - A reply runs in its session's folder; a folder that is gone is an error naming it.
    - stdout carries only the protocol (`stdout.private_stdout`); logs go to stderr. Signals follow
      `driver.editor_interrupts`: running calls are stopped and stored, then the server ends (128 + n).

    Args:
        runtime: the started runtime (tools, MCP servers, client) every call shares.
        options: the server's flags (`yes`: its policy is yolo, calls may still ask for a stricter one).
    """

    def __init__(self, runtime: Runtime, options: SurfaceOptions) -> None:
        self.runtime = runtime
        self.options = options
        settings = runtime.settings
        self.policy: Policy = runtime.start_mode
        self.sandbox: SandboxMode = settings.sandbox
        self.starting: asyncio.Future[None] | None = None
        """The runtime's start (MCP servers, the client) while it may still run; calls wait for it."""
        self.running: set[asyncio.Task[Any]] = set()
        self.cancels: dict[asyncio.Task[Any], Driver] = {}
        """The driver of each running call's task (what a signal stops)."""
        self.server: Server[Any] = Server("crow", version=__version__, title="crow",
                                          instructions="crow_run hands a task to crow, a coding agent; "
                                          "crow_reply continues the session it started.",
                                          on_list_tools=self.list_tools, on_call_tool=self.call_tool)

    async def list_tools(self, ctx: ServerRequestContext[Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tool_list())

    async def call_tool(self, ctx: ServerRequestContext[Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        """Run `crow_run` or `crow_reply` to its end.

        Raises:
            MCPError: INVALID_PARAMS for an unknown tool, arguments that do not fit its schema, a looser
                approval or sandbox, an unknown session or a folder that is not one; the server goes on.
        """
        if self.starting is not None:
            try:
                await asyncio.shield(self.starting)
            except Exception as exc:  # the connection ends now (exit 2), this call is answered first
                raise MCPError(types.INTERNAL_ERROR, f"crow could not start: {exc}") from None
        try:
            if params.name == "crow_run":
                return await self._run(ctx, RunArgs.model_validate(params.arguments or {}))
            if params.name == "crow_reply":
                return await self._reply(ctx, ReplyArgs.model_validate(params.arguments or {}))
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors())
            raise MCPError(types.INVALID_PARAMS, f"invalid arguments for {params.name}: {problems}") from None
        raise MCPError(types.INVALID_PARAMS, f"unknown tool {params.name!r} (tools: crow_run, crow_reply)")

    async def _run(self, ctx: ServerRequestContext[Any], args: RunArgs) -> types.CallToolResult:
        policy = no_looser(args.approval, self.policy, APPROVAL_ORDER, "approval")
        sandbox = no_looser(args.sandbox, self.sandbox, SANDBOX_ORDER, "sandbox")
        root = self.runtime.workspace if args.cwd is None else _folder(args.cwd)
        settings = self.runtime.settings
        if root != self.runtime.workspace:  # that folder's AGENTS.md files (read off the loop: files on disk)
            settings = await asyncio.to_thread(self.runtime.settings_for, root)
        if args.model:
            settings = replace(settings, model=args.model)
        try:  # the session's folder is its workspace: crow_reply and `crow run -c` there continue in it
            store = SessionStore()
        except SessionError as exc:
            raise MCPError(types.INTERNAL_ERROR, str(exc)) from None
        try:
            info = store.create(model=settings.model, base_url=settings.base_url, cwd=str(root), approval=policy,
                                sandbox=sandbox)
        except SessionError as exc:
            store.close()
            raise MCPError(types.INTERNAL_ERROR, str(exc)) from None
        history: list[Message] = [{"role": "system", "content": settings.system}] if settings.system else []
        recorder = SessionRecorder(store, settings, info)
        # the call's modes, recorded with the session and told in its prompt (built with the server's)
        modes = settle_modes(recorder, history, RunModes(policy, sandbox),
                             network=settings.sandbox_network)
        return await self._drive(ctx, settings, root, recorder, history, args.prompt, modes, new=True)

    async def _reply(self, ctx: ServerRequestContext[Any], args: ReplyArgs) -> types.CallToolResult:
        settings = self.runtime.settings
        try:
            recorder, history = open_session(settings, session_id=args.session_id)
        except SessionError as exc:  # no such session, or one in use (a call still running it)
            raise MCPError(types.INVALID_PARAMS, str(exc)) from None
        try:
            policy = no_looser(args.approval, self.policy, APPROVAL_ORDER, "approval")
            sandbox = no_looser(args.sandbox, self.sandbox, SANDBOX_ORDER, "sandbox")
            info = recorder.info
            folder = Path(info.cwd) if info is not None and info.cwd else None
            if folder is not None and not (folder.is_absolute() and folder.is_dir()):
                # never the server's folder in its place: the reply would write into another project
                raise MCPError(types.INVALID_PARAMS, f"session {args.session_id}'s folder {str(folder)!r} is gone "
                               "(moved or deleted): it cannot be continued there")
        except MCPError:
            recorder.store.close()  # the session is free again
            raise
        root = folder if folder is not None else self.runtime.workspace
        # the session keeps the modes it ran under: a reply never loosens them unless it names them
        given = frozenset(name for name, asked in (("approval", args.approval), ("sandbox", args.sandbox)) if asked)
        modes = settle_modes(recorder, history, RunModes(policy, sandbox), given=given,
                             network=settings.sandbox_network)
        return await self._drive(ctx, settings, root, recorder, history, args.prompt, modes)

    async def _drive(self, ctx: ServerRequestContext[Any], settings: Settings, root: Path, recorder: SessionRecorder,
                     history: list[Message], prompt: str, modes: RunModes, *,
                     new: bool = False) -> types.CallToolResult:
        run = Run(ctx)
        client = None
        try:
            caps = ctx.session.client_capabilities
            elicitation = caps.elicitation if caps is not None else None  # `{}` means form mode (the spec)
            can_ask = elicitation is not None and (elicitation.form is not None or elicitation.url is None)
            approver = approver_for(settings, mode=modes.approval, ask=run.ask if can_ask else None)
            # each call its own folder, sandbox mode and session (its hooks told of it); no background commands
            context = replace(self.runtime.context_for(root, backup=recorder.backup, sandbox=modes.sandbox,
                                                       session_id=recorder.session_id or "", background=False),
                              keep_transcript=recorder.keep_transcript)
            if settings.model != self.runtime.settings.model:
                client = build_client(settings, trace=self.options.debug)
            driver = assemble_driver(settings, client or self.runtime.client, self.runtime.registry, approver,
                                     context, recorder, trace=self.options.debug)
            history.append(user_message(prompt))
            task = asyncio.ensure_future(driver.run(history, run, recorder))
            self.running.add(task)
            self.cancels[task] = driver
            try:
                finished = await _unless_cancelled(task, driver)
            finally:
                self.running.discard(task)
                self.cancels.pop(task, None)
            await run.flush()
            if new and finished.status == "error" and not any(m.get("role") in ("assistant", "tool")
                                                              for m in history):
                recorder.discard()  # unreachable, 401, 404: nothing worth continuing was said (as crow run)
        finally:
            recorder.store.close()  # the session is free again: crow_reply or crow run -c may continue it
            if client is not None:
                await client.aclose()
        structured = {"session_id": recorder.session_id, "status": finished.status, "turns": finished.turns,
                      "usage": run.usage}
        text = finished.final_text
        if finished.status != "completed" and finished.error:
            text = f"{text}\n\n[crow: {finished.error}]" if text else f"crow: {finished.error}"
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                    structured_content=structured, is_error=finished.status == "error")

    async def stop_all(self, reason: str) -> None:
        """Stop every running call as Ctrl-C does and wait until each has stored its session."""
        for driver in list(self.cancels.values()):
            driver.cancel(reason, 130)
        running = list(self.running)
        if running:
            await asyncio.wait(running)


async def _unless_cancelled(task: asyncio.Future[RunFinished], driver: Driver) -> RunFinished:
    """`task`'s outcome; when the caller is cancelled (the client's `notifications/cancelled`), the run is
    stopped as Ctrl-C stops it and waited for (its history closed and stored) before the cancellation goes on.

    The SDK's cancel scope cancels the caller again at every await until it leaves, so the run is awaited
    behind a shield each time."""
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        log.debug("the client cancelled a call: stopping its run")
        while not task.done():
            driver.cancel("cancelled by the MCP client", 130)  # False before the run began: tried again
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(task)
        raise


def _folder(cwd: str) -> Path:
    path = Path(cwd)
    if not path.is_absolute() or not path.is_dir():
        raise MCPError(types.INVALID_PARAMS, f"cwd {cwd!r} is not an absolute path to an existing folder")
    return path.resolve()


async def serve_mcp(settings: Settings, options: SurfaceOptions) -> int:
    """Serve one MCP client on stdin/stdout until it closes stdin; the exit code (0, or 128 + n after a signal).

    Raises:
        ConfigError: stdin or stdout is a regular file or a device; a rule names no tool; an MCP table is
            invalid.
        OSError: the protocol could not be written (the client gone), once the sessions are stored.
    """
    handler = log_handler()  # `crow: warning: …`, as run and chat say it
    logging.basicConfig(level=logging.DEBUG if options.debug else logging.WARNING, handlers=[handler])
    with private_stdout() as protocol:  # stdout is the protocol's alone: whatever else prints goes to stderr
        reader, writer, _output = await pipes(protocol.fileno(), "crow mcp talks to an MCP client")
        runtime = Runtime(settings, options)
        async with runtime:
            surface = McpSurface(runtime, options)
            with editor_interrupts() as interrupts:
                serving = asyncio.ensure_future(_serve(surface.server, reader, writer))

                async def start() -> None:  # MCP servers start while `initialize` is answered; calls wait for it
                    for problem in await runtime.start():
                        log.warning("%s", problem)

                surface.starting = starting = asyncio.ensure_future(start())
                # a failed start (a rule naming no tool: ConfigError) ends the connection, exit 2 as crow run
                starting.add_done_callback(lambda task: task.cancelled() or task.exception() is None
                                           or serving.cancel())
                ending: list[asyncio.Task[None]] = []

                def on_signal(_signum: int) -> bool:
                    async def end() -> None:  # the runs stop and are stored, then the connection ends
                        await surface.stop_all("crow mcp was ended")
                        serving.cancel()

                    ending.append(asyncio.get_running_loop().create_task(end(), name="mcp-end"))
                    return True

                lost = None
                with interrupts.stopping(on_signal):
                    try:
                        with contextlib.suppress(asyncio.CancelledError):
                            lost = await serving
                        await surface.stop_all("the client closed the connection")
                    finally:
                        await end_task(starting)  # its outcome is read below
            if not starting.cancelled() and (failure := starting.exception()) is not None:
                raise failure
            with contextlib.suppress(OSError):
                await writer.drain()
    if lost is not None:  # `cli.main` says it as for every command: cannot write the output
        raise lost
    return interrupts.exit_code


async def _serve(server: Server[Any], reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> OSError | None:
    """Run `server` on JSON-RPC lines: read from `reader` until its end, written to `writer`; the error that
    ended it when `writer` could not be written (None at the end of `reader`).

    The SDK's own `stdio_server` reads stdin in a worker thread, which a signal cannot stop; these
    asyncio pipes end at once."""
    read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](16)

    async def read() -> None:
        async with read_send:
            while True:
                try:
                    line = await read_line(reader)
                except LineTooLong as exc:  # dropped as it arrived, answered once (JSON-RPC 2.0 §5.1)
                    log.debug("answered a line over the limit: %s", exc)
                    writer.write(too_long_answer(exc.limit))
                    continue
                if not line:
                    break
                if not line.strip():
                    continue
                try:
                    message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                except ValueError as exc:  # answered here (JSON-RPC 2.0 §5.1): the SDK only logs it
                    log.debug("answered a malformed line: %s", exc)
                    writer.write(_malformed(line))
                    continue
                await read_send.send(SessionMessage(message))

    lost: list[OSError] = []

    async def write() -> None:
        async with write_receive:
            async for item in write_receive:
                writer.write(item.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n")
                try:
                    await writer.drain()
                except OSError:  # the client is gone (or the disk full): nobody reads what comes next
                    protocol = writer.transport.get_protocol()
                    lost.append(protocol.failure() if isinstance(protocol, ProtocolOutput) else BrokenPipeError(
                        errno.EPIPE, os.strerror(errno.EPIPE)))
                    group.cancel_scope.cancel()
                    return

    async with anyio.create_task_group() as group:
        group.start_soon(read)
        group.start_soon(write)
        await server.run(read_receive, write_send, server.create_initialization_options())
        group.cancel_scope.cancel()
    return lost[0] if lost else None


def _malformed(line: bytes) -> bytes:
    """The JSON-RPC error line answering `line`, which is no JSON-RPC message: -32700 when it is not JSON,
    else -32600 (with its id when it has a usable one)."""
    try:
        value = json.loads(line)
    except ValueError:
        code, message, request_id = types.PARSE_ERROR, "Parse error: the line is not JSON", None
    else:
        request_id = value.get("id") if isinstance(value, dict) else None
        if isinstance(request_id, bool) or not isinstance(request_id, str | int):
            request_id = None
        code, message = types.INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message"
    answer = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    return json.dumps(answer).encode() + b"\n"
