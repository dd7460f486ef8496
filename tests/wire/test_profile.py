"""One server profile, built by one function from layers: built-in, config, learned; key by key, each value with
the layer it came from.

(issue 29 §1: what crow knew about a server lived in four places, each spelled in its own words, and nothing said
where a value came from.)"""

from __future__ import annotations

from crow_cli.wire.adapt import CapParam, DropParam, DropSchemaKeyword, RenameParam
from crow_cli.wire.profile import LAYERS, ServerProfile, build_profile, rule_key

GEMINI = "https://generativelanguage.googleapis.com/v1beta/openai"
OPENAI = "https://api.openai.com/v1"
LOCAL = "http://127.0.0.1:8080/v1"


def test_the_built_in_layer_is_the_provider_data() -> None:
    profile = build_profile(GEMINI, "gemini-2.5-flash")
    assert profile.name == "gemini" and profile.needs_key and profile.tool_message_name is True
    assert DropSchemaKeyword("additionalProperties") in profile.request_rules
    assert {profile.source(key) for key, _, _ in profile.described()} == {"built-in"}
    assert build_profile(LOCAL, "m") == ServerProfile(sources=build_profile(LOCAL, "m").sources)  # generic


def test_each_later_layer_overrides_an_earlier_one_key_by_key_and_says_so() -> None:
    config = {"reasoning_fields": ["thinking"], "refused_fields": ["x"], "needs_key": False}
    learned = {"refused_fields": ["reasoning_content"], "tool_message_name": False, "quirks": ["index-always-0"]}
    profile = build_profile(GEMINI, "gemini-2.5-flash", config, learned)
    assert profile.reasoning_fields == ("thinking",) and profile.source("reasoning_fields") == "config"
    assert profile.needs_key is False and profile.source("needs_key") == "config"
    assert profile.refused_fields == ("reasoning_content",) and profile.source("refused_fields") == "learned"
    assert profile.tool_message_name is False and profile.source("tool_message_name") == "learned"  # over built-in
    assert profile.name == "gemini" and profile.source("name") == "built-in"
    assert profile.source("required_fields") == "built-in"
    assert "quirks" not in profile.sources  # a learned fact that is no value of the profile


def test_a_learned_rule_replaces_the_built_in_rule_of_its_key_and_joins_the_others() -> None:
    built_in = build_profile(OPENAI, "o3-mini").request_rules
    assert built_in == (RenameParam("max_tokens", "max_completion_tokens"),)
    learned = {"request_rules": [{"op": "rename_param", "target": "max_tokens", "value": "max_output_tokens"},
                                 {"op": "drop_param", "target": "seed", "value": None},
                                 {"op": "cap_param", "target": "max_tokens", "value": 4096}]}
    profile = build_profile(OPENAI, "o3-mini", None, learned)
    assert profile.request_rules == (RenameParam("max_tokens", "max_output_tokens"), DropParam("seed"),
                                     CapParam("max_tokens", 4096))
    assert [profile.source(rule_key(r)) for r in profile.request_rules] == ["learned"] * 3
    assert rule_key(DropParam("seed")) == "rule drop_param seed"


def test_what_probe_learned_of_stream_options_is_a_rule_runs_use() -> None:
    profile = build_profile(LOCAL, "m", None, {"usage_option_refused": True})
    assert profile.request_rules == (DropParam("stream_options"),)
    assert profile.source("rule drop_param stream_options") == "learned"
    body = {"model": "m", "messages": [], "stream": True, "stream_options": {"include_usage": True}}
    assert "stream_options" not in profile.request_rules[0].apply(body)


def test_no_rule_of_any_layer_when_adapting_requests_is_off() -> None:
    learned = {"request_rules": [{"op": "drop_param", "target": "seed", "value": None}],
               "refused_fields": ["x"]}
    profile = build_profile(GEMINI, "g", None, learned, rules=False)
    assert profile.request_rules == () and profile.refused_fields == ("x",)


def test_the_profile_in_words_names_every_value_and_its_layer() -> None:
    profile = build_profile(OPENAI, "gpt-5", {"required_fields": ["reasoning_content"]},
                            {"request_rules": [{"op": "drop_param", "target": "seed", "value": None}]})
    described = {key: (value, layer) for key, value, layer in profile.described()}
    assert described["needs_key"] == ("true", "built-in")
    assert described["required_fields"] == ('["reasoning_content"]', "config")
    assert described["rule rename_param max_tokens"] == (
        "renamed parameter max_tokens to max_completion_tokens (RenameParam)", "built-in")
    assert described["rule drop_param seed"] == ("dropped parameter seed (DropParam)", "learned")
    assert {layer for _, layer in described.values()} <= set(LAYERS)
    assert profile.message_facts() == {"refused_fields": [], "required_fields": ["reasoning_content"]}


def test_configured_request_rules_are_the_same_classes_in_their_layer() -> None:
    config = {"request_rules": [{"op": "drop_param", "target": "seed"},
                                {"op": "rename_param", "target": "max_tokens", "value": "max_output_tokens"}]}
    profile = build_profile(OPENAI, "o3", config)
    assert profile.request_rules == (RenameParam("max_tokens", "max_output_tokens"), DropParam("seed"))
    assert profile.source("rule rename_param max_tokens") == "config"  # over the built-in one of its key
    learned = {"request_rules": [{"op": "drop_param", "target": "seed", "value": None}]}
    assert build_profile(OPENAI, "o3", config, learned).source("rule drop_param seed") == "learned"


def test_a_configured_rule_crow_cannot_read_is_one_line() -> None:
    from crow_cli.wire.profile import rules_problem

    assert rules_problem([{"op": "drop_param", "target": "seed"}]) is None
    assert rules_problem([{"op": "explode", "target": "x"}]).startswith(
        "[provider] request_rules[0]: no rule 'explode' (known: drop_param, ")
    assert rules_problem([{"op": "drop_param"}]) == "[provider] request_rules[0]: drop_param needs a target"
    assert rules_problem([{"op": "cap_param", "target": "max_tokens", "value": 0}]) == \
        "[provider] request_rules[0]: cap_param needs a value"
    assert rules_problem([{"op": "drop_param", "target": "seed", "why": 1}]) == \
        "[provider] request_rules[0] may hold op, target and value only"
