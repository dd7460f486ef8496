"""One server profile, built by one function from layers: built-in, config, learned; key by key, each value with
the layer it came from: what crow knows about a server lives in one place, and says where each value came
from."""

from __future__ import annotations

from typing import Any

import pytest

from crow_cli.wire.profile import LAYERS, ServerProfile, build_profile, rule_key, rule_keys
from crow_cli.wire.rules import CapParam, DropParam, DropSchemaKeyword, RenameParam, rule_from_json

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
    from crow_cli.wire.rules.check import rules_problem

    assert rules_problem([{"op": "drop_param", "target": "seed"}]) is None
    assert rules_problem([{"op": "explode", "target": "x"}]).startswith(
        "[provider] request_rules[0]: no rule 'explode' (known: drop_param, ")
    assert rules_problem([{"op": "drop_param"}]) == "[provider] request_rules[0]: drop_param needs a target"
    assert rules_problem([{"op": "cap_param", "target": "max_tokens", "value": 0}]) == \
        "[provider] request_rules[0]: cap_param value must be a positive integer (a number of tokens, below 2**31)" \
        " (got 0)"
    assert rules_problem([{"op": "drop_param", "target": "seed", "why": 1}]) == \
        "[provider] request_rules[0] may hold op, target and value only"


# `adapt_requests = false` keeps the rules the user configured and drops only the others
def test_configured_rules_apply_when_adapting_requests_is_off_and_the_others_do_not() -> None:
    config = {"request_rules": [{"op": "drop_param", "target": "seed"}]}
    learned = {"request_rules": [{"op": "drop_param", "target": "top_k", "value": None}]}
    profile = build_profile(OPENAI, "o3", config, learned, rules=False)
    assert profile.request_rules == (DropParam("seed"),)  # no built-in rename, no learned drop
    assert [(key, came) for key, _, came in profile.described() if key.startswith("rule")] == [
        ("rule drop_param seed", "config")]


# A later layer's rule replaces every earlier one deciding the same, however its target is spelt (the reply cap
# under its other name, a rename back, a drop of the renamed parameter): never both applied
@pytest.mark.parametrize(("earlier", "later"), [
    ({"op": "cap_param", "target": "max_completion_tokens", "value": 8192},
     {"op": "cap_param", "target": "max_tokens", "value": 4096}),
    ({"op": "rename_param", "target": "max_tokens", "value": "max_completion_tokens"},
     {"op": "rename_param", "target": "max_completion_tokens", "value": "max_tokens"}),
    ({"op": "rename_param", "target": "max_tokens", "value": "max_completion_tokens"},
     {"op": "drop_param", "target": "max_tokens"}),
    ({"op": "drop_param", "target": "temperature"}, {"op": "set_param", "target": "temperature", "value": 1}),
])
def test_a_later_layers_rule_replaces_every_earlier_one_deciding_the_same(earlier: dict[str, Any],
                                                                          later: dict[str, Any]) -> None:
    profile = build_profile(LOCAL, "m", {"request_rules": [earlier]}, {"request_rules": [later]})
    old, new = rule_from_json(earlier), rule_from_json(later)
    assert old is not None and new is not None and rule_keys(old) & rule_keys(new)
    assert profile.request_rules == (new,)
    assert profile.entries()[-1]["layer"] == "learned" and profile.entries()[-1]["replaced"] == [
        {"layer": "config", "value": old.to_json(), "text": f"{old.describe()} ({type(old).__name__})"}]


def test_a_configured_rule_replaces_the_built_in_one_deciding_the_same_in_its_place() -> None:
    config = {"request_rules": [{"op": "drop_param", "target": "seed"}, {"op": "drop_param", "target": "max_tokens"}]}
    profile = build_profile(OPENAI, "o3", config)
    assert profile.request_rules == (DropParam("max_tokens"), DropParam("seed"))
    assert profile.replaced == {"rule drop_param max_tokens": (
        ("built-in", RenameParam("max_tokens", "max_completion_tokens")),)}


