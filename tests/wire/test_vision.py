"""A text-only model's refusal of image parts (`wire.vision`): one final error naming the model, remembered and
saying how to forget it; an image the person attaches is sent whatever is known, and an accepted one clears
the refusal. Bodies from the servers named in `wire.vision`."""

from __future__ import annotations

import json

import httpx
import pytest
import respx

from crow_cli.errors import ProviderError
from crow_cli.wire.client import ChatClient, ClientSettings
from crow_cli.wire.facts import recall
from crow_cli.wire.vision import ImagesRefused, refuses_images
from tests.support import text_sse

URL = "http://llm.test/v1/chat/completions"
PART = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
IMAGE = [{"role": "user", "content": [{"type": "text", "text": "what is this?"}, PART]}]
TEXT = [{"role": "user", "content": "hi"}]

OPENAI = (400, {"error": {"message": "Invalid content type. image_url is only supported by certain models.",
                          "type": "invalid_request_error", "param": "messages.[1].content.[1].type", "code": None}})
VLLM = (400, {"object": "error", "message": "facebook/opt-125m is not a multimodal model None",
              "type": "BadRequestError", "param": None, "code": 400})
LLAMA_CPP = (500, {"error": {"code": 500, "message": "image input is not supported by this server",
                             "type": "server_error"}})
OLLAMA = (400, {"error": {"message": "this model does not support image input", "type": "invalid_request_error"}})


def client(model: str = "m", max_retries: int = 2) -> ChatClient:
    return ChatClient(ClientSettings(base_url="http://llm.test/v1", model=model, api_key="k", max_retries=max_retries))


async def consume(c: ChatClient, messages: list) -> None:
    async for _ in c.stream(messages):
        pass


@pytest.mark.parametrize("refusal", [OPENAI, VLLM, LLAMA_CPP, OLLAMA], ids=["openai", "vllm", "llama.cpp", "ollama"])
async def test_a_refusal_of_images_is_final_names_the_model_and_is_remembered(refusal: tuple[int, dict]) -> None:
    status, body = refusal
    c = client("text-model")
    with respx.mock(assert_all_called=False) as mock:
        route = mock.post(URL).mock(return_value=httpx.Response(status, json=body))
        with pytest.raises(ImagesRefused) as caught:
            await consume(c, IMAGE)
        assert route.call_count == 1  # not adapted, not retried (llama.cpp's 500 too)
    message = str(caught.value)
    assert message.startswith("the model text-model takes no images (the server said: ") and "\n" not in message
    assert "remembered from " in message and "crow facts forget --model text-model" in message
    assert caught.value.exit_code == 1 and not c.takes_images
    assert recall("http://llm.test/v1", "text-model")["images"] is False
    assert not client("text-model").takes_images  # a later run knows it: tools' images go as their names


async def test_an_attached_image_is_sent_though_a_refusal_is_remembered_and_its_success_clears_it() -> None:
    # llama-server restarted with --mmproj: every `-i` run failed with 0 requests, naming no fact
    await refused_once("text-model")
    again = client("text-model")
    assert not again.takes_images
    with respx.mock(assert_all_called=False) as mock:
        route = mock.post(URL).mock(return_value=httpx.Response(200, text=text_sse("a cat")))
        await consume(again, IMAGE)
        assert route.call_count == 1 and json.loads(route.calls[0].request.content)["messages"] == IMAGE
    assert again.takes_images and recall("http://llm.test/v1", "text-model")["images"] is True
    assert client("text-model").takes_images


async def test_a_model_known_text_only_by_name_is_still_sent_an_attached_image() -> None:
    c = client("deepseek-chat")
    assert not c.takes_images
    with respx.mock(assert_all_called=False) as mock:
        route = mock.post(URL).mock(return_value=httpx.Response(200, text=text_sse("x")))
        await consume(c, IMAGE)
        assert route.call_count == 1
    assert c.takes_images and client("deepseek-chat").takes_images  # an accepted image outranks the name


async def refused_once(model: str) -> None:
    with respx.mock(assert_all_called=False) as mock:
        mock.post(URL).mock(return_value=httpx.Response(OLLAMA[0], json=OLLAMA[1]))
        with pytest.raises(ImagesRefused):
            await consume(client(model), IMAGE)


async def test_the_same_words_without_an_image_in_the_request_are_an_ordinary_refusal() -> None:
    c = client(max_retries=0)
    with respx.mock(assert_all_called=False) as mock:
        mock.post(URL).mock(return_value=httpx.Response(400, json=OPENAI[1]))
        with pytest.raises(ProviderError) as caught:
            await consume(c, TEXT)
    assert not isinstance(caught.value, ImagesRefused) and c.takes_images


def test_refusals_that_only_name_the_part_type_count_when_an_image_was_sent() -> None:
    pydantic = json.dumps({"detail": "Validation Error", "errors": [
        {"loc": "body -> messages -> 0 -> content -> list[TextContentPart] -> 0 -> type",
         "msg": "Input should be 'text'", "type": "literal_error", "input": "image_url"}]})
    assert refuses_images(422, pydantic, IMAGE)
    assert not refuses_images(422, pydantic, TEXT)
    assert not refuses_images(400, '{"error": {"message": "Unsupported parameter: seed"}}', IMAGE)
