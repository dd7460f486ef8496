"""MCP servers as a plugin source, through the official `mcp` package (imported only when used).

Config: `[mcp_servers.NAME]` tables (`parse_mcp_servers`; docs/mcp.md tells them to users). Their tools join
the registry with `source="mcp:NAME"`; a tool whose name is taken is registered as `NAME_tool`, with a
warning. Arguments are checked by the server. Tools the server marks read-only (`readOnlyHint`) run in
parallel without approval; the others need approval and run exclusively. `McpServers` owns the servers'
lifecycle; every problem is one line in `registry.errors` and the other servers and tools keep working.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import contextvars
import json
import logging
import re
import sys
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, TypeVar

from ..errors import ConfigError, ToolError
from ..images import Image, image_type
from ..wire.names import wire_name
from .mcp_transport import StderrTail, TransportWatch
from .registry import ToolRegistry
from .tool import Tool

__all__ = ["McpServerConfig", "McpServers", "cancellable", "end_task", "parse_mcp_servers"]

_STOP_TIMEOUT_S = 10.0
_PAGE_LIMIT = 100
"""tools/list pages read per server at most (a server whose cursor never ends cannot hang the start)."""
_RECANCEL_S = 0.05
_SHUTDOWN_GRACE_S = 4.0
"""How long a cancelled connection gets to stop its server (the stdio client's 2 s, then its kill) before the
cancellation is repeated."""
"""How often a cancellation the MCP client absorbed is made again (`end_task`)."""
_T = TypeVar("_T")
OPENAI_TOOL_LIMIT = 128
"""The most tools OpenAI's Chat Completions accepts in one request."""
TOOL_CHARS = 32_768
"""Characters of one tool's definition as listed (name, description, schemas) at most: it goes with every
request, so a larger one (a 2 MB description) is dropped rather than sent again and again."""


@dataclass(frozen=True)
class McpServerConfig:
    """One `[mcp_servers.NAME]` table, checked."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    startup_timeout_s: float = 30.0


def parse_mcp_servers(tables: Mapping[str, Mapping[str, Any]]) -> list[McpServerConfig]:
    """Check `[mcp_servers.*]` tables.

    A table has `command`, `args`, `env`, `cwd` (stdio: the server is started as a subprocess, in the workspace
    root unless `cwd` says otherwise) or `url` (streamable HTTP), plus an optional `startup_timeout` (seconds,
    default 30).

    Raises:
        ConfigError: a table with neither or both of `command` and `url`, an unknown key, a wrong type, an
            empty `command` or `cwd`, a `url` that is not http(s), a `startup_timeout` that is not > 0.
    """
    known = {"command", "args", "env", "cwd", "url", "startup_timeout"}
    out = []
    for name, table in tables.items():
        where = f"[mcp_servers.{name}]"
        unknown = set(table) - known
        if unknown:
            raise ConfigError(f"{where}: unknown key {sorted(unknown)[0]!r} (keys: {', '.join(sorted(known))})")
        command, url = table.get("command"), table.get("url")
        if (command is None) == (url is None):
            raise ConfigError(f"{where}: give either 'command' (stdio) or 'url' (streamable HTTP)")
        args, env = table.get("args", []), table.get("env", {})
        timeout = table.get("startup_timeout", 30)
        if (command is not None and not isinstance(command, str)) or (url is not None and not isinstance(url, str)) \
                or not isinstance(args, list) or not all(isinstance(a, str) for a in args) \
                or not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()) \
                or not isinstance(table.get("cwd", ""), str) or not isinstance(timeout, int | float):
            raise ConfigError(f"{where}: command/url/cwd are strings, args a list of strings, env a table of "
                              "strings, startup_timeout a number")
        if isinstance(timeout, bool) or not timeout > 0:
            raise ConfigError(f"{where}: startup_timeout must be a number of seconds above 0, not {timeout!r}")
        empty = "command" if command is not None and not command.strip() else "cwd" if table.get("cwd") == "" else ""
        if empty:
            raise ConfigError(f"{where}: {empty} is empty")
        if url is not None and not re.match(r"https?://[^/\s]+", url, re.IGNORECASE):
            raise ConfigError(f"{where}: url must be an http:// or https:// URL, not {url!r}")
        out.append(McpServerConfig(name, command, tuple(args), dict(env), table.get("cwd"), url, float(timeout)))
    return out


class _Connection:
    """One server: a task that holds the `mcp.Client` context open until told to stop."""

    def __init__(self, config: McpServerConfig, errlog: TextIO, *, tail: StderrTail | None = None,
                 workspace: Path | None = None) -> None:
        self.config = config
        self.workspace = workspace
        """Where a stdio server starts unless its `cwd` says otherwise (None: the working directory)."""
        self.errlog = errlog
        self.tail = tail
        """This connection's own stderr pipe, whose last line a failure quotes (None: `errlog` is shared)."""
        self.watch = TransportWatch(_tool_problem)
        self.notes: list[str] = []
        """Warnings about the listing (one line each), for `registry.errors`."""
        self.client: Any = None
        self.error: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._starting = asyncio.Lock()

    def _transport(self) -> Any:
        """The library's transport for this server, watched (`mcp_transport.TransportWatch`)."""
        from mcp import StdioServerParameters

        c = self.config
        if c.url is not None:
            from mcp.client.streamable_http import streamable_http_client

            return self.watch.wrap(streamable_http_client(c.url))
        from mcp.client.stdio import stdio_client

        params = StdioServerParameters(command=c.command or "", args=list(c.args), env=c.env or None,
                                       cwd=c.cwd or str(self.workspace or Path.cwd()))
        return self.watch.wrap(stdio_client(params, errlog=self.errlog))

    async def _hold(self) -> None:
        from mcp import Client

        _SERVER.set(self.config.name)  # this task's and its children's (the library's readers) log lines name it
        try:
            async with Client(self._transport(), mode="auto") as client:
                self.client = client
                self._ready.set()
                await self._stop.wait()
        except Exception as exc:
            self.error = _describe(exc)
        finally:
            self.client = None
            self._ready.set()

    async def ensure_started(self) -> Any:
        """The connected client; starts (or restarts) the server first when needed: never started, or its
        connection closed (the server exited, between turns or mid-call).

        Raises:
            ToolError: the server could not be started within its startup timeout.
        """
        async with self._starting:
            if self.client is not None and not self.watch.closed:
                return self.client
            if self._task is not None:
                await self._finish_task(graceful=not self.watch.closed)
            self.watch = TransportWatch(_tool_problem)
            self._ready, self._stop, self.error = asyncio.Event(), asyncio.Event(), None
            self._task = asyncio.create_task(self._hold(), name=f"mcp:{self.config.name}")
            try:
                # not asyncio.wait_for: on Python 3.11 it swallows a cancellation that comes as the awaited thing
                # completes (crow tools stopped by SIGTERM as initialize was answered listed on forever)
                async with asyncio.timeout(self.config.startup_timeout_s):
                    await self._ready.wait()
            except TimeoutError:
                await self._finish_task(graceful=False)  # it never answered: no point waiting for a clean stop
                self.error = f"did not start within {self.config.startup_timeout_s:g} s"
            if self.client is None:
                raise ToolError(f"MCP server {self.config.name!r} failed to start: {self.error or 'it exited'}"
                                f"{self._stderr_tail()}")
            return self.client

    def _stderr_tail(self) -> str:
        line = self.tail.last_line() if self.tail is not None else ""
        return f" (stderr: {line[:200]})" if line else ""

    async def _finish_task(self, *, graceful: bool = True) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        self._stop.set()
        try:
            async with asyncio.timeout(_STOP_TIMEOUT_S if graceful else 0):
                await asyncio.shield(task)
        except TimeoutError:
            await end_task(task, _SHUTDOWN_GRACE_S)

    async def close(self, *, graceful: bool = True) -> None:
        # a server that never became ready (start interrupted by Ctrl-C) gets no clean stop: it would not answer
        await self._finish_task(graceful=graceful and self.client is not None)


async def cancellable(request: Coroutine[Any, Any, _T]) -> _T:
    """Await one request of the MCP client so that a cancellation of the caller ends it.

    The request runs in a task of its own. The client (mcp 2.x on anyio) can absorb a cancellation that
    arrives while one of its cancel scopes unwinds and then wait on for an answer that never comes (seen:
    `crow acp` ended while a server that never answers tools/list started; 1 connection in 60 hung). So a
    cancellation of the caller is passed on again every 0.05 s until the request's task has ended, and is
    then raised.

    Raises:
        asyncio.CancelledError: the caller was cancelled (once the request has ended).
        Exception: whatever the request raises.
    """
    task = asyncio.ensure_future(request)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await end_task(task)
        raise


async def end_task(task: asyncio.Future[Any], grace_s: float = 0.0) -> None:
    """Cancel `task` and wait until it has ended. The MCP client can absorb a cancellation (`cancellable`), so
    the cancellation is made again every 0.05 s, after `grace_s`: a connection's task gets
    `_SHUTDOWN_GRACE_S`, since the stdio client stops its server inside a shielded scope (stdin closed, 2 s for
    the server to exit, then the process tree killed) that a repeated native cancellation breaks, and a server
    that ignores the end of its stdin would then never be killed. Its outcome is read, not raised; a
    cancellation of the caller while it waits changes nothing (the task is ended all the same)."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait([task], timeout=grace_s)
    while not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait([task], timeout=_RECANCEL_S)
    if not task.cancelled():
        task.exception()  # retrieved: a failure while stopping is not reported again at exit


def _describe(exc: BaseException) -> str:
    from pydantic import ValidationError

    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, FileNotFoundError):
        return f"command not found ({exc.filename or exc})"
    if isinstance(exc, ValidationError) and exc.errors():  # a pydantic dump is many lines naming no field
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return f"invalid {exc.title}{f' at {where}' if where else ''}: {first['msg']}"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _tool_problem(raw: Any, version: str | None) -> str | None:
    """Why a raw `tools/list` entry cannot be used under protocol `version` (one line naming the field), or
    None. The library validates a listing as one page (`mcp_types.methods.validate_server_result`): one
    entry it refuses would fail the whole server, so each is validated alone first, the same way."""
    from mcp_types import Tool as McpTool
    from mcp_types.methods import validate_server_result
    from pydantic import ValidationError

    if not isinstance(raw, dict):
        return "it is not an object"
    if not isinstance(raw.get("name"), str) or not raw["name"]:
        return "it has no name"
    schema = raw.get("inputSchema")
    if not isinstance(schema, dict):
        return "its inputSchema is not an object"
    if schema.get("type") != "object":  # the MCP spec: a tool's inputSchema is {"type": "object", …}
        return f"its inputSchema has type {schema.get('type')!r}, not 'object'"
    size = len(json.dumps(raw, ensure_ascii=False, default=str))
    if size > TOOL_CHARS:
        return (f"its definition is {size} characters, more than {TOOL_CHARS} characters (it would be sent with "
                "every request)")
    try:
        if version is None:
            McpTool.model_validate(raw)
        else:
            validate_server_result("tools/list", version, {"tools": [raw]})
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = first["loc"][2:] if first["loc"][:1] == ("tools",) else first["loc"]
        return f"{'.'.join(str(p) for p in loc) or 'the tool'}: {first['msg']}"
    except (ValueError, KeyError):  # a protocol version this library does not know: the server decides
        return None
    return None


_SERVER: contextvars.ContextVar[str | None] = contextvars.ContextVar("crow_mcp_server", default=None)
"""The name of the MCP server whose connection task logs (set in `_Connection._hold`), None elsewhere."""


class _OneLine(logging.Formatter):
    """`crow: warning: MCP server 'NAME': MESSAGE[: EXCEPTION]` on one line, never a traceback (`mcp:` for a
    line logged outside any server's task)."""

    def format(self, record: logging.LogRecord) -> str:
        text = " ".join(record.getMessage().split())
        if record.exc_info and record.exc_info[1] is not None:
            text += f": {_describe(record.exc_info[1])}"
        server = getattr(record, "mcp_server", None)
        return f"crow: warning: {f'MCP server {server!r}' if server else 'mcp'}: {text[:300]}"


class _Once(logging.Filter):
    """Lets each message through once per server: one that writes a bad line per answer gets one warning."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        server = _SERVER.get()  # read here, in the logging task, for the formatter
        setattr(record, "mcp_server", server)  # noqa: B010 (an extra attribute, as logging's `extra=` sets)
        key = f"{server} {record.msg}"
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


def one_line_library_logs(debug: bool) -> None:
    """Send the `mcp` library's warnings and errors to stderr one line each (a non-JSON line a server
    writes to stdout is logged with a traceback otherwise); with `debug`, leave its logging alone."""
    logger = logging.getLogger("mcp")
    if debug or any(isinstance(h.formatter, _OneLine) for h in logger.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_OneLine())
    handler.addFilter(_Once())
    handler.setLevel(logging.WARNING)
    logger.addHandler(handler)
    logger.propagate = False


def _as_parts(result: Any) -> list[str | Image]:
    """A `tools/call` result's content blocks as text and images: an image block (or an embedded resource
    whose blob is an image) becomes an `Image`, which the loop shows a vision model after the tool results;
    other kinds (audio, a resource link) are named in a line of text."""
    parts: list[str | Image] = []
    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and hasattr(block.resource, "text"):
            parts.append(block.resource.text)
        elif (image := _image_of(block)) is not None:
            parts.append(image)
        else:
            mime = getattr(block, "mime_type", None) or getattr(block, "uri", None) or ""
            parts.append(f"[{kind} content{': ' + str(mime) if mime else ''}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return parts


def _image_of(block: Any) -> Image | None:
    """The image of an MCP `image` block (base64 `data`, `mimeType`) or of a `resource` block whose blob is
    an image; None for any other block, and for data that is no image crow knows (told by its bytes)."""
    kind = getattr(block, "type", "")
    if kind == "image":
        encoded, name = getattr(block, "data", None), ""
    elif kind == "resource" and isinstance(getattr(block.resource, "blob", None), str):
        encoded, name = block.resource.blob, str(getattr(block.resource, "uri", "") or "").rsplit("/", 1)[-1]
    else:
        return None
    try:
        data = base64.b64decode(encoded or "", validate=False)
    except (binascii.Error, ValueError):
        return None
    mime = image_type(data)  # told by its bytes: a server's mimeType may be wrong, and servers refuse a mismatch
    return Image(data, mime, name) if mime is not None else None


class McpServers:
    """The MCP servers of a run or chat: `async with McpServers(settings.mcp_servers) as servers:`.

    An async context owned by a surface. Nothing starts on construction; `register_tools` starts the servers
    concurrently (listing needs them). Starting and listing are each bounded by `startup_timeout`. A tool call
    restarts a server whose connection has closed (it exited between turns, or mid-call); whether it closed is
    read from the transport (`mcp_transport`), never from an error code: -32000 is also what servers answer for
    an ordinary tool failure, which leaves the server running. Each connection lives in one task of its own,
    entered and exited there (anyio cancel scopes require it); leaving the context stops every server. Every
    problem (a server that fails to start or to list, an invalid tool, a renamed tool, a listing cut at 100
    pages, more than 128 tools) is one line in `registry.errors`.

    Args:
        tables: `Settings.mcp_servers` (checked here; see `parse_mcp_servers`).
        errlog: where stdio servers' stderr goes (default: a pipe per server of which only the last
            lines are kept, in memory; the last one is quoted when the server fails to start).
        workspace: the folder stdio servers start in unless their `cwd` says otherwise (the run's
            `ToolContext.workspace`; None: the working directory).
        debug: let the `mcp` library log as it does (tracebacks included); else each of its warnings
            and errors is one line on stderr, each message once. Default: whether `errlog` is given
            (the surfaces pass stderr with --debug).

    Raises:
        ConfigError: from the constructor, for an invalid table.
    """

    def __init__(self, tables: Mapping[str, Mapping[str, Any]], *, errlog: TextIO | None = None,
                 workspace: Path | None = None, debug: bool | None = None) -> None:
        self.configs = parse_mcp_servers(tables)
        self._errlog = errlog
        self._workspace = workspace
        self._debug = errlog is not None if debug is None else debug
        self._tails: list[StderrTail] = []
        self.connections: dict[str, _Connection] = {}
        self.listed: set[str] = set()
        """The servers whose start and listing have ended (listed, or failed), by name."""

    async def __aenter__(self) -> McpServers:
        if self.configs:
            one_line_library_logs(self._debug)
        for c in self.configs:
            if self._errlog is not None:
                self.connections[c.name] = _Connection(c, self._errlog, workspace=self._workspace)
                continue
            tail = StderrTail()  # one pipe per server, so a failure quotes its own stderr
            self._tails.append(tail)
            await tail.start()
            self.connections[c.name] = _Connection(c, tail.file, tail=tail, workspace=self._workspace)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        try:
            await asyncio.gather(*(c.close() for c in self.connections.values()), return_exceptions=True)
        finally:
            for tail in self._tails:
                tail.close()

    async def register_tools(self, registry: ToolRegistry) -> None:
        """Start every server (concurrently), list its tools and add them to `registry`.

        Each server's start and its listing are bounded by its `startup_timeout`. Problems go to
        `registry.errors`, one line each; they never raise: a server that failed, a tool dropped from
        a listing (named, with why), a listing cut at 100 pages, a tool renamed because its name was
        taken, and more tools in all than OpenAI accepts (128).
        """
        async def listed(conn: _Connection) -> list[Any] | str:
            listing = await self._list(conn)
            self.listed.add(conn.config.name)
            return listing

        listings = await asyncio.gather(*(listed(c) for c in self.connections.values()))
        for conn, listing in zip(self.connections.values(), listings, strict=True):
            if isinstance(listing, str):
                registry.errors.append(listing)
                continue
            registry.errors += [f"MCP server {conn.config.name!r}: tool {line}; dropped it"
                                for line in conn.watch.dropped] + conn.notes
            for remote in listing:
                registry.register(self._tool(conn, remote, registry), source=f"mcp:{conn.config.name}")
        if self.connections and (count := sum(1 for _ in registry)) > OPENAI_TOOL_LIMIT:
            registry.errors.append(f"{count} tools are offered to the model; OpenAI accepts at most "
                                   f"{OPENAI_TOOL_LIMIT} and other servers may refuse so many (use fewer MCP "
                                   "servers, or --no-tools)")

    async def _list(self, conn: _Connection) -> list[Any] | str:
        name, limit = conn.config.name, conn.config.startup_timeout_s
        try:
            client = await conn.ensure_started()
            tools: list[Any] = []
            cursor = None
            async with asyncio.timeout(limit):
                for _ in range(_PAGE_LIMIT):
                    page = await cancellable(client.list_tools(cursor=cursor))
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        break
                else:
                    conn.notes.append(f"MCP server {name!r} still had more tools after {_PAGE_LIMIT} pages of "
                                      f"tools/list; using the {len(tools)} listed so far")
            return tools
        except ToolError as exc:
            return str(exc)
        except TimeoutError:
            await conn.close(graceful=False)  # it answers nothing: no point waiting for a clean stop
            return f"MCP server {name!r} did not list its tools within {limit:g} s (startup_timeout); not used"
        except Exception as exc:
            return f"MCP server {name!r} could not list its tools: {_describe(exc)}"

    def _tool(self, conn: _Connection, remote: Any, registry: ToolRegistry) -> Tool:
        remote_name: str = remote.name
        name = wire_name(remote_name)  # the registry's rule for every tool, applied at once: rules name it so
        if (taken := registry.get(name)) is not None:
            renamed = wire_name(f"{conn.config.name}_{name}")
            registry.errors.append(f"MCP server {conn.config.name!r}: tool {remote_name!r} is offered as "
                                   f"{renamed!r}: {name!r} is taken ({taken.source})")
            name = renamed
        read_only = bool(getattr(remote.annotations, "read_only_hint", False)) if remote.annotations else False
        schema = dict(remote.input_schema or {})
        schema.pop("title", None)
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})

        async def call(**arguments: Any) -> str | list[str | Image]:
            try:
                client = await conn.ensure_started()
                result = await cancellable(client.call_tool(remote_name, arguments))
            except ToolError:
                raise
            except Exception as exc:
                lost = ""
                if conn.watch.closed:  # the transport ended (not an error code: -32000 is also a tool error)
                    await conn.close(graceful=False)
                    lost = " (the connection was lost; the server will be restarted on the next call)"
                raise ToolError(f"MCP server {conn.config.name!r}: {remote_name} failed: {_describe(exc)}{lost}"
                                ) from exc
            parts = _as_parts(result)
            if result.is_error:
                text = "\n".join(p.placeholder() if isinstance(p, Image) else p for p in parts)
                raise ToolError(text or f"{remote_name} failed (the server gave no message)")
            # text parts and images (`Tool.call` names each image in the text); text alone as one text
            return parts if any(isinstance(p, Image) for p in parts) else "\n".join(str(p) for p in parts)

        return Tool(name, remote.description or remote.title or remote_name, call, parameters=schema,
                    needs_approval=not read_only, parallel=read_only, validator=None,
                    kind="read" if read_only else "other")
