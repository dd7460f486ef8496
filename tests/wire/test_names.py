"""ToolNames: each tool's name and the name it is sent under, both ways, made unique once.

One map, so no part (the registry, the client's names back, the name cleaner) renames tools on its own;
these guard it.
"""

from __future__ import annotations

import pytest

from crow_cli.wire.names import MAX_LENGTH, WIRE_NAME, ToolNames, wire_name
from crow_cli.wire.rules import NAME_RULES

ODD = ["read_file", "fs.read", "fs_read", "fs/read", "Sequential Thinking", "x" * 70, "", "café", "21st-magic"]


@pytest.mark.parametrize("rule", ["strict", "letter_first", "word"])
def test_every_name_round_trips_through_a_unique_name_the_rule_takes(rule: str) -> None:
    names = ToolNames(ODD, NAME_RULES[rule])
    assert len(set(names.sent)) == len(ODD)
    for name in ODD:
        wire = names.wire(name)
        assert NAME_RULES[rule].fullmatch(wire) and names.own(wire) == name
    assert names.back == {wire: name for name, wire in names.renamed.items()}
    assert {names.wire(n) for n in ODD} == set(names.sent)


def test_names_the_server_takes_are_sent_as_they_are_and_are_not_renamed() -> None:
    names = ToolNames(["read_file", "run-shell", "fs.read"])
    assert names.renamed == {"fs.read": "fs_read"}
    assert names.wire("read_file") == "read_file" and names.own("read_file") == "read_file"
    assert names.wire("not a tool") == "not a tool" and names.own("fs.read") is None


def test_a_name_the_server_takes_keeps_it_whatever_the_order() -> None:
    # the registry's rule: a plugin's `fs.read` registered before `fs_read` may not take its name
    assert ToolNames(["fs.read", "fs_read", "fs/read"]).renamed == {"fs.read": "fs_read_2", "fs/read": "fs_read_3"}
    assert ToolNames(["fs_read", "fs.read"]).renamed == {"fs.read": "fs_read_2"}


def test_names_alike_in_their_first_64_characters_stay_unique_within_64() -> None:
    long = ["a" * 70 + "." + str(n) for n in range(12)]
    names = ToolNames(long)
    sent = [names.wire(n) for n in long]
    assert len(set(sent)) == 12 and all(len(s) <= MAX_LENGTH and WIRE_NAME.fullmatch(s) for s in sent)
    assert sent[0] == "a" * 64 and sent[1] == "a" * 62 + "_2" and sent[11] == "a" * 61 + "_12"
    assert [names.own(s) for s in sent] == long


def test_a_suffix_already_taken_by_another_tool_is_skipped() -> None:
    names = ToolNames(["a.b", "a_b", "a_b_2", "a/b"])
    assert names.renamed == {"a.b": "a_b_3", "a/b": "a_b_4"}


def test_a_repeated_name_counts_once() -> None:
    assert ToolNames(["a.b", "a.b"]).sent == ("a_b",)


@pytest.mark.parametrize(("rule", "name", "wire"), [
    ("letter_first", "21st_magic", "t_21st_magic"),  # Moonshot and Gemini want a letter first
    ("word", "read-file", "read_file"),  # `^[a-zA-Z0-9_]+$`: no dash
    ("word", "1-x", "1_x"),
    ("strict", "", "tool"),
    ("strict", "get_/whoami", "get__whoami"),
])
def test_each_rule_gets_the_closest_name_it_takes(rule: str, name: str, wire: str) -> None:
    assert wire_name(name, NAME_RULES[rule]) == wire
    assert ToolNames([name], NAME_RULES[rule]).wire(name) == wire


@pytest.mark.parametrize(("called", "sent"), [
    ("orders_lookup<|channel|>commentary", "orders_lookup"),  # gpt-oss / Harmony
    ("functions.orders_lookup", "orders_lookup"),  # Kimi K2
    (" read_file\n", "read_file"),
])
def test_a_leaked_name_is_looked_up_back_as_the_name_sent(called: str, sent: str) -> None:
    assert ToolNames(["read_file", "orders.lookup"]).called(called) == (sent, True)


def test_a_call_by_a_tools_own_name_is_the_name_sent_without_cleaning() -> None:
    names = ToolNames(["read_file", "orders.lookup"])
    assert names.called("orders.lookup") == ("orders_lookup", False)
    assert names.called("orders_lookup") == ("orders_lookup", False)
    assert names.called("read_file") == ("read_file", False)
    assert names.called("nope<|x|>") == ("nope<|x|>", False)  # cleans to no tool: left for the unknown-tool error
