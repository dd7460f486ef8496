"""The Responses API as a second wire: crow's history in, Chat Completions chunk dicts out.

A provider whose `[provider] wire_api` is `responses` (Codex's key and values) gets each turn as `POST
{base_url}/responses` with `stream: true`, sent and read by the same client (`wire.client`: TLS, proxy, retries,
error mapping). Sessions stay in crow's own message form (Chat Completions messages), so a session moves between
a chat server and a Responses server as it moves between models; this module converts at the edge, both ways:
`request_body` out, `ChunkTranslator` in (so the one accumulator and the loop run unchanged). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from typing import Any

from ..errors import StreamCut
from ..events import WarningEvent
from ..history import REASONING_ITEMS_KEY, RESPONSE_ID_KEY, Message, author_of, content_text
from .errors import stream_error

__all__ = ["ChunkTranslator", "as_chunks", "request_body", "wire_hint"]

_PARAM_NAMES = {"max_tokens": "max_output_tokens", "max_completion_tokens": "max_output_tokens"}
"""Chat Completions parameters the Responses API takes under another name."""
_CHAT_ONLY = frozenset({"messages", "stream_options", "n", "tools", "tool_choice", "reasoning_effort"})
"""Chat Completions body fields this module converts itself or that the Responses API has no use for."""


def wire_hint(message: str) -> str:
    """The words that tell a refusal of Chat Completions for a Responses-only model how to fix it ("" when the
    message is not such a refusal): OpenAI's 404 "This model is only supported in v1/responses and not in
    v1/chat/completions", and gateways' wordings of it."""
    lowered = message.lower()
    if "v1/responses" in lowered or "responses api" in lowered or "/responses endpoint" in lowered:
        return ('; this model answers only on the Responses API: set wire_api = "responses" in [provider] (or '
                "[profiles.NAME.provider]) of the config file")
    return ""


def _text_parts(content: Any, kind: str) -> list[dict[str, Any]]:
    """Chat content (a string or parts) as Responses content parts of `kind` (`input_text` / `output_text`),
    images as `input_image` parts (user messages only)."""
    if isinstance(content, str):
        return [{"type": kind, "text": content}] if content else []
    parts: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, Mapping):
            continue
        if part.get("type") == "image_url" and kind == "input_text":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, Mapping) else image
            if isinstance(url, str):
                parts.append({"type": "input_image", "image_url": url})
        elif isinstance(part.get("text"), str) and part.get("type") in ("text", None) and part["text"]:
            parts.append({"type": kind, "text": part["text"]})
    return parts


