"""MCP servers as a plugin source, through the official `mcp` package (imported only when used).

Config: `[mcp_servers.NAME]` tables with `command`, `args`, `env`, `cwd` (stdio: the server is started
as a subprocess, in the workspace root unless `cwd` says otherwise) or `url` (streamable HTTP), plus
an optional `startup_timeout` (seconds, default 30). Their tools join the registry with
`source="mcp:NAME"`; a tool whose name is taken is registered as `NAME_tool`. Arguments are checked
by the server. Tools the server marks read-only (`readOnlyHint`) run in parallel without approval;
the others need approval and run exclusively.

Lifecycle: `McpServers` is an async context owned by a surface. Nothing starts on construction;
`register_tools` starts the servers concurrently (listing needs them) and a tool call restarts a
server whose connection was lost. Each connection lives in one task of its own, entered and exited
there (anyio cancel scopes require it); leaving the context stops every server. A server that fails
to start becomes one line in `registry.errors` and the others keep working.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ..errors import ConfigError, ToolError
from .names import wire_name
from .registry import Tool, ToolRegistry

__all__ = ["McpServerConfig", "McpServers", "parse_mcp_servers"]

_STOP_TIMEOUT_S = 10.0


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

    Raises:
        ConfigError: a table with neither or both of `command` and `url`, an unknown key or a wrong type.
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
        out.append(McpServerConfig(name, command, tuple(args), dict(env), table.get("cwd"), url, float(timeout)))
    return out


class _Connection:
    """One server: a task that holds the `mcp.Client` context open until told to stop."""

    def __init__(self, config: McpServerConfig, errlog: TextIO, *, quote_stderr: bool = False,
                 workspace: Path | None = None) -> None:
        self.config = config
        self.workspace = workspace
        """Where a stdio server starts unless its `cwd` says otherwise (None: the working directory)."""
        self.errlog = errlog
        self.quote_stderr = quote_stderr
        """True when `errlog` is this connection's own temporary file, whose last line a failure quotes."""
        self.client: Any = None
        self.error: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._starting = asyncio.Lock()

    def _target(self) -> Any:
        from mcp import StdioServerParameters

        c = self.config
        if c.url is not None:
            return c.url
        return StdioServerParameters(command=c.command or "", args=list(c.args), env=c.env or None,
                                     cwd=c.cwd or str(self.workspace or Path.cwd()))

    async def _hold(self) -> None:
        from mcp import Client

        try:
            target = self._target()
            if not isinstance(target, str):
                from mcp.client.stdio import stdio_client

                target = stdio_client(target, errlog=self.errlog)
            async with Client(target, mode="auto") as client:
                self.client = client
                self._ready.set()
                await self._stop.wait()
        except Exception as exc:
            self.error = _describe(exc)
        finally:
            self.client = None
            self._ready.set()

    async def ensure_started(self) -> Any:
        """The connected client; starts (or restarts) the server first when needed.

        Raises:
            ToolError: the server could not be started within its startup timeout.
        """
        async with self._starting:
            if self.client is not None:
                return self.client
            if self._task is not None:
                await self._finish_task()
            self._ready, self._stop, self.error = asyncio.Event(), asyncio.Event(), None
            self._task = asyncio.create_task(self._hold(), name=f"mcp:{self.config.name}")
            try:
                await asyncio.wait_for(self._ready.wait(), self.config.startup_timeout_s)
            except TimeoutError:
                await self._finish_task(graceful=False)  # it never answered: no point waiting for a clean stop
                self.error = f"did not start within {self.config.startup_timeout_s:g} s"
            if self.client is None:
                raise ToolError(f"MCP server {self.config.name!r} failed to start: {self.error or 'it exited'}"
                                f"{self._stderr_tail()}")
            return self.client

    def _stderr_tail(self) -> str:
        if not self.quote_stderr:
            return ""
        try:
            self.errlog.flush()
            self.errlog.seek(0)
            lines = [line.strip() for line in self.errlog.read().splitlines() if line.strip()]
        except (OSError, ValueError, AttributeError):
            return ""
        return f" (stderr: {lines[-1][:200]})" if lines else ""

    async def _finish_task(self, *, graceful: bool = True) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), _STOP_TIMEOUT_S if graceful else 0)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def close(self) -> None:
        await self._finish_task()


