"""The streaming Chat Completions client: request body in, raw chunk dicts out.

Built on the openai SDK (imported lazily: it costs ~0.7 s) for transport, SSE parsing and retries:
the SDK retries 408/409/429/5xx and connection errors before a stream starts, with exponential
backoff, jitter and `Retry-After`; each retry is yielded as a `Notice` (`wire.retries`). We ask it
for raw dicts (`cast_to=object`) so that provider quirks reach the accumulator untouched. Every
SDK/httpx error is mapped here, once, to a `ProviderError` subclass.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import AuthError, ProviderError, RateLimited, ServerError, StreamCut
from ..events import Notice
from .accumulate import stream_error

__all__ = ["ChatClient", "ClientSettings", "map_error", "redact"]


@dataclass(frozen=True)
class ClientSettings:
    """Where and how to reach the model."""

    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    """Secret: never printed, logged or stored; `repr` hides it."""
    headers: dict[str, str] = field(default_factory=dict)
    max_retries: int = 3
    """SDK retries for 408/409/429/5xx and connection errors before any output."""
    connect_timeout_s: float = 15.0
    idle_timeout_s: float = 300.0
    """Longest silence (seconds) between two reads of a response before the turn fails."""
    params: dict[str, Any] = field(default_factory=dict)
    """Extra request fields (temperature, max_tokens …) merged into every request body."""
    record_dir: str | None = None
    """When set, every request body and raw SSE response is written there (see `wire.record`)."""


class ChatClient:
    """Streams turns from an OpenAI-compatible `/chat/completions` endpoint (`stream: true`).

    Args:
        settings: connection settings; `api_key` may be None for servers that need none.
    """

    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        self._sdk: Any = None
        self._usage_option = True  # stream_options.include_usage, dropped if the server rejects it

    def _client(self) -> Any:
        if self._sdk is None:
            import httpx

            from .retries import ReportingOpenAI

            s = self.settings
            timeout = httpx.Timeout(connect=s.connect_timeout_s, read=s.idle_timeout_s, write=60.0, pool=30.0)
            http_client = None
            if s.record_dir:
                from .record import recording_http_client

                http_client = recording_http_client(s.record_dir, timeout=timeout, secrets=(s.api_key,))
            headers = dict(s.headers)
            if s.api_key:  # --api-key and the env beat an Authorization header from the config file
                headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
            self._sdk = ReportingOpenAI(
                base_url=s.base_url,
                api_key=s.api_key or "",
                default_headers=headers or None,
                max_retries=s.max_retries,
                timeout=timeout,
                http_client=http_client,
                _enforce_credentials=False,
            )
        return self._sdk

    def request_body(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> dict[str, Any]:
        """The JSON body of one streamed turn (OpenAI Chat Completions `create` with `stream: true`)."""
        body: dict[str, Any] = {**self.settings.params, "model": self.settings.model, "messages": messages,
                                "stream": True}
        if tools:
            body["tools"] = tools
        if self._usage_option:
            body["stream_options"] = {"include_usage": True}
        return body

    async def stream(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> AsyncIterator[dict[str, Any] | Notice]:
        """Yield each chunk of one turn as the decoded JSON of its SSE `data:` line.

        Before the first chunk, each retry the SDK makes (429, 5xx, a connection error) is yielded as a
        `Notice(code="retrying")` when it is decided, before its wait (`wire.retries`).

        Raises:
            AuthError: 401/403.
            RateLimited: 429 after retries.
            ServerError: 5xx after retries, or an error object inside the stream.
            StreamCut: the connection broke or went idle after the stream started.
            ProviderError: any other refusal (400, 404 …) or an unreachable server.
        """
        if not self.settings.api_key and _needs_key(self.settings.base_url):  # it would only answer 401
            raise AuthError(f"no API key for {self.settings.base_url}: set OPENAI_API_KEY or CROW_API_KEY (or "
                            "--api-key), or point --base-url at a server that needs none, or try a small local "
                            "model with --local")  # --local: issue 14
        client = self._client()
        try:
            notices: asyncio.Queue[Notice | None] = asyncio.Queue()
            opening = asyncio.ensure_future(self._open_reporting(notices.put_nowait, client, messages, tools))
            opening.add_done_callback(lambda _: notices.put_nowait(None))  # after every notice it sent
            try:
                while (notice := await notices.get()) is not None:
                    yield notice
            except BaseException:  # cancelled or closed while the request is being made or retried
                if not opening.done():
                    opening.cancel()  # its outcome is of no interest any more, whatever it is
                    opening.add_done_callback(lambda task: task.cancelled() or task.exception())
                elif not opening.cancelled() and opening.exception() is None:
                    await opening.result().close()
                raise
            response = opening.result()
            async with response:
                async for chunk in response:
                    yield chunk
        except Exception as exc:
            mapped = map_error(exc, self.settings.base_url, secret=self.settings.api_key)
            if mapped is None:
                raise
            raise mapped from exc

    async def _open_reporting(self, sink: Callable[[Notice], None], client: Any, messages: list[dict[str, Any]],
                              tools: list[dict[str, Any]] | None) -> Any:
        """Open the response (a task of its own, so that retry notices reach `sink` during the SDK's waits)."""
        import openai

        from .retries import retry_sink

        retry_sink.set(sink)  # this task's context only
        try:
            return await self._open(client, messages, tools)
        except openai.BadRequestError as exc:
            if not (self._usage_option and "stream_options" in str(exc.body or exc.message)):
                raise
            self._usage_option = False  # servers that reject include_usage just get no usage
            return await self._open(client, messages, tools)

    async def _open(self, client: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Any:
        from openai import Omit

        from .stream import ChunkStream

        # Local servers need no key: then no Authorization header is sent, unless the config sets one.
        own_auth = any(k.lower() == "authorization" for k in self.settings.headers)
        options: dict[str, Any] = {} if self.settings.api_key or own_auth else {"headers": {"Authorization": Omit()}}
        return await client.post(
            "/chat/completions",
            body=self.request_body(messages, tools),
            cast_to=object,
            options=options,
            stream=True,
            stream_cls=ChunkStream,
        )

    async def aclose(self) -> None:
        if self._sdk is not None:
            await self._sdk.close()


def _short(text: str, limit: int = 200) -> str:
    if re.search(r"<(!doctype|html|head|body|title|h1)\b", text, re.IGNORECASE):  # a proxy's HTML error page
        title = re.search(r"<(title|h1)[^>]*>(.*?)</\1>", text, re.IGNORECASE | re.DOTALL)
        text = title.group(2) if title else re.sub(r"<(script|style)\b.*?</\1>", " ", text,
                                                   flags=re.IGNORECASE | re.DOTALL)
        text = html.unescape(re.sub(r"<[^>]+>", " ", text))
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _body_message(body: Any, fallback: str) -> tuple[str, Any]:
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            return _short(str(err.get("message") or fallback)), err.get("code")
        if isinstance(err, str):
            return _short(err), None
    if isinstance(body, str) and body.strip():
        return _short(body), None
    return _short(fallback), None


def _retry_after(headers: Any) -> float | None:
    try:
        value = headers.get("retry-after")
        return float(value) if value is not None else None
    except (TypeError, ValueError, AttributeError):
        return None


_KEYED_HOSTS = ("api.openai.com", "openrouter.ai", "dashscope.aliyuncs.com", "dashscope-intl.aliyuncs.com")


def _needs_key(base_url: str) -> bool:
    """Hosted APIs that always refuse a request without a key (local servers often need none)."""
    import urllib.parse

    host = (urllib.parse.urlsplit(base_url).hostname or "").lower()
    return host in _KEYED_HOSTS


_REDACTED = "[REDACTED]"
_MIN_SECRET = 6
"""Shorter keys (dummies such as `x` for local servers) are not searched for: they would mangle messages."""


def redact(text: str, secret: str | None) -> str:
    """`text` with `secret` replaced by `[REDACTED]`, also a start of it cut off by a trailing `…`.

    Keys shorter than 6 characters are left alone (a dummy key is no secret, and would match anywhere).
    """
    if not secret or len(secret) < _MIN_SECRET:
        return text
    text = text.replace(secret, _REDACTED)
    if text.endswith("…"):  # `_short` may have cut the key: its first characters are still a leak
        body = text[:-1]
        for size in range(min(len(secret) - 1, len(body)), 2, -1):
            if body.endswith(secret[:size]):
                return body[:-size] + _REDACTED + "…"
    return text


def map_error(exc: BaseException, base_url: str, secret: str | None = None) -> ProviderError | None:
    """The `ProviderError` for an SDK or httpx exception, or None when `exc` is not one of theirs.

    `secret` (the API key) is replaced by `[REDACTED]` in the message: providers echo a wrong key in
    their 401 bodies, and the message is printed, sent in `run_finished.error` and may be stored.
    """
    mapped = _map_error(exc, base_url)
    if mapped is not None and secret and len(secret) >= _MIN_SECRET and mapped.args:
        message = str(mapped.args[0])
        if (clean := redact(message, secret)) != message:
            mapped.args = (clean, *mapped.args[1:])
    return mapped


def _map_error(exc: BaseException, base_url: str) -> ProviderError | None:
    import httpx
    import openai

    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        message, code = _body_message(exc.body, exc.message)
        retry_after = _retry_after(exc.response.headers)
        if status in (401, 403):
            hint = "check the API key (--api-key, CROW_API_KEY or OPENAI_API_KEY)" if status == 401 else \
                "the API key has no access to this model or endpoint"
            return AuthError(f"authentication failed ({status} {'unauthorized' if status == 401 else 'forbidden'}): "
                             f"{message}; {hint}", status=status, code=code)
        if status == 429:
            return RateLimited(f"rate limited (429): {message}", status=status, code=code, retry_after=retry_after)
        if status == 404:
            return ProviderError(f"not found (404): {message}; check --base-url ({base_url}) and --model",
                                 status=status, code=code)
        if status >= 500:
            return ServerError(f"server error ({status}): {message}", status=status, code=code,
                               retry_after=retry_after)
        return ProviderError(f"request rejected ({status}): {message}", status=status, code=code)
    if isinstance(exc, openai.APITimeoutError):  # before the stream started: the SDK has retried it already
        return ProviderError(f"no answer from {base_url} within the timeout (idle_timeout), after retries")
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc
        return ProviderError(f"cannot reach {base_url}: {_short(str(cause) or type(cause).__name__)}")
    if isinstance(exc, openai.APIError):  # any other SDK error that carries a body (ChunkStream raises its own)
        return stream_error(exc.body if exc.body is not None else exc.message)
    if isinstance(exc, httpx.TimeoutException):
        return StreamCut("the stream went idle past the timeout")
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.NetworkError)):
        return StreamCut(f"the stream broke mid-way ({_short(str(exc) or type(exc).__name__, 120)})")
    if isinstance(exc, json.JSONDecodeError):
        return ServerError(f"the server sent a chunk that is not JSON ({exc.msg} at {exc.pos})")
    if isinstance(exc, UnicodeDecodeError):
        return ServerError("the server sent a chunk that is not UTF-8")
    return None
