"""Deny rules see through assignments, shell keywords, wrappers, paths and `sh -c`; allow rules stay strict."""

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


@pytest.mark.parametrize("command", [
    "FOO=1 rm -rf x", "{ rm -rf x; }", "if true; then rm -rf x; fi", "! rm -rf x", "exec rm -rf x",
    "command rm -rf x", "time rm -rf x", "for i in 1; do rm -rf x; done", "env rm -rf x",
    "env -i FOO=1 rm -rf x", "nohup rm -rf x", "sudo rm -rf x", "find . | xargs rm -rf", "/bin/rm -rf x",
    "while rm -rf x; do :; done", "nice -n 10 rm -rf x", "sudo -u root rm -rf x", "timeout 5 rm -rf x",
    "FOO='a b' BAR=2 rm -rf x", "xargs -0 rm -rf < list", "case a in a) rm -rf x;; esac", "\\rm -rf x",
    "'rm' -rf x", "sh -c 'rm -rf x'", "bash -c \"cd y && rm -rf x\"", "bash -ec 'rm -rf x'",
    "sh -c \"sh -c 'rm -rf x'\"", "eval rm -rf x", "eval 'rm -rf x'", "FOO=1 sudo env BAR=2 /usr/bin/rm -rf x",
    "true\nrm -rf x", "time -p rm -rf x", "(rm -rf x)", "x=$(rm -rf y)",
])
async def test_deny_sees_through_wrappers(command: str) -> None:
    approve = make_approver(yes=True, deny=["run_shell:rm -rf"])
    with pytest.raises(ToolDenied, match="denied by the rule 'run_shell:rm -rf'"):
        await approve(_call(command), SHELL)


@pytest.mark.parametrize("command", [
    "echo rm -rf x", "rm -r x", "grep -rf rm x", "printf '%s' rm", "FOO=rm ls -rf", "ls /bin/rm",
])
async def test_deny_still_lets_unrelated_commands_run(command: str) -> None:
    approve = make_approver(yes=True, deny=["run_shell:rm -rf"])
    assert await approve(_call(command), SHELL)


@pytest.mark.parametrize("command", [
    "sh -c 'git status'", "bash -c 'git status && rm x'", "FOO=1 git status", "env git status",
    "sudo git status", "/usr/bin/git status", "{ git status; }", "xargs git status", "eval git status",
])
async def test_allow_rules_do_not_approve_wrapped_commands(command: str) -> None:
    approve = make_approver("ask", allow=["run_shell:git status"])
    with pytest.raises(ToolDenied, match="nobody can approve"):
        await approve(_call(command), SHELL)


async def test_an_allow_rule_that_names_the_shell_approves_it() -> None:
    approve = make_approver("ask", allow=["run_shell:sh -c"])
    assert await approve(_call("sh -c 'git status'"), SHELL)


async def test_deny_of_a_command_with_arguments_inside_a_shell_script() -> None:
    approve = make_approver(yes=True, deny=["run_shell:git push"])
    for command in ("bash -lc 'git push origin main'", "env GIT_TRACE=1 git push", "time git push -f"):
        with pytest.raises(ToolDenied, match="git push"):
            await approve(_call(command), SHELL)
    assert await approve(_call("git pushx"), SHELL)


# found trying it as a new user (fourth round): ways past `--deny 'run_shell:rm -rf'`. A string a wrapper
# evaluates is checked; what cannot be checked (a command word that is not a literal, input piped into a
# shell) matches the rule: it fails closed.
@pytest.mark.parametrize("command", [
    "echo rm -rf v | sh", "cat script | bash", "echo rm -rf v | sudo bash -s", "trap 'rm -rf v' EXIT",
    "su -c 'rm -rf v'", "find . -exec rm -rf {} +", "find . -name v -execdir rm -rf {} \\;",
    "find . -ok rm -rf {} ';'", "echo v | xargs rm -rf", "xargs -I{} sh -c 'rm -rf {}'", "$(echo rm) -rf v",
    "`echo rm` -rf v", "a=rm; $a -rf v", "${RM:-rm} -rf v", 'RM=rm; "$RM" -rf v', "sudo $CMD -rf v",
    "perl -e 'system(\"rm -rf v\")'", "python3 -c 'import os; os.system(\"rm -rf v\")'",
    "python -c \"import subprocess; subprocess.run(['rm', '-rf', 'v'])\"", "awk 'BEGIN{system(\"rm -rf v\")}'",
    "bash -c 'rm -rf v'", "env -S 'rm -rf v'", "coproc rm -rf v",
])
async def test_deny_checks_evaluated_strings_and_fails_closed_on_what_it_cannot_read(command: str) -> None:
    approve = make_approver(yes=True, deny=["run_shell:rm -rf"])
    with pytest.raises(ToolDenied, match="denied by the rule 'run_shell:rm -rf'"):
        await approve(_call(command), SHELL)


@pytest.mark.parametrize("command", [
    "x=$(date) && echo $x", "echo $(date)", "for f in $(ls); do echo $f; done", "case $x in a) ls;; esac",
    "echo v | python3 script.py", "find . -name '*.pyc' -exec ls {} +", "trap 'echo bye' EXIT",
    "perl -e 'print \"rm\"'", "ls | grep rm", "echo `date`",
])
async def test_deny_still_lets_readable_commands_run(command: str) -> None:
    approve = make_approver(yes=True, deny=["run_shell:rm -rf"])
    assert await approve(_call(command), SHELL)
