"""From a 200 response to chunk dicts: the SDK's SSE decoder, plus the shapes servers really send.

Imported only once the SDK is (it subclasses `openai.AsyncStream`, which documents subclassing with
a concrete chunk type). Where this differs from the SDK's own iteration:

* An event without data (`event: ping`, `data:` alone, `retry: 1000`) is skipped, as the SSE spec
  says it is not dispatched; `[DONE]` is recognised with stray spaces around it.
* Errors inside the stream come in three shapes: `{"error": {…}}` (OpenAI, vLLM via LiteLLM), a
  top-level `{"object": "error", "message": …}` (older vLLM) and an `event: error` whose data is
  the error itself. Each fails the turn with the server's message.
* A server that ignores `stream: true` and answers `application/json` has its completion turned into
  one equivalent chunk; a JSON error body is an error. Any other non-SSE body, or a stream that ends
  without a single chunk, is an error rather than an empty answer.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from openai import AsyncStream

from ..errors import ServerError
from .accumulate import stream_error

__all__ = ["ChunkStream", "chunk_from_completion"]


def _error_in(payload: Any, event: str | None) -> Any:
    if not isinstance(payload, Mapping):
        return None
    if payload.get("error"):
        return payload["error"]
    if payload.get("object") == "error" or event == "error":
        return payload
    return None


def chunk_from_completion(completion: Mapping[str, Any]) -> dict[str, Any]:
    """One stream chunk equivalent to a non-streamed `chat.completion` (choices[].message → delta)."""
    choices = []
    for choice in completion.get("choices") or ():
        message = dict(choice.get("message") or {})
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            message["tool_calls"] = [{"index": i, **c} for i, c in enumerate(calls) if isinstance(c, Mapping)]
        choices.append({"index": choice.get("index", 0), "delta": message,
                        "finish_reason": choice.get("finish_reason")})
    return {"choices": choices, "usage": completion.get("usage")}


class ChunkStream(AsyncStream[object]):
    """Iterates one streamed turn as decoded chunk dicts (see the module docstring for the rules).

    Raises:
        ServerError: an error inside the stream, a body that is neither SSE nor a completion, a chunk
            that is not JSON, or a stream with no chunk at all.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._iterator = self._chunks()  # replaces the SDK's iteration (never started)

    async def _chunks(self) -> AsyncIterator[Any]:
        response = self.response
        try:
            content_type = response.headers.get("content-type", "").lower()
            if "json" in content_type and "event-stream" not in content_type:
                yield await self._whole_json()
                return
            if content_type and "event-stream" not in content_type and "text/plain" not in content_type:
                raise ServerError(f"the server answered {content_type.split(';')[0]}, not an event stream "
                                  "(is --base-url right?)")
            count = 0
            async for sse in self._iter_events():
                data = sse.data.strip()
                if not data:
                    continue
                if data == "[DONE]":
                    break
                try:
                    payload = json.loads(data)
                except ValueError as exc:
                    raise ServerError(f"the server sent a chunk that is not JSON: {data[:60]!r}") from exc
                error = _error_in(payload, sse.event)
                if error is not None:
                    raise stream_error(error)
                count += 1
                yield payload
            if count == 0:
                raise ServerError("the server ended the stream without sending a single chunk")
        finally:
            await response.aclose()

    async def _whole_json(self) -> dict[str, Any]:
        body = await self.response.aread()
        try:
            payload = json.loads(body)
        except ValueError as exc:
            raise ServerError("the server answered with invalid JSON instead of an event stream") from exc
        error = _error_in(payload, None)
        if error is not None:
            raise stream_error(error)
        if not isinstance(payload, Mapping) or not payload.get("choices"):
            raise ServerError("the server answered with JSON that is neither a stream nor a completion")
        return chunk_from_completion(payload)
