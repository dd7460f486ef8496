"""The loop sends a valid history and compacts when the window is near or overflowed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from crow_cli.context.budget import Budget, estimate_tokens
from crow_cli.context.compact import SUMMARY_PREFIX, Compactor
from crow_cli.errors import ContextOverflow, ServerError
from crow_cli.events import Notice, RunFinished, WarningEvent
from crow_cli.history import Message, ToolCall, assistant_message, tool_message, user_message
from crow_cli.loop import LoopSettings, react
from crow_cli.wire.protocol import ChatStream
from tests.support import assert_contract


def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}


class Recording(ChatStream):
    """A `ChatStream` that records every request and plays scripted steps: "text", "summary",
    "overflow" (a ContextOverflow refusal), "error" (a 500)."""

    def __init__(self, steps: list[str]) -> None:
        self.steps = list(steps)
        self.requests: list[tuple[list[Message], Any]] = []

    async def stream(self, messages: list[Message], tools: list[dict[str, Any]] | None = None
                     ) -> AsyncIterator[dict[str, Any]]:
        self.requests.append(([dict(m) for m in messages], tools))
        step = self.steps.pop(0) if self.steps else "text"
        await asyncio.sleep(0)
        if step == "overflow":
            raise ContextOverflow("This model's maximum context length is 8192 tokens", status=400,
                                  code="context_length_exceeded", n_ctx=None)
        if step == "error":
            raise ServerError("server error (500): scripted")
        text = "SUMMARY: the user asked things" if step == "summary" else "done"
        yield _chunk({"content": text})
        yield _chunk({}, "stop", usage={"prompt_tokens": 100, "completion_tokens": 5})


async def _run(history: list[Message], client: Recording, compactor: Compactor | None = None) -> list[Any]:
    return [e async for e in react(history, client, None, LoopSettings(), compactor=compactor)]


def _long_history(exchanges: int, tool_chars: int = 1500) -> list[Message]:
    history: list[Message] = [{"role": "system", "content": "be brief"}]
    for n in range(exchanges):
        history.append(user_message(f"request {n}"))
        history.append(assistant_message(None, [ToolCall(f"call_{n}", "read_file", '{"path": "x"}')]))
        history.append(tool_message(f"call_{n}", f"output {n} " + "x" * tool_chars))
        history.append(assistant_message(f"answer {n}"))
    return history


async def test_after_a_failed_turn_the_next_request_has_no_two_user_messages_in_a_row() -> None:
    # A failed turn leaves no stray user message (Mistral/Gemma templates refuse two in a row)
    history = [user_message("first")]
    client = Recording(["error", "text"])
    events = await _run(history, client)
    assert isinstance(events[-1], RunFinished) and events[-1].status == "error"
    history.append(user_message("second"))
    await _run(history, client)
    sent = client.requests[-1][0]
    assert [m["role"] for m in sent] == ["user", "assistant"][:1] and sent[0]["content"] == "first\n\nsecond"
    assert [m["role"] for m in history] == ["user", "user", "assistant"]  # the stored history keeps both


async def test_near_the_window_old_exchanges_are_summarised_and_tool_pairs_kept() -> None:
    history = _long_history(10)
    history.append(user_message("go on"))
    window = int(estimate_tokens(history) / 0.9)  # the history is at 90 % of the window
    compactor = Compactor(Budget(window=window))
    client = Recording(["summary", "text"])
    events = await _run(history, client, compactor)
    assert events[-1].status == "completed"
    summary_request, turn_request = client.requests[0][0], client.requests[1][0]
    assert client.requests[0][1] is None  # no tools offered for the summary
    assert "request 0" in summary_request[-1]["content"]  # the oldest exchanges went to the summary
    assert turn_request[0] == {"role": "system", "content": "be brief"}
    assert turn_request[1]["role"] == "user" and turn_request[1]["content"].startswith(SUMMARY_PREFIX)
    assert turn_request[-1]["content"] == "go on"
    assert "answer 9" in [m.get("content") for m in turn_request]  # the last exchanges verbatim
    assert_contract(turn_request)
    assert estimate_tokens(turn_request) < window * 0.6
    codes = [e.code for e in events if isinstance(e, Notice)]
    assert codes == ["compacting", "compacted"]
    compacted = next(e for e in events if isinstance(e, Notice) and e.code == "compacted")
    assert compacted.tokens_before is not None and compacted.tokens_after is not None
    assert compacted.tokens_after < compacted.tokens_before
    assert len(history) == 10 * 4 + 3  # the stored history keeps every message (and the new answer)
    # the next request starts from the checkpoint
    history.append(user_message("more"))
    await _run(history, client, compactor)
    assert client.requests[-1][0][1]["content"].startswith(SUMMARY_PREFIX)


async def test_an_overflow_compacts_and_retries_the_turn_once() -> None:
    history = _long_history(6)
    history.append(user_message("go on"))
    compactor = Compactor(Budget())  # window unknown: only the refusal tells
    client = Recording(["overflow", "summary", "text"])
    events = await _run(history, client, compactor)
    assert events[-1].status == "completed" and events[-1].final_text == "done"
    assert len(client.requests) == 3
    retried = client.requests[2][0]
    assert retried[1]["content"].startswith(SUMMARY_PREFIX) and retried[-1]["content"] == "go on"
    assert_contract(retried)


async def test_a_second_overflow_ends_the_run_with_the_error() -> None:
    history = _long_history(4)
    history.append(user_message("go on"))
    client = Recording(["overflow", "summary", "overflow"])
    events = await _run(history, client, Compactor(Budget()))
    assert events[-1].status == "error" and "maximum context length" in (events[-1].error or "")


async def test_shortening_old_tool_outputs_may_be_enough() -> None:
    history = _long_history(6, tool_chars=20_000)
    history.append(user_message("go on"))
    window = int(estimate_tokens(history) / 0.9)
    client = Recording(["text"])
    events = await _run(history, client, Compactor(Budget(window=window)))
    assert len(client.requests) == 1  # no summary request
    sent = client.requests[0][0]
    assert "characters of this tool output to save context" in sent[3]["content"]
    assert [e.code for e in events if isinstance(e, Notice)] == ["compacted"]


async def test_a_failed_summary_is_a_warning_and_the_turn_goes_on() -> None:
    history = _long_history(10)
    history.append(user_message("go on"))
    client = Recording(["error", "text"])
    events = await _run(history, client, Compactor(Budget(window=int(estimate_tokens(history) / 0.9))))
    assert any(isinstance(e, WarningEvent) and "could not compact" in e.message for e in events)
    assert events[-1].status == "completed"


async def test_a_summary_names_the_images_it_leaves_out() -> None:
    # A summary is text: the images of the summarised messages are said to be gone
    from crow_cli.images import Image, image_part, tool_images_message

    png = Image(b"\x89PNG\r\n\x1a\n" + b"\0" * 24, name="shot.png")
    history = _long_history(10)
    history[1] = {"role": "user", "content": [{"type": "text", "text": "request 0"}, image_part(png)]}
    history.insert(4, tool_images_message([("read_file", "call_0", [png])]))  # after call_0's result
    history.append(user_message("go on"))
    compactor = Compactor(Budget(window=int(estimate_tokens(history) / 0.9)))
    client = Recording(["summary", "text"])
    events = await _run(history, client, compactor)
    turn_request = client.requests[1][0]
    summary = turn_request[1]["content"]
    assert summary.startswith(SUMMARY_PREFIX)
    assert ("[crow: the summary stands for 2 images the model no longer sees: [image: image/png, 32 B], "
            "[image: image/png, 32 B]]") in summary
    compacted = next(e for e in events if isinstance(e, Notice) and e.code == "compacted")
    assert "left out 2 images of the summarised messages" in compacted.message
    assert_contract(turn_request)
