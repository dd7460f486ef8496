"""Images a tool returns reach the model: a user message of `image_url` parts right after the turn's tool messages
(Chat Completions tool messages carry text only); issue 33 §2."""

from __future__ import annotations

import json

import httpx
import respx

from crow_cli.history import ToolResult, user_message
from crow_cli.images import Image
from crow_cli.loop import LoopSettings, react
from crow_cli.tools.registry import ToolRegistry
from crow_cli.tools.tool import tool
from crow_cli.wire.client import ChatClient, ClientSettings
from tests.support import authorless, chunk, sse, text_sse, tool_delta

URL = "http://llm.test/v1/chat/completions"


def calls_sse(*calls: tuple[str, str, dict]) -> str:
    """A turn calling each (id, name, arguments) in parallel."""
    chunks = [chunk({"tool_calls": [tool_delta(i, cid, name, json.dumps(args))]}) for i, (cid, name, args)
              in enumerate(calls)]
    return sse(*chunks, chunk({}, "tool_calls"))


async def drive(registry: ToolRegistry, responses: list[str], **settings):
    """Run the loop through the real client against scripted responses: (history, events, request bodies)."""
    history = [user_message("go")]
    c = ChatClient(ClientSettings(base_url="http://llm.test/v1", model="m", api_key="k", max_retries=0))
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[
            httpx.Response(200, content=b.encode(), headers={"content-type": "text/event-stream"}) for b in responses])
        events = [e async for e in react(history, c, registry, LoopSettings(**settings))]
    await c.aclose()
    return history, events, [json.loads(call.request.content) for call in route.calls]

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 24
"""The first bytes of a PNG file: enough for crow to tell its kind (it never decodes the picture)."""


@tool
def screenshot(label: str) -> Image:
    """Take a screenshot.

    Args:
        label: what to call it.
    """
    return Image(PNG, "image/png", f"{label}.png")


@tool
def echo(text: str) -> str:
    """Echo text.

    Args:
        text: what to echo.
    """
    return text


@tool
def report(text: str) -> list[str | Image]:
    """Text and an image.

    Args:
        text: the caption.
    """
    return [text, Image(PNG)]


def registry() -> ToolRegistry:
    r = ToolRegistry()
    for t in (screenshot, echo, report):
        r.register(t)
    return r


async def test_a_tool_image_goes_in_a_user_message_after_every_tool_message() -> None:
    history, _, bodies = await drive(registry(), [
        calls_sse(("call_1", "screenshot", {"label": "home"}), ("call_2", "echo", {"text": "hi"}),
                  ("call_3", "report", {"text": "caption"})),
        text_sse("I see it")])
    roles = [m["role"] for m in bodies[1]["messages"]]
    assert roles == ["user", "assistant", "tool", "tool", "tool", "user"]  # all N tool messages first
    tools = [m for m in bodies[1]["messages"] if m["role"] == "tool"]
    assert [t["tool_call_id"] for t in tools] == ["call_1", "call_2", "call_3"]
    assert tools[0]["content"] == "[image: home.png, image/png, 32 B]"  # text only, naming the image
    assert tools[1]["content"] == "hi"
    assert tools[2]["content"] == "caption\n[image: image/png, 32 B]"
    shown = bodies[1]["messages"][-1]["content"]
    assert shown[0]["type"] == "text"
    assert "screenshot (call_1)" in shown[0]["text"] and "report (call_3)" in shown[0]["text"]
    urls = [p["image_url"]["url"] for p in shown[1:]]
    assert urls == [Image(PNG, "image/png").data_url()] * 2
    assert authorless(history)[-1] == {"role": "assistant", "content": "I see it"}  # the loop's history holds it
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "tool", "tool", "user", "assistant"]


async def test_a_tool_image_is_named_in_the_history_and_not_on_the_wire() -> None:
    # resume, export and an editor's replay show `[image: NAME, SIZE]`: the image's own name, else its tool's
    from crow_cli.images import describe_part

    history, _, bodies = await drive(registry(), [
        calls_sse(("call_1", "screenshot", {"label": "home"}), ("call_2", "report", {"text": "caption"})),
        text_sse("I see it")])
    kept = history[4]["content"][1:]
    assert [describe_part(p) for p in kept] == ["[image: home.png, 32 B]", "[image: from report, 32 B]"]
    assert bodies[1]["messages"][-1]["content"][1:] == [
        {"type": "image_url", "image_url": {"url": Image(PNG, "image/png").data_url()}}] * 2


async def test_a_model_known_to_take_no_images_gets_the_placeholders_only() -> None:
    _, _, bodies = await drive(registry(), [calls_sse(("c1", "screenshot", {"label": "x"})), text_sse("ok")],
                               images=False)
    assert [m["role"] for m in bodies[1]["messages"]] == ["user", "assistant", "tool"]
    assert bodies[1]["messages"][-1]["content"] == "[image: x.png, image/png, 32 B]"


