"""Raw stream recording (`crow run --record DIR`): what was sent and what came back, byte for byte.

This is what users attach to bug reports, and what the llama.cpp smoke test reads, so secrets never reach the
files. `RecordingTransport` tells the files written and what is redacted. Because the wrapped transport is
the stock `AsyncHTTPTransport` (httpcore underneath), respx still intercepts recorded clients in tests.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import httpx

from ..errors import ConfigError
from ..private import open_private, private_dir
from ..text import header_secrets, is_secret_name, mask_secrets
from .body import MAX_STREAM_BYTES
from .tls import ssl_context

__all__ = ["RecordingTransport", "prepare_record_dir", "recording_http_client"]

_NUMBERED = re.compile(r"^(\d{4,})-")


def prepare_record_dir(path: str | Path) -> Path:
    """Create the recording folder (and parents) if needed and return it.

    Raises:
        ConfigError: no folder named (`--record ""`: an unset variable), or it cannot be created or is not
            a writable directory.
    """
    if not str(path).strip():  # Path("") is the working directory, yet nothing would be recorded
        raise ConfigError("--record needs a folder (got an empty name)")
    folder = Path(path).expanduser()
    try:
        private_dir(folder)  # the records hold the conversation: folders crow makes are 0700, files 0600
        probe = folder / ".crow-record-probe"
        open_private(probe).close()
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"cannot record into {str(path)!r}: {exc.strerror or exc}") from None
    return folder


class RecordingTransport(httpx.AsyncBaseTransport):
    """An `httpx.AsyncBaseTransport` that records every exchange it forwards to `inner` (see module doc).

    It wraps `httpx.AsyncHTTPTransport` and tees every exchange into numbered files in DIR (numbering continues
    after the highest number already there, so runs never overwrite each other; a retry is an exchange of its
    own):

        0001-request.json   the request body (JSON, indented; the raw text when it is not JSON)
        0001-response.sse   the response body exactly as streamed (`.json`/`.txt` for other content types),
                            written chunk by chunk as it arrives, so a cut or interrupted stream stays on disk
        0001-meta.json      method, URL (without its query string: Azure-style `?key=…` stays out),
                            status, request and response headers, the response file's name, and `error`
                            when the transport failed

    Credential headers (`text.SECRET_NAME`: auth, key, token, cookie, pass, credential, signature …) are
    dropped, and their values (the bare token of `Bearer …`, each cookie's value: `text.header_secrets`) plus
    any secret handed in are replaced by `[REDACTED]` (`text.mask_secrets`) wherever they appear in the URL, the
    request body or the response.

    Args:
        folder: an existing, writable directory (see `prepare_record_dir`).
        inner: the transport that really sends; `httpx.AsyncHTTPTransport()` when None.
        secrets: extra values to redact (the API key), besides those found in auth headers.
    """

    def __init__(self, folder: Path, inner: httpx.AsyncBaseTransport | None = None,
                 secrets: Iterable[str | None] = ()) -> None:
        self.folder = folder
        self.inner = inner or httpx.AsyncHTTPTransport(verify=ssl_context())
        self._secrets = {s for s in secrets if s}
        self._number = max((int(m.group(1)) for f in folder.iterdir() if (m := _NUMBERED.match(f.name))),
                           default=0)

    def _scrub(self, data: bytes, secrets: set[str]) -> bytes:
        return mask_secrets(data.decode("utf-8", "surrogateescape"), secrets).encode(
            "utf-8", "surrogateescape")  # any bytes survive the round trip

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self._number += 1
        prefix = f"{self._number:04d}"
        secrets = self._secrets | set(header_secrets(request.headers.multi_items()))
        body = self._scrub(await request.aread(), secrets)
        _write_private(self.folder / f"{prefix}-request.json", _pretty_json(body))
        meta: dict[str, Any] = {
            "method": request.method,
            "url": self._scrub(str(request.url.copy_with(query=None)).encode(), secrets).decode(),  # keys hide there
            "request_headers": _safe_headers(request.headers),
        }
        meta_path = self.folder / f"{prefix}-meta.json"
        try:
            response = await self.inner.handle_async_request(request)
        except Exception as exc:
            meta["error"] = f"{type(exc).__name__}: {exc}"
            _write_json(meta_path, meta)
            raise
        content_type = response.headers.get("content-type", "")
        suffix = "sse" if "event-stream" in content_type else "json" if "json" in content_type else "txt"
        response_path = self.folder / f"{prefix}-response.{suffix}"
        meta.update(status=response.status_code, response_headers=_safe_headers(response.headers),
                    response_file=response_path.name)
        _write_json(meta_path, meta)
        tee = _TeeStream(response.stream, response_path, response.headers.get("content-encoding", ""),
                         lambda data: self._scrub(data, secrets))
        return httpx.Response(response.status_code, headers=response.headers, stream=tee,
                              extensions=response.extensions)

    async def aclose(self) -> None:
        await self.inner.aclose()


class _TeeStream(httpx.AsyncByteStream):
    """Passes the raw (still content-encoded) bytes on untouched and appends their decoded form to a file."""

    def __init__(self, inner: Any, path: Path, encoding: str, scrub: Any) -> None:
        self.inner = inner
        self.file = open_private(path)
        self.scrub = scrub
        enc = encoding.strip().lower()
        # gzip/deflate are decoded for the file; other encodings (br, zstd) are written as received.
        self.decoder = zlib.decompressobj(zlib.MAX_WBITS | 32) if enc in ("gzip", "deflate") else None
        self.room = MAX_STREAM_BYTES
        """Decoded bytes the file may still take: the live path reads no more (`body.MAX_STREAM_BYTES`), and a
        compression bomb must not fill the disk or the memory of the recording either."""
        self.pending = b""

    def _decoded(self, data: bytes, final: bool) -> bytes:
        assert self.decoder is not None
        if self.room <= 0:
            return b""
        out = self.decoder.decompress(data, self.room)  # never more than the room left, whatever the ratio
        if final and len(out) < self.room:
            out += self.decoder.flush()[: self.room - len(out)]
        self.room -= len(out)
        if self.room <= 0:
            out += f"\n[crow: recording cut at {MAX_STREAM_BYTES} decoded bytes]\n".encode()
        return out

    def _write(self, data: bytes, final: bool = False) -> None:
        if self.decoder is not None:
            data = self._decoded(data, final)
        # Hold back a tail shorter than any secret could straddle, so a split secret is still redacted.
        data = self.pending + data
        keep = 0 if final else min(len(data), 256)
        cut = len(data) - keep
        self.pending = data[cut:]
        if cut:
            self.file.write(self.scrub(data[:cut]))
        if final and self.pending:
            self.file.write(self.scrub(self.pending))
            self.pending = b""
        self.file.flush()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for part in self.inner:
            self._write(part)
            yield part

    async def aclose(self) -> None:
        try:
            if not self.file.closed:
                self._write(b"", final=True)
                self.file.close()
        finally:
            await self.inner.aclose()


def _safe_headers(headers: httpx.Headers) -> dict[str, str]:
    return {name: value for name, value in headers.items() if not is_secret_name(name)}


def _pretty_json(body: bytes) -> bytes:
    try:
        return (json.dumps(json.loads(body), indent=2, ensure_ascii=False) + "\n").encode()
    except ValueError:
        return body


def _write_json(path: Path, value: Any) -> None:
    _write_private(path, (json.dumps(value, indent=2, ensure_ascii=False) + "\n").encode())


def _write_private(path: Path, data: bytes) -> None:
    with open_private(path) as fh:
        fh.write(data)


def recording_http_client(record_dir: str | Path, *, timeout: httpx.Timeout,
                          secrets: Iterable[str | None] = (), inner: httpx.AsyncBaseTransport | None = None
                          ) -> httpx.AsyncClient:
    """An `httpx.AsyncClient` (for `openai.AsyncOpenAI(http_client=…)`) that records into `record_dir`.

    Args:
        record_dir: the folder; created if missing.
        timeout: the client's timeouts (the SDK passes its own per request as well).
        secrets: values to redact wherever they appear (the API key), besides auth header values.
        inner: the transport recorded (default: httpx's own, with the openai SDK's connection limits).

    Raises:
        ConfigError: the folder cannot be created or written.
    """
    folder = prepare_record_dir(record_dir)
    inner = inner or httpx.AsyncHTTPTransport(
        verify=ssl_context(), limits=httpx.Limits(max_connections=1000, max_keepalive_connections=100))
    transport = RecordingTransport(folder, inner, secrets=secrets)
    return httpx.AsyncClient(transport=transport, timeout=timeout, follow_redirects=True)
