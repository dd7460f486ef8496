"""Provider knowledge as data: profiles by host, config overrides, and the wording of refusals."""

from __future__ import annotations

import json

import httpx
import pytest
import respx

from crow_cli.config import load_settings, require_api_key
from crow_cli.errors import ConfigError
from crow_cli.history import AssistantTurn, ToolCall, tool_message, user_message
from crow_cli.wire.client import ChatClient, ClientSettings
from crow_cli.wire.profiles import KEYED_HOSTS, check_overrides, profile_for
from crow_cli.wire.refusal import field_demanded, field_refused
from tests.support import text_sse

GEMINI = "https://generativelanguage.googleapis.com/v1beta/openai"


def test_a_profile_is_found_by_host_and_overridden_by_the_config_table():
    assert profile_for("https://openrouter.ai/api/v1").name == "openrouter"
    assert profile_for("http://127.0.0.1:8080/v1").name == "generic"
    assert profile_for(GEMINI).tool_message_name is True
    from crow_cli.wire.profile import build_profile

    local = build_profile("http://127.0.0.1:8080/v1", "m", {"reasoning_fields": ["thinking"], "refused_fields": ["x"]})
    assert local.reasoning_fields == ("thinking",) and local.message_facts()["refused_fields"] == ["x"]
    assert "api.openai.com" in KEYED_HOSTS and GEMINI.split("/")[2] in KEYED_HOSTS


@pytest.mark.parametrize(("table", "problem"), [
    ({"needs_key": True, "refused_fields": ["reasoning_content"]}, None),
    ({"nope": 1}, "[provider] has no key 'nope'"),
    ({"refused_fields": "reasoning"}, "must be a list of names"),
    ({"tool_message_name": "yes"}, "must be true or false"),
    # request rules in the config are the same rules as built-in and learned ones
    ({"request_rules": ["drop seed"]}, "[provider] request_rules must be a list of tables (op, target, value)"),
    ({"request_rules": [{"op": "drop_param", "target": "x" * 65}]}, "[provider] request_rules[0]: 'xxxx"),
    # reasoning_fields = ["content"] is refused (it would send [{"role": "user"}] without the prompt)
    ({"reasoning_fields": ["content"]}, "[provider] reasoning_fields may not name 'content'"),
    ({"refused_fields": ["tool_calls"]}, "[provider] refused_fields may not name 'tool_calls'"),
    ({"required_fields": ["role"]}, "[provider] required_fields may not name 'role'"),
    ({"refused_fields": ["x" * 100]}, "is not a field name"),
    ({"refused_fields": ["a b"]}, "is not a field name"),
    ({"refused_fields": [f"f{i}" for i in range(40)]}, "at most 32"),
    ({"reasoning_fields": ["reasoning_content", "thinking"]}, None),
])
def test_the_config_table_is_checked(table, problem):
    found = check_overrides(table)
    assert found == problem if problem is None else problem in (found or "")


def test_provider_table_in_the_config_file_reaches_the_settings(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('base_url = "http://127.0.0.1:9/v1"\n[provider]\nneeds_key = true\n'
                      'reasoning_fields = ["thinking"]\n')
    settings = load_settings({}, env={}, config_path=str(config))
    assert settings.provider == {"needs_key": True, "reasoning_fields": ["thinking"]}
    with pytest.raises(ConfigError, match="no API key"):  # the override makes this server need a key
        require_api_key(settings)
    config.write_text('[provider]\nrefused_fields = "x"\n')
    with pytest.raises(ConfigError, match="must be a list of names"):
        load_settings({}, env={}, config_path=str(config))
    # request rules in the config are read as rules when the config is read
    config.write_text('[provider]\nrequest_rules = [{op = "drop_param", target = "seed"}]\n')
    assert load_settings({}, env={}, config_path=str(config)).provider["request_rules"] == [
        {"op": "drop_param", "target": "seed"}]
    config.write_text('[provider]\nrequest_rules = [{op = "drop_parameter", target = "seed"}]\n')
    with pytest.raises(ConfigError, match=r"request_rules\[0\]: no rule 'drop_parameter'"):
        load_settings({}, env={}, config_path=str(config))


async def test_gemini_gets_the_function_name_on_tool_messages_from_the_first_request():
    history = [user_message("rate?"),
               AssistantTurn(tool_calls=[ToolCall("c1", "get_rate", "{}")]).to_message(), tool_message("c1", "160")]
    client = ChatClient(ClientSettings(base_url=GEMINI, model="gemini-2.5-flash", api_key="k-test", max_retries=0))
    with respx.mock() as mock:
        route = mock.post(f"{GEMINI}/chat/completions").mock(
            return_value=httpx.Response(200, text=text_sse("ok"), headers={"content-type": "text/event-stream"}))
        [_ async for _ in client.stream(history)]
    await client.aclose()
    assert json.loads(route.calls[0].request.content)["messages"][2]["name"] == "get_rate"


def test_a_configured_reasoning_field_is_assembled_under_its_name():
    client = ChatClient(ClientSettings(base_url="http://127.0.0.1:9/v1", model="m",
                                       provider={"reasoning_fields": ["thinking"]}))
    assert client.reasoning_fields == ("thinking",)


@pytest.mark.parametrize(("status", "text", "sent", "refused"), [
    # Gemini words every unknown field `Unknown name "x"`: that is x, not a field called name
    (400, 'Invalid JSON payload received. Unknown name "extra_content" at \'messages[1].tool_calls[0]\': Cannot '
          'find field.', ["name", "extra_content"], "extra_content"),
    (422, '{"detail": [{"type": "extra_forbidden", "loc": ["body", "messages", 2, "name"]}]}', ["name"], "name"),
    (400, "Unrecognized request argument supplied: reasoning_details", ["reasoning_details"], "reasoning_details"),
    (400, "The reasoning_content in the thinking mode must be passed back to the API.", ["reasoning_content"], None),
])
def test_which_refusals_name_which_field(status, text, sent, refused):
    assert field_refused(status, text, sent) == refused


def test_a_demand_names_the_tool_message_name_only_where_it_is_that_field():
    gemini = "* GenerateContentRequest.contents[2].parts[0].function_response.name: Name cannot be empty."
    assert field_demanded(400, gemini, ["reasoning_content", "name"]) == "name"
    assert field_demanded(400, "model name is invalid", ["name"]) is None


@pytest.mark.parametrize("text", ["Each tool message must include the function name.",
                                  "messages[2]: name is required for role tool",
                                  "function_response.name: Name cannot be empty."])
def test_ways_servers_say_a_tool_message_needs_its_name(text):
    assert field_demanded(400, text, ["name"]) == "name"


# `[provider] reasoning_fields = ["content"]` ends crow run in one line, exit 2, never sending
# [{"role": "user"}] without the prompt
def test_a_message_field_named_in_the_provider_table_ends_crow_run_in_one_line_exit_2(tmp_path) -> None:
    from tests.support import crow

    config = tmp_path / "c.toml"
    config.write_text('base_url = "http://127.0.0.1:9/v1"\n[provider]\nreasoning_fields = ["content"]\n')
    proc = crow("run", "--config", str(config), "--api-key", "sk-test", "--model", "m", "hi")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "[provider] reasoning_fields may not name 'content'" in proc.stderr


def test_max_concurrent_requests_is_a_whole_number_of_slots() -> None:
    assert check_overrides({"max_concurrent_requests": 2}) is None
    for bad in (0, True, 1.5, "2", 5000):
        assert "max_concurrent_requests must be a whole number" in (check_overrides(
            {"max_concurrent_requests": bad}) or "")
