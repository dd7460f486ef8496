"""The pure shell-rule module: how a command line is split, and what deny and allow match (issue 9)."""

from __future__ import annotations

import pytest

from crow_cli.tools.shellrules import allow_matches, command_prefixes, deny_matches, rule_words, split_commands


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


# issue: a new user got past `rm -rf` deny rules with a glob or brace in the command word, a shell reading its
# script from a redirect, and wrappers not on the list. A command word the matcher cannot read literally
# matches every deny rule (fail closed).
@pytest.mark.parametrize("line", [
    "/bin/r? -rf x", "r[m] -rf x", "{rm,-rf,x}", "/usr/bin/r* -rf x", "cd x && {rm,-rf,y}",
    "sh < script.sh", "bash <script.sh", "< script.sh sh", "python3 < payload.py", "sh -s < script.sh",
    "sh <<'EOF'\nrm -rf x\nEOF",
    "fakeroot rm -rf x", "unshare -r rm -rf x", "nsenter -t 1 -m rm -rf x", "gdb --args rm -rf x",
    "valgrind rm -rf x", "ssh host rm -rf x", "ssh -p 22 host 'rm -rf x'", "proot rm -rf x",
    "firejail rm -rf x", "systemd-run --user rm -rf x", "ltrace rm -rf x", "faketime now rm -rf x",
    # found trying it as a new user (wave 3): sg runs its second argument as a command line, dbus-launch its
    # arguments
    "sg users 'rm -rf x'", "sg users -c 'rm -rf x'", "dbus-launch rm -rf x", "dbus-launch --exit-with-session rm -rf x",
])
def test_deny_rules_fail_closed_on_what_they_cannot_read(line: str) -> None:
    assert deny_matches(line, rule_words("rm -rf"))


@pytest.mark.parametrize("line", [
    "ls *.py", "rm -f '*.tmp'", "[ -f x ] && ls", "echo {a,b}", "sh script.sh < input.txt", "cat < file",
    "git log --format='%h {x}'", "python3 tool.py < data.json",
])
def test_globs_and_redirects_outside_the_command_word_are_read_as_before(line: str) -> None:
    assert not deny_matches(line, rule_words("rm -rf"))


@pytest.mark.parametrize(("line", "prefixes"), [
    ("pytest -k x", [["pytest"]]), ("git status -s", [["git", "status"]]), ("npm test", [["npm", "test"]]),
    ("cargo build --release", [["cargo", "build"]]), ("python -m pytest -q", [["python", "-m", "pytest"]]),
    ("python build.py", [["python", "build.py"]]), ("make", [["make"]]),
    ("pytest -q && pytest -x; ruff check .", [["pytest"], ["ruff"]]), ("pytest 2>&1 | tail", [["pytest"], ["tail"]]),
    # nothing stands for these: a later call starting the same way could run anything
    ("python -c 'import os'", None), ("python", None), ("sudo pytest", None), ("sh -c 'pytest'", None),
    ("FOO=1 pytest", None), ("git -C x push", None), ("pytest > out.txt", None), ("echo $(rm x)", None),
    ("$CMD -q", None), ("echo x | sh", None), ("", None),
])
def test_command_prefixes_are_what_an_always_answer_approves(line: str, prefixes: list[list[str]] | None) -> None:
    assert command_prefixes(line) == prefixes
    if prefixes is not None:
        assert allow_matches(line, prefixes)
