"""The pure shell-rule module: how a command line is split, and what deny and allow match (issue 9)."""

from __future__ import annotations

import pytest

from crow_cli.tools.shellrules import allow_matches, deny_matches, rule_words, split_commands


@pytest.mark.parametrize(("line", "commands"), [
    ("git status", [["git", "status"]]),
    ('echo "a; b" && ls', [["echo", "a; b"], ["ls"]]),
    ("echo 'x|y' | wc -l", [["echo", "x|y"], ["wc", "-l"]]),
    ("a\\;b c", [["a;b", "c"]]),
    ("pytest 2>&1 | tail", [["pytest", "2", "1"], ["tail"]]),
    ("x=$(date)", [["x="], ["date"]]),
    ("(cd x; make)", [["cd", "x"], ["make"]]),
    ("true\nfalse", [["true"], ["false"]]),
    ('echo "un balanced', [["echo", "un balanced"]]),
])
def test_split_commands_is_quote_aware(line: str, commands: list[list[str]]) -> None:
    assert split_commands(line) == commands


def test_deny_and_allow_take_rule_words() -> None:
    assert deny_matches("cd /tmp && rm --rec --for x", rule_words("rm -rf"))
    assert not deny_matches("echo rm -rf", rule_words("rm -rf"))
    assert not deny_matches("anything", [])
    assert allow_matches("git status -s && git diff", [rule_words("git status"), rule_words("git diff")])
    assert not allow_matches("git status > out.txt", [rule_words("git status")])
    assert allow_matches("git status 2>&1", [rule_words("git status")])
    assert not allow_matches("git status; rm x", [rule_words("git status")])