def _function_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A Chat Completions function tool in the Responses shape (`strict: false` unless it says otherwise)."""
    function = tool.get("function")
    if tool.get("type") != "function" or not isinstance(function, Mapping):
        return dict(tool)
    out: dict[str, Any] = {"type": "function", "name": function.get("name")}
    if function.get("description") is not None:
        out["description"] = function["description"]
    out["parameters"] = function.get("parameters") or {"type": "object", "properties": {}}
    out["strict"] = bool(function.get("strict", False))
    return out


def _previous(history: list[Message], author: Mapping[str, str] | None) -> tuple[int, str] | None:
    """(position, response id) of the last message of `history` when it is an assistant message of `author`'s
    whose response the server stored, or of the last one followed only by tool results and user messages; None
    when there is none (then the whole history goes)."""
    for position in range(len(history) - 1, -1, -1):
        message = history[position]
        if message.get("role") == "assistant":
            response_id = message.get(RESPONSE_ID_KEY)
            own = author is not None and author_of(message) == dict(author)
            return (position, response_id) if own and isinstance(response_id, str) and response_id else None
    return None


def _reasoning_items(history: list[Message], author: Mapping[str, str] | None) -> list[list[dict[str, Any]]]:
    """Per assistant message of `history`, in order: the reasoning items to send before it (those it keeps
    under `REASONING_ITEMS_KEY`, for its own author only; [] for any other reader)."""
    out: list[list[dict[str, Any]]] = []
    for message in history:
        if message.get("role") != "assistant":
            continue
        kept = message.get(REASONING_ITEMS_KEY)
        own = author is not None and author_of(message) == dict(author)
        out.append([dict(i) for i in kept if isinstance(i, Mapping)] if own and isinstance(kept, list) else [])
    return out


def request_body(chat: Mapping[str, Any], history: list[Message], author: Mapping[str, str] | None
                 ) -> dict[str, Any]:
    """The Responses body for the Chat Completions body `chat` (as `ChatClient.request_body` built it).

    Leading system messages become `instructions`, later ones developer messages; user and assistant text become
    message items; each assistant tool call becomes a `function_call` item whose `call_id` is the tool call's id
    unchanged, and each tool message a `function_call_output` item with the same `call_id`, in history order (one
    per call, as the history holds them). Tools take the Responses function shape with `strict: false` (Responses
    defaults to strict, which refuses crow's schemas). `store: false` unless the params say otherwise, so the
    reasoning items of the model's own turns go back with their `encrypted_content` (`include:
    ["reasoning.encrypted_content"]`), kept on the assistant message under `history.REASONING_ITEMS_KEY` and sent
    to that same author (base URL and model) only. With `store: true` in the params, a response's id is kept
    (`history.RESPONSE_ID_KEY`) and the next request to the same author sends `previous_response_id` and only the
    items after that response (the instructions again).

    Args:
        chat: `{"model", "messages", "stream", "tools"?, params…}`; `messages` as sent (one per history message).
        history: the stored messages `chat["messages"]` were made from: the source of kept reasoning items.
        author: who this client's turns are written by (`history.AUTHOR_KEY` form): reasoning items go back
            only to it.

    Returns:
        `{"model", "input", "stream": true, "store": false, "include": [...], "instructions"?, "tools"?, …}`. With
        `store: true` (from the params), and the last assistant message a response of `author`'s the server
        stored: `previous_response_id` and the input items after that message only.
    """
    body: dict[str, Any] = {}
    for key, value in chat.items():
        if key not in _CHAT_ONLY:
            body[_PARAM_NAMES.get(key, key)] = value
    if "reasoning_effort" in chat and "reasoning" not in body:
        body["reasoning"] = {"effort": chat["reasoning_effort"]}
    body["stream"] = True
    body.setdefault("store", False)
    if body["store"] is False:
        include = body.get("include")
        include = list(include) if isinstance(include, list) else []
        body["include"] = include + [i for i in ("reasoning.encrypted_content",) if i not in include]
    reasoning = iter(_reasoning_items(history, author))
    items: list[dict[str, Any]] = []
    messages = list(chat.get("messages") or [])
    start = next((i for i, m in enumerate(messages) if m.get("role") not in ("system", "developer")), len(messages))
    instructions = [content_text(m.get("content")) for m in messages[:start]]  # sent on every request
    previous = _previous(history, author) if body["store"] is True and len(messages) == len(history) else None
    if previous is not None:  # the server holds everything up to that response: send what came after it
        body["previous_response_id"] = previous[1]
        start = max(start, previous[0] + 1)
    for message in messages[start:]:
        role = message.get("role")
        if role in ("system", "developer"):
            text = content_text(message.get("content"))
            items.append({"type": "message", "role": "developer", "content": _text_parts(text, "input_text")})
        elif role == "user":
            items.append({"type": "message", "role": "user",
                          "content": _text_parts(message.get("content"), "input_text")})
        elif role == "assistant":
            items += next(reasoning, [])
            if parts := _text_parts(message.get("content"), "output_text"):
                items.append({"type": "message", "role": "assistant", "content": parts})
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                items.append({"type": "function_call", "call_id": call.get("id") or "",
                              "name": function.get("name") or "", "arguments": function.get("arguments") or ""})
        elif role == "tool":
            items.append({"type": "function_call_output", "call_id": message.get("tool_call_id") or "",
                          "output": content_text(message.get("content"))})
    if instructions and "instructions" not in body:
        body["instructions"] = "\n\n".join(instructions)
    body["input"] = items
    if tools := chat.get("tools"):
        body["tools"] = [_function_tool(t) for t in tools if isinstance(t, Mapping)]
        if "tool_choice" in chat:  # a named function: `{"type": "function", "name"}` here
            choice = chat["tool_choice"]
            function = choice.get("function") if isinstance(choice, Mapping) else None
            body["tool_choice"] = {"type": "function", "name": function.get("name")} \
                if isinstance(function, Mapping) else choice
    return body


def _chunk(delta: dict[str, Any], finish_reason: str | None = None, usage: Any = None) -> dict[str, Any]:
    chunk: dict[str, Any] = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def _usage(usage: Any) -> dict[str, Any] | None:
    """Responses `usage` in Chat Completions names (`prompt_tokens`, cached tokens under
    `prompt_tokens_details.cached_tokens`, as `wire.usage` reads them)."""
    if not isinstance(usage, Mapping):
        return None
    out: dict[str, Any] = {}
    for theirs, ours in (("input_tokens", "prompt_tokens"), ("output_tokens", "completion_tokens"),
                         ("total_tokens", "total_tokens")):
        if isinstance(usage.get(theirs), int):
            out[ours] = usage[theirs]
    details = usage.get("input_tokens_details")
    if isinstance(details, Mapping) and isinstance(details.get("cached_tokens"), int):
        out["prompt_tokens_details"] = {"cached_tokens": details["cached_tokens"]}
    details = usage.get("output_tokens_details")
    if isinstance(details, Mapping) and isinstance(details.get("reasoning_tokens"), int):
        out["completion_tokens_details"] = {"reasoning_tokens": details["reasoning_tokens"]}
    return out


_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}
"""`response.incomplete`'s `incomplete_details.reason` → the Chat Completions finish_reason."""


class ChunkTranslator:
    """Streamed Responses events (dicts, in order) → Chat Completions chunk dicts (module docstring).

    One per request. `chunks(event)` for each event, then `end()` once the stream ends.

    Output text becomes `content`, a refusal `refusal`, reasoning summaries (and raw reasoning text) `reasoning`,
    their parts a paragraph apart; each `function_call` output item a tool call whose `index` is its position
    among the turn's function calls (arguments in their fragments; a `.done` or `output_item.done` whose
    arguments no delta carried sends them whole); the reasoning items one private delta field at the end; and
    `response.completed` the finish chunk with its usage in Chat Completions names (cached and reasoning tokens
    included). `response.failed` and an `error` event raise the `ServerError` an error inside a chat stream
    raises; a stream that ends without `response.completed` (or `response.incomplete`) is a `StreamCut`.
    """

    def __init__(self, *, stored: bool = False) -> None:
        self.stored = stored
        """The request asked the server to store the response (`store: true`): its id is kept for the next."""
        self._calls: dict[int, int] = {}  # output_index -> tool-call index (its position among function calls)
        self._call_ids: dict[str, int] = {}  # item id -> tool-call index, for events that name the item only
        self._streamed: set[int] = set()  # tool-call indexes whose arguments came in deltas
        self._text_seen: set[int] = set()  # output indexes whose text came in deltas
        self._reasoning_seen: set[int] = set()
        self._reasoning: list[dict[str, Any]] = []
        self._reasoning_part: tuple[Any, Any] | None = None  # (output index, part index) of the last reasoning
        self._finished = False

    def _call_index(self, event: Mapping[str, Any]) -> int | None:
        index = event.get("output_index")
        if isinstance(index, int) and index in self._calls:
            return self._calls[index]
        item_id = event.get("item_id")
        return self._call_ids.get(item_id) if isinstance(item_id, str) else None

    def _open_call(self, output_index: Any, item: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The chunk that opens the function call `item` (once per output index)."""
        if isinstance(output_index, int) and output_index in self._calls:
            return []
        index = len(self._calls)
        self._calls[output_index if isinstance(output_index, int) else -1 - index] = index
        if isinstance(item.get("id"), str):
            self._call_ids[item["id"]] = index
        call_id = item.get("call_id") if isinstance(item.get("call_id"), str) else ""
        arguments = item.get("arguments") if isinstance(item.get("arguments"), str) else ""
        if arguments:  # a server that opens the call whole (no argument deltas follow)
            self._streamed.add(index)
        function: dict[str, Any] = {"name": item.get("name") if isinstance(item.get("name"), str) else "",
                                    "arguments": arguments}
        return [_chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function", "function": function}]})]

    def chunks(self, event: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The chunk dicts `event` stands for ([] for events that carry nothing crow reads).

        Raises:
            ServerError: `response.failed` or an `error` event (the server's message and code).
        """
        kind = event.get("type")
        if kind == "response.output_text.delta":
            delta = event.get("delta")
            if isinstance(event.get("output_index"), int):
                self._text_seen.add(event["output_index"])
            return [_chunk({"content": delta})] if isinstance(delta, str) and delta else []
        if kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            delta = event.get("delta")
            if not isinstance(delta, str) or not delta:
                return []
            if isinstance(event.get("output_index"), int):
                self._reasoning_seen.add(event["output_index"])
            part = (event.get("output_index"), event.get("summary_index", event.get("content_index")))
            if self._reasoning_part is not None and part != self._reasoning_part:
                delta = "\n\n" + delta  # summary parts are paragraphs: shown apart, not run together
            self._reasoning_part = part
            return [_chunk({"reasoning": delta})]
        if kind == "response.refusal.delta":
            delta = event.get("delta")
            return [_chunk({"refusal": delta})] if isinstance(delta, str) and delta else []
        if kind == "response.output_item.added":
            item = event.get("item")
            if isinstance(item, Mapping) and item.get("type") == "function_call":
                return self._open_call(event.get("output_index"), item)
            return []
        if kind == "response.function_call_arguments.delta":
            index = self._call_index(event)
            delta = event.get("delta")
            if index is None or not isinstance(delta, str) or not delta:
                return []
            self._streamed.add(index)
            return [_chunk({"tool_calls": [{"index": index, "function": {"arguments": delta}}]})]
        if kind == "response.function_call_arguments.done":
            return self._whole_arguments(self._call_index(event), event.get("arguments"))
        if kind == "response.output_item.done":
            return self._item_done(event.get("output_index"), event.get("item"))
        if kind in ("response.completed", "response.incomplete"):
            self._finished = True
            found = event.get("response")
            response: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
            finish = "tool_calls" if self._calls else "stop"
            if kind == "response.incomplete":
                details = response.get("incomplete_details")
                reason = details.get("reason") if isinstance(details, Mapping) else None
                finish = _INCOMPLETE.get(reason, "length") if isinstance(reason, str) else "length"
            end: dict[str, Any] = {REASONING_ITEMS_KEY: self._reasoning} if self._reasoning else {}
            if isinstance(response.get("id"), str) and response["id"] and self.stored:
                end[RESPONSE_ID_KEY] = response["id"]
            return [_chunk(end, finish, _usage(response.get("usage")))]
        if kind == "response.failed":
            failed = event.get("response")
            error = failed.get("error") if isinstance(failed, Mapping) else None
            raise stream_error(error or "the server reported the response as failed")
        if kind == "error":
            raise stream_error(event.get("error") if isinstance(event.get("error"), Mapping) else event)
        return []

    def _whole_arguments(self, index: int | None, arguments: Any) -> list[dict[str, Any]]:
        """The arguments of a call no delta carried, sent whole once ([] when deltas carried them)."""
        if index is None or index in self._streamed or not isinstance(arguments, str) or not arguments:
            return []
        self._streamed.add(index)
        return [_chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]})]

    def _item_done(self, output_index: Any, item: Any) -> list[dict[str, Any]]:
        if not isinstance(item, Mapping):
            return []
        kind = item.get("type")
        if kind == "function_call":
            out = self._open_call(output_index, item)
            index = self._calls.get(output_index) if isinstance(output_index, int) else self._call_index(item)
            return out + self._whole_arguments(index, item.get("arguments"))
        if kind == "reasoning":
            kept = {k: item[k] for k in ("type", "id", "summary", "encrypted_content", "content") if k in item}
            if kept.get("encrypted_content"):
                self._reasoning.append(kept)
            if output_index in self._reasoning_seen:
                return []
            summary = item.get("summary")
            text = "".join(p.get("text") or "" for p in summary if isinstance(p, Mapping)) \
                if isinstance(summary, list) else ""
            return [_chunk({"reasoning": text})] if text else []
        if kind == "message" and output_index not in self._text_seen:
            content = item.get("content")
            text = "".join(p.get("text") or "" for p in content if isinstance(p, Mapping)
                           and p.get("type") == "output_text") if isinstance(content, list) else ""
            return [_chunk({"content": text})] if text else []
        return []

    def end(self) -> None:
        """Raise `StreamCut` when the stream ended before `response.completed` (or `.incomplete`)."""
        if not self._finished:
            raise StreamCut("the stream ended before response.completed (the connection was cut mid-answer)")


async def as_chunks(events: AsyncGenerator[dict[str, Any] | WarningEvent, None], *, stored: bool
                    ) -> AsyncGenerator[dict[str, Any] | WarningEvent, None]:
    """Responses API events as Chat Completions chunk dicts (`ChunkTranslator`; `stored`: the
    request had `store: true`), warnings as they are; raises `StreamCut` when the events end before
    `response.completed`."""
    translator = ChunkTranslator(stored=stored)
    async for event in events:
        if isinstance(event, dict):
            for chunk in translator.chunks(event):
                yield chunk
        else:
            yield event
    translator.end()