# What a later layer replaced is said, with its layer
def test_what_a_later_layer_replaced_is_said_with_its_layer() -> None:
    config = {"request_rules": [{"op": "cap_param", "target": "max_tokens", "value": 8192}],
              "refused_fields": ["thinking"]}
    learned = {"request_rules": [{"op": "cap_param", "target": "max_tokens", "value": 4096}],
               "refused_fields": ["reasoning_content"]}
    described = {key: came for key, _, came in build_profile(LOCAL, "m", config, learned).described()}
    assert described["rule cap_param max_tokens"] == \
        "learned, replacing config: lowered parameter max_tokens to 8192 (CapParam)"
    assert described["refused_fields"] == 'learned, replacing config: ["thinking"]'
    assert described["needs_key"] == "built-in"


# `reasoning_fields = []` is shown (an empty list is a value)
def test_an_empty_list_a_layer_sets_is_shown_and_an_empty_learned_one_learned_nothing() -> None:
    profile = build_profile(LOCAL, "m", {"reasoning_fields": [], "refused_fields": ["x"]},
                            {"refused_fields": [], "required_fields": []})
    described = {key: (value, came) for key, value, came in profile.described()}
    assert described["reasoning_fields"] == ("[]", 'config, replacing built-in: ["reasoning_content", "reasoning"]')
    assert profile.refused_fields == ("x",) and described["refused_fields"] == ('["x"]', "config")
    assert "required_fields" not in described  # empty, and set by no layer


# Config rules that could never do anything, or malformed ones, are refused in one line saying what is wrong
# (and, for a missing value, what value)
@pytest.mark.parametrize(("rule", "problem"), [
    ({"op": "drop_param", "target": "messages"}, "drop_param cannot change 'messages': crow sets model, messages, "
                                                 "stream, stream_options, tools itself"),
    ({"op": "set_param", "target": "stream", "value": False}, "set_param cannot change 'stream'"),
    ({"op": "rename_param", "target": "model", "value": "engine"}, "rename_param cannot change 'model'"),
    ({"op": "cap_param", "target": "tools", "value": 3}, "cap_param cannot change 'tools'"),
    ({"op": "rename_param", "target": "max_tokens", "value": "a b"},
     "rename_param value must be a parameter name (letters, digits, _ . -) (got \"a b\")"),
    ({"op": "rename_param", "target": "max_tokens", "value": "max_tokens"}, "(the same name)"),
    ({"op": "rename_param", "target": "max_tokens", "value": "messages"}, "crow sets messages itself"),
    ({"op": "drop_param", "target": "a b"}, "drop_param target 'a b' is not a parameter name"),
    ({"op": "rename_tools", "value": "regex.*"},
     "rename_tools value must be one of the known name rules: letter_first, strict, word (got \"regex.*\")"),
    ({"op": "fold_role", "target": "bogus"}, "fold_role target must be system or developer (got 'bogus')"),
    ({"op": "inline_schema_refs", "target": "x"}, "inline_schema_refs takes no target"),
    ({"op": "drop_param", "target": "seed", "value": 1}, "drop_param takes no value"),
    ({"op": "rename_tools", "target": "x", "value": "strict"}, "rename_tools takes no target"),
    ({"op": "cap_param", "target": "max_tokens", "value": "big"}, "cap_param value must be a positive integer"),
    ({"op": "cap_param", "target": "max_tokens"}, "cap_param needs a value: a positive integer"),
    ({"op": "cut_tool_result", "value": -1}, "cut_tool_result value must be a positive integer"),
    ({"op": "schema_empty_object", "value": "maybe"}, 'schema_empty_object value must be "drop"'),
    ({"op": "tool_result_placeholder", "value": " "}, "tool_result_placeholder value must be a string that is not"),
    ({"op": "assistant_tool_content", "value": 0}, "assistant_tool_content value must be a string"),
    ({"op": "drop_schema_keyword", "target": "a b"}, "is not a schema keyword"),
    # a field of the message itself: require_field tool_calls and drop_field content are refused, never an
    # internal AssertionError nor shown as applied while doing nothing
    ({"op": "require_field", "target": "tool_calls"}, "require_field target 'tool_calls' is not a field crow may"),
    ({"op": "drop_field", "target": "content"}, "drop_field target 'content' is not a field crow may drop"),
    ({"op": "drop_field", "target": "role"}, "never a field of the message itself"),
    ({"op": "drop_field", "target": "a b"}, "drop_field target 'a b' is not a field"),
    ({}, "needs an op, the name of a rule (known: drop_param"),
    ({"op": ["drop_param"]}, "needs an op, the name of a rule"),
])
def test_a_configured_rule_that_cannot_act_is_refused_naming_it(rule: dict[str, Any], problem: str) -> None:
    from crow_cli.wire.rules.check import rules_problem

    found = rules_problem([{"op": "drop_param", "target": "seed"}, rule]) or ""
    assert found.startswith("[provider] request_rules[1]: ") and problem in found, found


