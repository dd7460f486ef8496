"""Deny rules compare options as flags, not as words: `rm -fr`, `rm -r -f`, `rm --recursive --force`
are `rm -rf`. Allow rules stay literal."""

from __future__ import annotations

import json

import pytest

from crow_cli.errors import ToolDenied
from crow_cli.history import ToolCall
from crow_cli.tools.approval import make_approver
from crow_cli.tools.builtin import BUILTIN_TOOLS

SHELL = next(t for t in BUILTIN_TOOLS if t.name == "run_shell")


def _call(command: str) -> ToolCall:
    return ToolCall("call_1", "run_shell", json.dumps({"command": command}), 0)


async def _denied(rule: str, command: str) -> bool:
    try:
        await make_approver(yes=True, deny=[f"run_shell:{rule}"])(_call(command), SHELL)
    except ToolDenied:
        return True
    return False


@pytest.mark.parametrize("command", [
    "rm -fr x", "rm -r -f x", "rm -f -r x", "rm --recursive --force x", "rm --force --recursive x", "rm -Rf x",
    "rm -R -f x", "rm -rfv x", "rm -v -r -f x", "rm -r --force x", "rm x -rf", "rm --recursive -f -- x",
    "sudo rm -fr /", "sh -c 'rm -r -f x'", "cd /tmp && rm -f -R build", "/bin/rm --force=yes -r x",
])
async def test_rm_rf_rule_sees_every_spelling(command: str) -> None:
    assert await _denied("rm -rf", command)


@pytest.mark.parametrize("rule", ["rm -fr", "rm -r -f", "rm --recursive --force", "rm -R -f"])
async def test_the_rule_itself_may_be_spelled_any_way(rule: str) -> None:
    assert await _denied(rule, "rm -rf x")


@pytest.mark.parametrize("command", ["rm -r x", "rm -f x", "rm -- -rf", "rm -i x", "echo rm -fr x", "grep -rf x y",
                                     "rmdir -p x"])
async def test_commands_without_both_flags_still_run(command: str) -> None:
    assert not await _denied("rm -rf", command)


@pytest.mark.parametrize(("command", "denied"), [
    ("rm -fr /", True), ("rm -r -f /", True), ("rm --recursive --force /", True), ("rm -rf /tmp/x /", True),
    ("rm -rf ./build", False), ("rm -r /", False),
])
async def test_a_rule_with_an_operand(command: str, denied: bool) -> None:
    assert await _denied("rm -rf /", command) is denied


@pytest.mark.parametrize(("command", "denied"), [
    ("git push -f origin main", True), ("git push origin main --force", True), ("git push --force", True),
    ("git push --force-with-lease", False), ("git push origin main", False), ("git pull -f", False),
])
async def test_git_push_force(command: str, denied: bool) -> None:
    assert await _denied("git push --force", command) is denied


async def test_chmod_recursive_long_option_is_capital_r() -> None:
    assert await _denied("chmod -R 777", "chmod --recursive 777 .")
    assert not await _denied("chmod -R 777", "chmod -r 777 .")  # for chmod, -r is a mode, not recursion


async def test_allow_rules_stay_word_for_word() -> None:
    approve = make_approver("ask", allow=["run_shell:ls -la"])
    assert await approve(_call("ls -la src"), SHELL)
    with pytest.raises(ToolDenied, match="nobody can approve"):
        await approve(_call("ls -al src"), SHELL)


# Found trying it as a new user: GNU getopt accepts an unambiguous prefix of a long option (issue 11 item 4)
@pytest.mark.parametrize(("rule", "command"), [
    ("rm -rf", "rm --rec --for DIR"), ("rm -rf", "rm --recursive=yes --f DIR"), ("rm -rf", "rm --forc -R DIR"),
    ("git push --force", "git push --forc origin main"), ("git push --force", "git push origin --fo"),
    ("chmod -R 777", "chmod --rec 777 ."), ("git reset --hard", "git reset --ha HEAD~1"),
    ("rm -rf", "sudo rm --re=1 --fo x"),
])
async def test_abbreviated_long_options_match(rule: str, command: str) -> None:
    assert await _denied(rule, command)


@pytest.mark.parametrize(("rule", "command"), [
    ("rm -rf", "rm --verbose --force x"), ("git push --force", "git push --force-with-lease"),
    ("rm -rf", "rm -- --rec --for"),
])
async def test_other_long_options_do_not_match(rule: str, command: str) -> None:
    assert not await _denied(rule, command)


# Splitting is quote-aware: a quoted separator is an argument, so the words after it stay in the command (issue 9)
@pytest.mark.parametrize(("rule", "command"), [
    ("git push --force", 'git push ";" --force'), ("git push --force", "git push '&&' --force"),
    ("rm -rf", 'echo "$(rm -rf x)"'), ("rm -rf", "echo `rm -rf x`"), ("rm -rf", "cat <(rm -rf x)"),
])
async def test_quoted_separators_do_not_split_a_command(rule: str, command: str) -> None:
    assert await _denied(rule, command)


async def test_a_quoted_separator_is_not_a_new_command_for_allow_rules() -> None:
    # `echo "a; b"` is one command: allowed by `echo`, though its text holds a `;` (issue 9)
    approve = make_approver("ask", allow=["run_shell:echo"])
    assert await approve(_call('echo "a; rm -rf x"'), SHELL)
    with pytest.raises(ToolDenied, match="nobody can approve"):
        await approve(_call("echo a; rm -rf x"), SHELL)
