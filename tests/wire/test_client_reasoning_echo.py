"""Reasoning that must, or must not, go back to the server (issue 10 item 4).

DeepSeek's thinking mode answers 400 unless an assistant message with tool calls carries its
`reasoning_content`; Mistral (and LiteLLM in front of it) answers 422 `extra_forbidden` when any message
carries it. `reasoning_echo = "auto"` echoes it beside tool calls and adapts, once per request, to either
answer; `always` / `never` do as they say.
"""

from __future__ import annotations

import json

import httpx
import pytest
import respx

from crow_cli.errors import ProviderError
from crow_cli.events import Notice, RunFinished
from crow_cli.history import AssistantTurn, ToolCall, assistant_message, tool_message, user_message
from crow_cli.loop import LoopSettings, react
from crow_cli.wire.client import ChatClient, ClientSettings
from crow_cli.wire.profiles import field_demanded, field_refused
from tests.support import chunk, sse, text_sse, tool_delta

BASE = "http://llm.test/v1"
URL = f"{BASE}/chat/completions"
THOUGHT = "The user wants a conversion; use the rates tool."
# Mistral via LiteLLM, https://github.com/BerriAI/litellm/issues/30835
# (../shared/conformance/cases/mistral-reasoning-content-forbidden.json)
MISTRAL_422 = {"object": "error", "message": {"detail": [{"type": "extra_forbidden", "loc": [
    "body", "messages", 1, "assistant", "reasoning_content"], "msg": "Extra inputs are not permitted",
    "input": THOUGHT}]}, "type": "invalid_request_error", "param": None, "code": None}
# DeepSeek thinking mode with tools (api-docs.deepseek.com, "thinking mode" tool calls)
DEEPSEEK_400 = {"error": {"message": "The reasoning_content in the thinking mode must be passed back to the API.",
                          "type": "invalid_request_error", "param": None, "code": "invalid_request_error"}}


def streamed(body: str) -> httpx.Response:
    return httpx.Response(200, content=body.encode(), headers={"content-type": "text/event-stream"})


def tool_turn(reasoning_key: str | None = "reasoning_content") -> httpx.Response:
    thinking = [chunk({"role": "assistant", reasoning_key: THOUGHT})] if reasoning_key else []
    return streamed(sse(*thinking, chunk({"tool_calls": [tool_delta(0, "call_1", "get_rate", '{"to": "JPY"}')]}),
                        chunk({}, "tool_calls")))


def history_with_tool_turn(reasoning: str | None = THOUGHT) -> list[dict]:
    turn = AssistantTurn(content=None, reasoning=reasoning, tool_calls=[ToolCall("call_1", "get_rate", "{}")],
                         finish_reason="tool_calls")
    return [user_message("rate?"), turn.to_message(), tool_message("call_1", "160"),
            assistant_message("160 yen."), user_message("and USD?")]


def sent(route: respx.Route, n: int) -> list[dict]:
    return json.loads(route.calls[n].request.content)["messages"]


def has_reasoning(messages: list[dict]) -> bool:
    return any("reasoning_content" in m or "reasoning" in m for m in messages)


async def drain(c: ChatClient, messages: list[dict]) -> list:
    return [item async for item in c.stream(messages)]


def client(echo: str = "auto") -> ChatClient:
    return ChatClient(ClientSettings(base_url=BASE, model="m", api_key="sk-test", max_retries=0, reasoning_echo=echo))


def test_the_reasoning_of_a_turn_is_kept_with_its_message_under_the_servers_field() -> None:
    calls = [ToolCall("c", "f", "{}")]
    assert AssistantTurn(reasoning="r", tool_calls=calls).to_message()["reasoning_content"] == "r"
    assert AssistantTurn(tool_calls=calls, fields={"reasoning": "r"}).to_message()["reasoning"] == "r"
    # kept on every assistant message: whether it goes back is the client's decision (wire.outgoing)
    assert AssistantTurn(content="hi", reasoning="r").to_message()["reasoning_content"] == "r"
    assert AssistantTurn(content="hi", fields={"reasoning": "r"}).to_message()["reasoning"] == "r"
    assert "reasoning_content" not in AssistantTurn(tool_calls=calls).to_message()


async def test_auto_echoes_reasoning_beside_tool_calls_through_the_loop() -> None:
    history = [user_message("rate?")]
    c = client()
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[tool_turn(), streamed(text_sse("160 yen."))])
        events = [e async for e in react(history, c, None, LoopSettings())]
    assert isinstance(events[-1], RunFinished) and events[-1].status == "completed"
    assistant = sent(route, 1)[1]
    assert assistant["reasoning_content"] == THOUGHT and assistant["tool_calls"][0]["id"] == "call_1"
    assert history[1]["reasoning_content"] == THOUGHT  # kept in the history (and so in the session)


async def test_a_server_streaming_reasoning_gets_it_back_under_that_name() -> None:
    c = client()
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[tool_turn("reasoning"), streamed(text_sse("ok"))])
        history = [user_message("rate?")]
        [_ async for _ in react(history, c, None, LoopSettings())]
    assistant = sent(route, 1)[1]
    assert assistant["reasoning"] == THOUGHT and "reasoning_content" not in assistant