def test_configured_rules_crow_can_act_on_are_taken() -> None:
    from crow_cli.wire.rules.check import rules_problem

    assert rules_problem([{"op": "drop_schema_keyword", "target": "$schema"},  # Gemini's, as built in
                          {"op": "drop_param", "target": "stream_options"},
                          {"op": "fold_role", "target": "developer"}, {"op": "rename_tools", "value": "word"},
                          {"op": "set_param", "target": "temperature", "value": 1},
                          {"op": "assistant_tool_content", "value": ""}, {"op": "schema_empty_object", "value": "add"},
                          {"op": "rename_param", "target": "max_tokens", "value": "max_completion_tokens"},
                          {"op": "cap_param", "target": "max_completion_tokens", "value": 4096}]) is None


# Two rules of one table deciding the same are refused
def test_two_configured_rules_deciding_the_same_are_refused() -> None:
    from crow_cli.wire.rules.check import rules_problem

    assert rules_problem([{"op": "cap_param", "target": "max_tokens", "value": 100},
                          {"op": "cap_param", "target": "max_completion_tokens", "value": 200}]) == (
        "[provider] request_rules[1]: lowered parameter max_completion_tokens to 200 decides what "
        "request_rules[0] does (lowered parameter max_tokens to 100): keep one")


# Dropping and requiring one field in one table is refused
def test_rules_contradicting_on_a_field_are_refused_also_against_the_tables_field_lists() -> None:
    from crow_cli.wire.rules.check import rules_problem

    drop = {"op": "drop_field", "target": "reasoning_content"}
    need = {"op": "require_field", "target": "reasoning_content"}
    assert "request_rules[1]: sent reasoning_content on every assistant message decides what request_rules[0]" \
        in (rules_problem([drop, need]) or "")
    assert rules_problem([need], {"refused_fields": ["reasoning_content"]}) == (
        "[provider] request_rules[0]: sent reasoning_content on every assistant message contradicts [provider] "
        "refused_fields = ['reasoning_content']: keep one")
    required = {"required_fields": ["reasoning_content"]}
    assert "contradicts [provider] required_fields" in (rules_problem([drop], required) or "")
    assert rules_problem([drop], {"refused_fields": ["reasoning_content"]}) is None  # the same decision twice
    assert rules_problem([need, {"op": "drop_field", "target": "x_vendor"}]) is None


# A set_param on a parameter no request has says to set it in [params]
def test_a_set_param_without_the_parameter_in_params_says_to_set_it_there() -> None:
    from crow_cli.wire.rules.check import unsent_set_param

    rules = [{"op": "drop_param", "target": "seed"}, {"op": "set_param", "target": "temperature", "value": 1}]
    assert unsent_set_param(rules, {"temperature"}) is None
    assert unsent_set_param(rules, {}) == (
        "[provider] request_rules[1]: set_param changes temperature only where a request has it, and [params] "
        "sets no temperature: to send it, set it in [params] (temperature = 1)")