def _describe(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, FileNotFoundError):
        return f"command not found ({exc.filename or exc})"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _connection_lost(exc: BaseException) -> bool:
    import anyio
    from mcp_types import CONNECTION_CLOSED

    return getattr(exc, "code", None) == CONNECTION_CLOSED or isinstance(
        exc, anyio.ClosedResourceError | anyio.BrokenResourceError | anyio.EndOfStream)


def _as_text(result: Any) -> str:
    parts: list[str] = []
    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and hasattr(block.resource, "text"):
            parts.append(block.resource.text)
        else:
            mime = getattr(block, "mime_type", None) or getattr(block, "uri", None) or ""
            parts.append(f"[{kind} content{': ' + str(mime) if mime else ''}]")
    if not parts and result.structured_content is not None:
        import json

        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


class McpServers:
    """The MCP servers of a run or chat: `async with McpServers(settings.mcp_servers) as servers:`.

    Args:
        tables: `Settings.mcp_servers` (checked here; see `parse_mcp_servers`).
        errlog: where stdio servers' stderr goes (default: a temporary file, whose last line is quoted
            when a server fails to start).
        workspace: the folder stdio servers start in unless their `cwd` says otherwise (the run's
            `ToolContext.workspace`; None: the working directory).

    Raises:
        ConfigError: from the constructor, for an invalid table.
    """

    def __init__(self, tables: Mapping[str, Mapping[str, Any]], *, errlog: TextIO | None = None,
                 workspace: Path | None = None) -> None:
        self.configs = parse_mcp_servers(tables)
        self._errlog = errlog
        self._workspace = workspace
        self._exit = contextlib.ExitStack()
        self.connections: dict[str, _Connection] = {}

    async def __aenter__(self) -> McpServers:
        for c in self.configs:
            if self._errlog is not None:
                self.connections[c.name] = _Connection(c, self._errlog, workspace=self._workspace)
                continue
            errlog = self._exit.enter_context(  # one file per server, so a failure quotes its own stderr
                tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace"))  # noqa: SIM115
            self.connections[c.name] = _Connection(c, errlog, quote_stderr=True, workspace=self._workspace)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        try:
            await asyncio.gather(*(c.close() for c in self.connections.values()), return_exceptions=True)
        finally:
            self._exit.close()

    async def register_tools(self, registry: ToolRegistry) -> None:
        """Start every server (concurrently), list its tools and add them to `registry`.

        Failures go to `registry.errors`, one line per server; they never raise.
        """
        listings = await asyncio.gather(*(self._list(c) for c in self.connections.values()))
        for conn, listing in zip(self.connections.values(), listings, strict=True):
            if isinstance(listing, str):
                registry.errors.append(listing)
                continue
            for remote in listing:
                registry.register(self._tool(conn, remote, registry), source=f"mcp:{conn.config.name}")

    async def _list(self, conn: _Connection) -> list[Any] | str:
        try:
            client = await conn.ensure_started()
            tools: list[Any] = []
            cursor = None
            for _ in range(100):
                page = await client.list_tools(cursor=cursor)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    break
            return tools
        except ToolError as exc:
            return str(exc)
        except Exception as exc:
            return f"MCP server {conn.config.name!r} could not list its tools: {_describe(exc)}"

    def _tool(self, conn: _Connection, remote: Any, registry: ToolRegistry) -> Tool:
        remote_name: str = remote.name
        name = wire_name(remote_name)  # the registry's rule for every tool, applied at once: rules name it so
        if registry.get(name) is not None:
            name = wire_name(f"{conn.config.name}_{name}")
        read_only = bool(getattr(remote.annotations, "read_only_hint", False)) if remote.annotations else False
        schema = dict(remote.input_schema or {})
        schema.pop("title", None)
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})

        async def call(**arguments: Any) -> str:
            try:
                client = await conn.ensure_started()
                result = await client.call_tool(remote_name, arguments)
            except ToolError:
                raise
            except Exception as exc:
                lost = ""
                if _connection_lost(exc):  # the server died: drop the connection, the next call restarts it
                    await conn.close()
                    lost = " (the connection was lost; the server will be restarted on the next call)"
                raise ToolError(f"MCP server {conn.config.name!r}: {remote_name} failed: {_describe(exc)}{lost}"
                                ) from exc
            text = _as_text(result)
            if result.is_error:
                raise ToolError(text or f"{remote_name} failed (the server gave no message)")
            return text

        return Tool(name, remote.description or remote.title or remote_name, call, parameters=schema,
                    needs_approval=not read_only, parallel=read_only, validator=None,
                    kind="read" if read_only else "other")