async def test_auto_sends_reasoning_for_exchanges_that_used_tools_only() -> None:
    # the final answer after the tool results keeps its reasoning too (also on the next user prompt);
    # an exchange without tools sends none
    history = history_with_tool_turn()
    history[3] = {**history[3], "reasoning_content": "final thoughts"}
    history += [{"role": "assistant", "content": "ok", "reasoning_content": "plain thoughts"}, user_message("bye")]
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(return_value=streamed(text_sse("ok")))
        await drain(client(), history)
    messages = sent(route, 0)
    assert messages[1]["reasoning_content"] == THOUGHT and messages[3]["reasoning_content"] == "final thoughts"
    assert "reasoning_content" not in messages[5]
    assert history[5]["reasoning_content"] == "plain thoughts"  # the history itself is never changed


# tests/cases/mistral-reasoning-content-forbidden.json: found in LiteLLM issue 30835
async def test_a_422_forbidding_the_field_drops_it_everywhere_retries_once_and_remembers() -> None:
    c = client()
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[httpx.Response(422, json=MISTRAL_422), streamed(text_sse("ok")),
                                                 streamed(text_sse("again"))])
        items = await drain(c, history_with_tool_turn())
        await drain(c, history_with_tool_turn())
    notices = [i for i in items if isinstance(i, Notice)]
    assert [n.code for n in notices] == ["reasoning_echo"]
    assert "refuses reasoning_content" in notices[0].message and "(422)" in notices[0].message
    assert has_reasoning(sent(route, 0)) and not has_reasoning(sent(route, 1)) and not has_reasoning(sent(route, 2))
    assert sent(route, 0)[2:] == sent(route, 1)[2:]  # nothing else changed


async def test_a_400_demanding_the_field_adds_it_beside_every_tool_call_retries_once_and_remembers() -> None:
    c = client()
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[httpx.Response(400, json=DEEPSEEK_400), streamed(text_sse("ok")),
                                                 streamed(text_sse("again"))])
        items = await drain(c, history_with_tool_turn(reasoning=None))
        await drain(c, history_with_tool_turn(reasoning=None))
    assert [i.code for i in items if isinstance(i, Notice)] == ["reasoning_echo"]
    assert "reasoning_content" not in sent(route, 0)[1]
    for n in (1, 2):  # on every assistant message
        assert sent(route, n)[1]["reasoning_content"] == "" and sent(route, n)[3]["reasoning_content"] == ""


async def test_never_more_than_one_resend_for_the_same_request() -> None:
    c = client()
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[httpx.Response(422, json=MISTRAL_422)] * 2)
        with pytest.raises(ProviderError, match=r"request rejected \(422\)"):
            await drain(c, history_with_tool_turn())
    assert route.call_count == 2


async def test_never_strips_every_reasoning_field_and_always_keeps_them_whatever_the_server_says() -> None:
    history = history_with_tool_turn()
    history[0] = {**history[0], "reasoning": "x"}
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(return_value=streamed(text_sse("ok")))
        await drain(client("never"), history)
    assert not has_reasoning(sent(route, 0))
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[httpx.Response(422, json=MISTRAL_422)])
        with pytest.raises(ProviderError, match="422"):
            await drain(client("always"), history)
    assert sent(route, 0)[1]["reasoning_content"] == THOUGHT and sent(route, 0)[0]["reasoning"] == "x"


@pytest.mark.parametrize(("status", "body", "sent_fields", "refused"), [
    (422, json.dumps(MISTRAL_422), {"reasoning_content"}, "reasoning_content"),
    (400, '{"error": {"message": "Unrecognized field: messages[1].reasoning"}}', {"reasoning"}, "reasoning"),
    (400, '{"error": {"message": "additionalProperties: reasoning_content is not allowed"}}', {"reasoning_content"},
     "reasoning_content"),
    (422, json.dumps(MISTRAL_422), set(), None),  # not sent: nothing to drop
    (400, '{"error": {"message": "unknown model"}}', {"reasoning_content"}, None),
    (500, json.dumps(MISTRAL_422), {"reasoning_content"}, None),
])
def test_which_errors_refuse_a_reasoning_field(status, body, sent_fields, refused) -> None:
    assert field_refused(status, body, sorted(sent_fields)) == refused


@pytest.mark.parametrize(("status", "body", "wanted"), [
    (400, json.dumps(DEEPSEEK_400), "reasoning_content"),
    (400, '{"error": {"message": "Missing `reasoning_content` field in the assistant message at index 1"}}',
     "reasoning_content"),
    (400, '{"error": {"message": "messages: field required"}}', None),
    (422, json.dumps(DEEPSEEK_400), "reasoning_content"),
    (500, json.dumps(DEEPSEEK_400), None),
])
def test_which_errors_demand_a_reasoning_field(status, body, wanted) -> None:
    assert field_demanded(status, body, ["reasoning_content", "reasoning"]) == wanted


def test_an_unknown_reasoning_echo_value_is_refused() -> None:
    with pytest.raises(ValueError, match="reasoning_echo"):
        client("sometimes")


def test_reasoning_echo_comes_from_the_config_file_and_its_profiles(tmp_path) -> None:
    from crow_cli.config import load_settings
    from crow_cli.errors import ConfigError

    config = tmp_path / "crow.toml"
    config.write_text('reasoning_echo = "never"\n[profiles.deepseek]\nreasoning_echo = "always"\n')
    assert load_settings({}, env={}).reasoning_echo == "auto"
    assert load_settings({}, env={}, config_path=str(config)).reasoning_echo == "never"
    assert load_settings({}, env={}, config_path=str(config), profile="deepseek").reasoning_echo == "always"
    config.write_text('reasoning_echo = "sometimes"\n')
    with pytest.raises(ConfigError, match="reasoning_echo must be one of auto, always, never"):
        load_settings({}, env={}, config_path=str(config))
