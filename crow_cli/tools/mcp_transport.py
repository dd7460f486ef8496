"""What crow watches of an MCP connection, at its transport (the `mcp` package's public `Transport` shape):
whether the connection has closed, the raw tools of each `tools/list` answer, and a server's stderr tail.

* Closed: the read stream ended (EOF, the server exited, the HTTP session ended). That, and not an
  error's code, tells a lost connection from an application error: servers answer ordinary tool
  failures with JSON-RPC code -32000, the very code the library uses for "connection closed".
* Tools: a `tools/list` answer is checked tool by tool before the library validates the whole page,
  so one invalid tool (a schema that is not an object, no name) is dropped and named instead of
  failing the whole server. Only the tools of the answer are touched.
* Stderr: a stdio server's stderr goes to a pipe whose last lines (at most `TAIL_BYTES`) are kept in
  memory, so a chatty server costs no disk and no memory over time, and a failure can quote its last line.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["TAIL_BYTES", "StderrTail", "TransportWatch"]

TAIL_BYTES = 8192
"""How much of a server's stderr is kept (the last bytes, in whole lines)."""


class TransportWatch:
    """One connection's transport, watched. Use `wrap(transport)` as the `mcp.Client` target."""

    def __init__(self, check_tool: Callable[[Any, str | None], str | None]) -> None:
        """`check_tool(raw, version)` returns why a raw tool entry of a `tools/list` answer is unusable under
        the negotiated protocol `version` (None: not known), or None."""
        self.check_tool = check_tool
        self.version: str | None = None
        """The protocol version the server's `initialize` answer named."""
        self.closed = False
        """The read stream ended: the connection is gone (set before the library fails pending requests)."""
        self.dropped: list[str] = []
        """One line per tool dropped from a listing: `'NAME': why`."""
        self._listing_ids: set[Any] = set()

    def wrap(self, transport: Any) -> _WatchedTransport:
        return _WatchedTransport(transport, self)

    def outgoing(self, item: Any) -> None:
        message = getattr(item, "message", None)
        if getattr(message, "method", None) == "tools/list":
            self._listing_ids.add(getattr(message, "id", None))

    def incoming(self, item: Any) -> Any:
        message = getattr(item, "message", None)
        result = getattr(message, "result", None)
        ident = getattr(message, "id", None)
        if isinstance(result, dict) and isinstance(result.get("protocolVersion"), str):
            self.version = result["protocolVersion"]
        if ident in self._listing_ids and isinstance(result, dict):
            self._listing_ids.discard(ident)
            tools = result.get("tools")
            if isinstance(tools, list):
                kept = []
                for n, raw in enumerate(tools):
                    why = self.check_tool(raw, self.version)
                    if why is None:
                        kept.append(raw)
                        continue
                    name = raw.get("name") if isinstance(raw, dict) else None
                    label = repr(name) if isinstance(name, str) and name else f"#{n + 1} (no name)"
                    self.dropped.append(f"{label}: {why}")
                result["tools"] = kept
        return item


class _WatchedTransport:
    def __init__(self, inner: Any, watch: TransportWatch) -> None:
        self.inner, self.watch = inner, watch

    async def __aenter__(self) -> tuple[_WatchedRead, _WatchedWrite]:
        read, write = await self.inner.__aenter__()
        return _WatchedRead(read, self.watch), _WatchedWrite(write, self.watch)

    async def __aexit__(self, *exc_info: Any) -> Any:
        return await self.inner.__aexit__(*exc_info)


class _WatchedRead:
    """The transport's read stream (the library's `ReadStream` shape), noting its end."""

    def __init__(self, inner: Any, watch: TransportWatch) -> None:
        self.inner, self.watch = inner, watch

    async def receive(self) -> Any:
        import anyio

        try:
            item = await self.inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self.watch.closed = True
            raise
        return self.watch.incoming(item)

    def __aiter__(self) -> _WatchedRead:
        return self

    async def __anext__(self) -> Any:
        import anyio

        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> _WatchedRead:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()

    def __getattr__(self, name: str) -> Any:  # `last_context` and any other attribute of the stream
        return getattr(self.inner, name)


class _WatchedWrite:
    """The transport's write stream, noting the ids of `tools/list` requests."""

    def __init__(self, inner: Any, watch: TransportWatch) -> None:
        self.inner, self.watch = inner, watch

    async def send(self, item: Any, /) -> None:
        self.watch.outgoing(item)
        await self.inner.send(item)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> _WatchedWrite:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class StderrTail:
    """A pipe for stdio servers' stderr (`file`, passed as `errlog`) whose last lines are kept in memory.

    Start it with `start()` inside the running event loop; `close()` closes both ends.
    """

    def __init__(self) -> None:
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)  # `last_line` reads what is pending without waiting
        self.file: TextIO = os.fdopen(write_fd, "w", encoding="utf-8", errors="replace")
        self._read = os.fdopen(read_fd, "rb", buffering=0)
        self._lines: deque[bytes] = deque()
        self._size = 0
        self._partial = b""
        self._transport: asyncio.ReadTransport | None = None

    async def start(self) -> None:
        tail = self

        class _Protocol(asyncio.Protocol):
            def data_received(self, data: bytes) -> None:
                tail._add(data)

        self._transport, _ = await asyncio.get_running_loop().connect_read_pipe(_Protocol, self._read)

    def _add(self, data: bytes) -> None:
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()[-TAIL_BYTES:]
        for whole in lines:
            line = whole[-TAIL_BYTES:]
            self._lines.append(line)
            self._size += len(line)
            while self._size > TAIL_BYTES and len(self._lines) > 1:
                self._size -= len(self._lines.popleft())

    def _read_pending(self) -> None:
        try:
            while chunk := os.read(self._read.fileno(), 65536):
                self._add(chunk)
        except (BlockingIOError, OSError, ValueError):  # nothing pending, or closed
            pass

    def last_line(self) -> str:
        """The last non-blank line written so far ("" when none), what is still in the pipe included."""
        self._read_pending()
        for line in [self._partial, *reversed(self._lines)]:
            if line.strip():
                return line.decode("utf-8", "replace").strip()
        return ""

    def kept(self) -> int:
        """Bytes kept in memory now (at most about `TAIL_BYTES` plus one partial line)."""
        return self._size + len(self._partial)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        else:
            self._read.close()
        self.file.close()