async def test_a_turn_without_images_adds_no_message() -> None:
    _, _, bodies = await drive(registry(), [calls_sse(("c1", "echo", {"text": "a"})), text_sse("ok")])
    assert [m["role"] for m in bodies[1]["messages"]] == ["user", "assistant", "tool"]


def test_a_tool_result_keeps_its_images_off_the_tool_message() -> None:
    result = ToolResult("c1", "shot", "[image: image/png, 32 B]", images=(Image(PNG),))
    assert result.to_message() == {"role": "tool", "tool_call_id": "c1", "content": "[image: image/png, 32 B]",
                                   "crow_outcome": "ok"}


async def test_the_tool_api_returns_text_for_an_image() -> None:
    assert await screenshot.invoke({"label": "a"}) == "[image: a.png, image/png, 32 B]"
    out = await report.run({"text": "t"})
    assert out.text == "t\n[image: image/png, 32 B]" and out.images == (Image(PNG, "image/png"),)
    assert (await tool(lambda: ["a", "b"], name="rows").run({})).text == '["a", "b"]'  # a list without images: JSON


def test_the_images_message_is_no_prompt() -> None:
    # undo, chat's resume and compaction's cut look for the last prompt: the images message belongs to its turn
    from crow_cli.history import is_prompt, user_message
    from crow_cli.images import tool_images_message

    shown = tool_images_message([("screenshot", "c1", [Image(PNG)])])
    assert shown is not None and not is_prompt(shown)
    assert is_prompt(user_message("hi")) and is_prompt({"role": "user", "content": [{"type": "text", "text": "x"}]})
    assert not is_prompt({"role": "assistant", "content": "hi"})


def test_a_jsonl_tool_result_names_its_images_without_their_bytes() -> None:
    from crow_cli.events import ToolResultReady
    from crow_cli.surfaces.jsonl import event_to_json
    from tests.support import schema_validator

    result = ToolResult("c1", "shot", "[image]", images=(Image(PNG, name="a"),))
    line = json.loads(event_to_json(ToolResultReady(result)))
    assert line["result"]["images"] == [{"mime_type": "image/png", "bytes": 32, "name": "a"}]
    schema_validator().validate(line)


async def test_images_past_the_caps_are_named_not_sent() -> None:
    @tool
    def many() -> list[Image]:
        """Too many images, one of no known kind."""
        return [Image(PNG)] * 9 + [Image(b"not an image", "image/tiff")]

    r = ToolRegistry()
    r.register(many)
    _, _, bodies = await drive(r, [calls_sse(("c1", "many", {})), text_sse("ok")])
    tool_text = bodies[1]["messages"][2]["content"]
    assert tool_text.endswith("[2 images not shown to the model (more than 8, larger than 10 MiB, or not PNG, JPEG, "
                              "GIF or WebP): [image: image/png, 32 B], [image: image/tiff, 12 B]]")
    assert len(bodies[1]["messages"][3]["content"]) == 1 + 8


async def test_a_cancelled_turn_still_shows_the_images_of_its_finished_calls() -> None:
    import asyncio
    import contextlib

    from crow_cli.events import ToolResultReady

    never = asyncio.Event()

    @tool
    async def hang() -> str:
        """Wait for ever."""
        await never.wait()
        return "never"

    r = registry()
    r.register(hang)
    history = [user_message("go")]
    c = ChatClient(ClientSettings(base_url="http://llm.test/v1", model="m", api_key="k", max_retries=0))
    shot = asyncio.Event()

    async def consume() -> None:
        async for e in react(history, c, r, LoopSettings()):
            if isinstance(e, ToolResultReady) and e.result.name == "screenshot":
                shot.set()

    with respx.mock() as mock:
        mock.post(URL).mock(return_value=httpx.Response(
            200, content=calls_sse(("c1", "screenshot", {"label": "a"}), ("c2", "hang", {})).encode(),
            headers={"content-type": "text/event-stream"}))
        task = asyncio.create_task(consume())
        await shot.wait()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await c.aclose()
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "tool", "user"]
    assert history[3]["content"].startswith("Error: the tool call was cancelled")
    assert history[4]["content"][1]["image_url"]["url"] == Image(PNG, "image/png").data_url()


async def test_read_file_shows_an_image_file(tmp_path, monkeypatch) -> None:
    # A screenshot in the workspace was "a binary file; not read" (issue 33 §2)
    from crow_cli.tools.builtin.files import read_file

    monkeypatch.chdir(tmp_path)
    (tmp_path / "shot.png").write_bytes(PNG)
    out = await read_file.run({"path": "shot.png"})
    assert out.text == "[image: shot.png, image/png, 32 B]" and out.images == (Image(PNG, "image/png", "shot.png"),)