def test_a_learned_change_holds_as_long_as_it_should_and_a_field_rule_is_remembered_as_a_rule() -> None:
    from crow_cli.errors import ProviderError
    from crow_cli.wire.change import Change
    from crow_cli.wire.rules import DropField, RequireField, SetParam

    profile = build_profile(LOCAL, "m")
    assert profile.learn(Change((DropParam("seed"),), "why"), status=400, text="no seed", params={}) == "remembered"
    assert profile.learn(Change((DropParam("seed"),), "why"), status=400, text="no seed", params={}) is None
    assert profile.learn(Change((SetParam("temperature", 1),), "why"), status=400, text="only 1",
                         params={"temperature": 0.2}) == "run"  # the user's value: this run only
    assert profile.learn(Change((CapParam("max_tokens", 900),), "why", once=True), status=400, text="room",
                         params={}) == "once"
    assert profile.rules == [DropParam("seed"), SetParam("temperature", 1), CapParam("max_tokens", 900)]
    profile.new_request()
    assert profile.rules == [DropParam("seed"), SetParam("temperature", 1)]
    assert profile.learn(Change((RequireField("reasoning_content"),), "why"), status=400, text="demanded",
                         params={}) == "remembered"
    assert profile.unsaved and profile.why == "400: demanded"
    stored = {"refused_fields": ["reasoning_content", "thinking"],  # the old form
              "request_rules": [{"op": "drop_param", "target": "seed", "value": None}]}
    assert profile.remembered(stored) == {
        "request_rules": [DropField("thinking").to_json(), DropParam("seed").to_json(),
                          RequireField("reasoning_content").to_json()],
        "refused_fields": [], "required_fields": []}
    assert not profile.unsaved
    with pytest.raises(ProviderError, match="refused temperature = 7"):  # a configured value refused for its value
        profile.learn(Change((DropParam("temperature"),), "temperature must be at most 2"), status=400,
                      text="temperature: 7 is greater than the maximum of 2", params={"temperature": 7})


def test_learned_field_rules_read_as_the_profile_fields_they_decide_the_newest_winning() -> None:
    learned = {"refused_fields": ["reasoning_content", "x"], "tool_message_name": True,
               "request_rules": [{"op": "require_field", "target": "reasoning_content", "value": None},
                                 {"op": "tool_message_name", "target": "", "value": False}]}
    profile = build_profile(LOCAL, "m", None, learned)
    assert profile.refused_fields == ("x",) and profile.required_fields == ("reasoning_content",)
    assert profile.tool_message_name is False and profile.request_rules == ()


# an old facts file's `tool_message_name = true` is stored once, as its request rule, after the next write: never
# beside the rule (said twice by `crow facts list`), nor both ways once a server asks for the reverse
def test_message_facts_of_the_old_form_are_stored_once_as_rules_after_the_next_write() -> None:
    from crow_cli.wire import facts
    from crow_cli.wire.change import Change
    from crow_cli.wire.rules import ToolMessageName

    facts.learn(LOCAL, "m", refused_fields=["reasoning_content"], tool_message_name=True,
                tool_call_id_rule={"chars": "alnum", "length": 9}, why="422: old")
    stored = facts.recall(LOCAL, "m")
    profile = build_profile(LOCAL, "m", learned=stored)
    assert profile.learn(Change((DropParam("seed"),), "why"), status=400, text="no seed", params={}) == "remembered"
    assert facts.learn(LOCAL, "m", why=profile.why, **profile.remembered(stored)) is None
    now = facts.recall(LOCAL, "m")
    assert "tool_message_name" not in now and "tool_call_id_rule" not in now
    assert {"op": "tool_message_name", "target": "", "value": True} in now["request_rules"]
    again = build_profile(LOCAL, "m", learned=now)
    assert again.tool_message_name is True and again.tool_call_id_rule == {"chars": "alnum", "length": 9}
    assert again.refused_fields == ("reasoning_content",)
    assert profile.learn(Change((ToolMessageName(False),), "why"), status=400, text="no name", params={})
    assert facts.learn(LOCAL, "m", why=profile.why, **profile.remembered(now)) is None
    assert build_profile(LOCAL, "m", learned=facts.recall(LOCAL, "m")).tool_message_name is False
