"""Each provider's "the conversation no longer fits" error becomes one `ContextOverflow`, with the window
and the prompt size when the server said them (issue 13: a long session must be told apart from any 400)."""

from __future__ import annotations

import json

import httpx
import pytest
import respx

from crow_cli.errors import ContextOverflow, ProviderError
from crow_cli.history import user_message
from crow_cli.wire.client import ChatClient, ClientSettings
from tests.support import chunk, sse

BASE = "http://llm.test/v1"
URL = f"{BASE}/chat/completions"


def error(message: str, **fields: object) -> dict:
    return {"error": {"message": message, **fields}}


OVERFLOWS = [
    pytest.param(400, error("This model's maximum context length is 128000 tokens. However, your messages resulted "
                            "in 130512 tokens. Please reduce the length of the messages.", type="invalid_request_error",
                            param="messages", code="context_length_exceeded"), 128000, 130512, id="openai"),
    pytest.param(400, {"object": "error", "message": "This model's maximum context length is 4096 tokens. However, you "
                       "requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the "
                       "length of the messages or completion.", "type": "BadRequestError", "param": None,
                       "code": 400}, 4096, 4000, id="vllm"),
    pytest.param(400, error("The decoder prompt (length 5210) is longer than the maximum model length of 4096. Make "
                            "sure that `max_model_len` is no smaller than the number of text tokens.",
                            type="BadRequestError", code=400), 4096, 5210, id="vllm-new"),
    pytest.param(400, error("the request exceeds the available context size, try increasing it",
                            type="exceed_context_size_error", code=400, n_prompt_tokens=9000, n_ctx=8192),
                 8192, 9000, id="llama.cpp"),
    pytest.param(400, error("litellm.ContextWindowExceededError: litellm.BadRequestError: ContextWindowExceededError: "
                            "OpenAIException - This model's maximum context length is 8192 tokens.",
                            type=None, code="400"), 8192, None, id="litellm"),
    pytest.param(400, error("prompt is too long: 210433 tokens > 200000 maximum", type="invalid_request_error"),
                 200000, 210433, id="anthropic-compatible"),
    pytest.param(400, error("This model's maximum context length is 65536 tokens. However, you requested 70313 tokens "
                            "(70313 in the messages, 0 in the completion). Please reduce the length of the messages "
                            "or completion.", type="invalid_request_error", code="invalid_request_error"),
                 65536, 70313, id="deepseek"),
    pytest.param(400, {"object": "error", "message": "Prompt contains 33655 tokens and 0 draft tokens, too large for "
                       "model with 32768 maximum context length", "type": "invalid_request_message_error",
                       "param": None, "code": "3051"}, 32768, 33655, id="mistral"),
    pytest.param(400, error("The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
                            status="INVALID_ARGUMENT", code=400), 1048576, 1200000, id="gemini"),
    pytest.param(413, error("Request too large for model: context_length_exceeded"), None, None, id="no-numbers"),
]


async def failure(response: httpx.Response) -> ProviderError:
    c = ChatClient(ClientSettings(base_url=BASE, model="m", api_key="sk-test", max_retries=0))
    with respx.mock() as mock:
        mock.post(URL).mock(return_value=response)
        with pytest.raises(ProviderError) as caught:
            try:
                [_ async for _ in c.stream([user_message("hi")])]
            finally:
                await c.aclose()
    return caught.value


@pytest.mark.parametrize(("status", "body", "n_ctx", "prompt_tokens"), OVERFLOWS)
async def test_a_context_overflow_is_named_with_its_numbers(status, body, n_ctx, prompt_tokens) -> None:
    err = await failure(httpx.Response(status, json=body))
    assert isinstance(err, ContextOverflow), err
    assert (err.n_ctx, err.prompt_tokens, err.status) == (n_ctx, prompt_tokens, status)
    assert str(err).startswith("the conversation is too long for the model's context window")
    if n_ctx:
        assert f"{n_ctx} tokens" in str(err)


async def test_an_overflow_reported_inside_the_stream_is_one_too() -> None:
    body = sse(chunk({"content": ""}), done=False) + "data: " + json.dumps(error(
        "This model's maximum context length is 4096 tokens. However, you requested 4500 tokens.", code=400)) + "\n\n"
    err = await failure(httpx.Response(200, content=body.encode(), headers={"content-type": "text/event-stream"}))
    assert isinstance(err, ContextOverflow) and err.n_ctx == 4096 and err.prompt_tokens == 4500


@pytest.mark.parametrize("message", ["Invalid value for 'temperature'", "max_tokens is too large: 99999",
                                     "context: unknown field"])
async def test_other_refusals_are_not_overflows(message) -> None:
    err = await failure(httpx.Response(400, json=error(message)))
    assert not isinstance(err, ContextOverflow)
