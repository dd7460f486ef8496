"""The pure shell-rule module: how a command line is read, and what deny, allow and "always" match; the
scripts that tried to get past the rules also run black-box, through `crow run` against the replay server."""

from __future__ import annotations

from pathlib import Path

import pytest

from crow_cli.tools.shellrules import allow_matches, command_prefixes, deny_matches, rule_words, split_commands
from tests.replay_server import ReplayServer
from tests.support import ChatTerminal, run_here, script


@pytest.mark.parametrize(("line", "commands"), [
    ("git status", [["git", "status"]]),
    ('echo "a; b" && ls', [["echo", "a; b"], ["ls"]]),
    ("echo 'x|y' | wc -l", [["echo", "x|y"], ["wc", "-l"]]),
    ("a\\;b c", [["a;b", "c"]]),
    ("pytest 2>&1 | tail", [["pytest"], ["tail"]]),  # a redirection is no word of its command
    ("x=$(date)", [["x=$(date)"], ["date"]]),  # a bare assignment, and the command its value runs
    ("(cd x; make)", [["cd", "x"], ["make"]]),
    ("true\nfalse", [["true"], ["false"]]),
    ("</dev/null rm -rf v", [["rm", "-rf", "v"]]), ("rm >/dev/null -rf v", [["rm", "-rf", "v"]]),
    ("\\rm 'r'm \"r\"m r''m", [["rm", "rm", "rm", "rm"]]), ("r\\\nm -rf v", [["rm", "-rf", "v"]]),
    ("echo $X \"$Y\" *.py", [["echo", "$X", '"$Y"', "*.py"]]),  # not literals: as written
])
def test_split_commands_reads_the_words_sh_runs(line: str, commands: list[list[str]]) -> None:
    assert split_commands(line) == commands


def test_deny_and_allow_take_rule_words() -> None:
    assert deny_matches("cd /tmp && rm --rec --for x", rule_words("rm -rf"))
    assert not deny_matches("echo rm -rf", rule_words("rm -rf"))
    assert not deny_matches("anything", [])
    assert allow_matches("git status -s && git diff", [rule_words("git status"), rule_words("git diff")])
    assert not allow_matches("git status > out.txt", [rule_words("git status")])
    assert allow_matches("git status 2>&1", [rule_words("git status")])
    assert not allow_matches("git status; rm x", [rule_words("git status")])


# deny rules hold against a glob or brace in the command word, a shell reading its script from a
# redirect, and wrappers: a command word the matcher cannot read literally matches every deny rule (fail closed).
@pytest.mark.parametrize("line", [
    "/bin/r? -rf x", "r[m] -rf x", "{rm,-rf,x}", "/usr/bin/r* -rf x", "cd x && {rm,-rf,y}",
    "sh < script.sh", "bash <script.sh", "< script.sh sh", "python3 < payload.py", "sh -s < script.sh",
    "sh <<'EOF'\nrm -rf x\nEOF",
    "fakeroot rm -rf x", "unshare -r rm -rf x", "nsenter -t 1 -m rm -rf x", "gdb --args rm -rf x",
    "valgrind rm -rf x", "ssh host rm -rf x", "ssh -p 22 host 'rm -rf x'", "proot rm -rf x",
    "firejail rm -rf x", "systemd-run --user rm -rf x", "ltrace rm -rf x", "faketime now rm -rf x",
    # sg runs its second argument as a command line, dbus-launch its arguments
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


def test_a_line_the_grammar_cannot_read_matches_every_deny_rule_and_no_allow_rule() -> None:
    line = 'echo "un balanced'
    assert deny_matches(line, rule_words("git push")) and deny_matches(line, rule_words("rm -rf"))
    assert not allow_matches(line, [["echo"]]) and command_prefixes(line) is None


# the command word matched is the one sh runs (a real shell grammar, not a hand-written lexer), for
# inputs a model sent to get past deny rules
@pytest.mark.parametrize("line", [
    "</dev/null rm -rf victim",  # a redirection before the command word hid it (the matcher saw /dev/null)
    "echo cleaning up # don't worry\nrm -rf victim",  # the quote in the comment swallowed the next line
    "r\\\nm -rf victim2",  # a line continuation inside the command word
])
def test_deny_reads_the_command_word_sh_runs(line: str) -> None:
    assert deny_matches(line, rule_words("rm"))


@pytest.mark.parametrize(("line", "rule"), [
    ("<<pytest touch planted\npytest", "pytest"),  # a here-document's delimiter is no command
    ("ls # it's fine\ntouch planted", "ls"),  # a comment does not join the next line to `ls`
])
def test_allow_reads_every_command_sh_runs(line: str, rule: str) -> None:
    assert not allow_matches(line, [rule_words(rule)])
    assert command_prefixes(line) != [rule_words(rule)]


def test_always_for_a_redirected_command_is_for_its_command_word() -> None:
    prefixes = command_prefixes("</dev/null ls")
    assert prefixes == [["ls"]]  # never `/dev/null`
    assert not allow_matches("</dev/null touch planted2", prefixes)
    assert allow_matches("</dev/null ls -la", prefixes)


# A launcher's scope includes what it launches, or only the tool-wide "always" is offered: "always" for
# `uv run pytest -q` was recorded as `uv run …` and approved `uv run sh -c '…'`.
@pytest.mark.parametrize(("line", "prefixes"), [
    ("uv run pytest -q", [["uv", "run", "pytest"]]), ("poetry run pytest -q", [["poetry", "run", "pytest"]]),
    ("npm exec jest", [["npm", "exec", "jest"]]), ("npx jest --ci", [["npx", "jest"]]),
    ("go run ./cmd/tool", [["go", "run", "./cmd/tool"]]), ("bundle exec rake test", [["bundle", "exec", "rake"]]),
    ("pipx run black .", [["pipx", "run", "black"]]),
    ("uv run python -m pytest", [["uv", "run", "python", "-m", "pytest"]]),
    ("docker run --rm img pytest", None), ("docker run img pytest", None), ("kubectl exec pod -- pytest", None),
    ("cargo run --release", None), ("cargo run", None), ("nix run nixpkgs#hello", None),
    ("uv run sh -c 'pytest'", None), ("npx -y jest", None), ("uv run --with x pytest", None), ("uvx sudo ls", None),
])
def test_a_launchers_scope_includes_what_it_launches(line: str, prefixes: list[list[str]] | None) -> None:
    assert command_prefixes(line) == prefixes
    if prefixes is not None:
        launcher = " ".join(prefixes[0][:-1] if prefixes[0][-2:-1] != ["-m"] else prefixes[0][:2])
        assert allow_matches(line, prefixes)
        assert not allow_matches(f"{launcher} sh -c 'touch planted'", prefixes)
        assert not allow_matches(f"{launcher} touch planted", prefixes)


@pytest.mark.parametrize("launcher", ["uv run", "poetry run", "npm exec", "npx", "docker run img",
                                      "kubectl exec pod --", "go run", "cargo run --", "bundle exec", "pipx run",
                                      "nix run nixpkgs#x --"])
def test_deny_looks_past_launchers(launcher: str) -> None:
    assert deny_matches(f"{launcher} rm -rf victim", rule_words("rm"))
    assert deny_matches(f"{launcher} sh -c 'rm -rf victim'", rule_words("rm -rf"))


# Trying hard to get past `rm` and `rm -rf` deny rules with shell spellings: each kind is seen through or
# fails closed.
@pytest.mark.parametrize("line", [
    # quoting and escapes
    "'rm' -rf v", '"rm" -rf v', "\\rm -rf v", "r''m -rf v", 'r""m -rf v', "\\r\\m -rf v", "$'rm' -rf v",
    "$'\\x72m' -rf v", "rm\t-rf v", "ec\\\nho x; r\\\nm -rf v", "# note \\\nrm -rf v",
    # paths, wrappers, builtins
    "/bin/rm -rf v", "~/bin/rm -rf v", "./rm -rf v", "command rm -rf v", "command -p rm -rf v",
    "builtin exec rm -rf v", "env rm -rf v", "env -u X -- rm -rf v", "env A=$B rm -rf v", "exec rm -rf v",
    "exec -a foo rm -rf v", "time rm -rf v", "time -p nice -n 5 rm -rf v", "nohup rm -rf v &",
    "timeout -s KILL 5 rm -rf v", "stdbuf -o0 rm -rf v", "sudo rm -rf v", "sudo -u root -- rm -rf v",
    "busybox rm -rf v", "coproc rm -rf v", "a=b rm -rf v", "a=$(date) rm -rf v",
    # lists, pipelines, compound commands, functions
    "{ rm -rf v; }", "(rm -rf v)", "! rm -rf v", "true && rm -rf v", "false || rm -rf v", "ls |& rm -rf v",
    "if true; then rm -rf v; fi", "while rm -rf v; do :; done", "until rm -rf v; do :; done",
    "for i in 1; do rm -rf v; done", "select x in a; do rm -rf v; done", "case a in a) rm -rf v;; esac",
    "f() { rm -rf v; }; f", "function f { rm -rf v; }", "f() { rm \"$@\"; }; f -rf v",
    # substitutions, here-documents, redirections
    "echo $(rm -rf v)", 'echo "$(rm -rf v)"', "echo `rm -rf v`", "cat <(rm -rf v)", "tee >(rm -rf v)",
    "x=$(rm -rf v)", "export A=$(rm -rf v)", "echo ${x:-$(rm -rf v)}", "echo $((1 + $(rm -rf v)))",
    "[[ -n $(rm -rf v) ]]", "cat <<EOF\n$(rm -rf v)\nEOF", "cat <<< \"$(rm -rf v)\"", "rm >/dev/null -rf v",
    ">out rm -rf v", "2>&1 rm -rf v", "</dev/null rm -rf v",
    # strings evaluated as scripts
    "sh -c 'rm -rf v'", "bash -c \"rm -rf v\"", "bash -lc 'cd x && rm -rf v'", "sh -c 'r\\m -rf v'",
    "sh -c \"sh -c 'rm -rf v'\"", "eval rm -rf v", "eval 'rm -rf v'", "eval \"$(echo rm -rf v)\"",
    "xargs rm -rf", "find . | xargs -0 rm -rf", "find . -exec rm -rf {} +",
    "find . -exec sh -c 'rm -rf \"$1\"' _ {} \\;",
    "trap 'rm -rf v' EXIT", "su -c 'rm -rf v'", "env -S 'rm -rf v'", "watch rm -rf v",
    # what cannot be judged: fail closed
    "$(echo rm) -rf v", "`echo rm` -rf v", "x=rm; $x -rf v", '"$RM" -rf v', "${RM:-rm} -rf v", "/bin/r? -rf v",
    "r[m] -rf v", "{rm,-rf,v}", "rm $FLAGS v", "rm * v", "bash -c \"x=rm; \\$x -rf v\"", "sh -c \"$CMD\"",
    "echo rm -rf v | sh", "echo rm -rf v | bash -o errexit", "sh < script.sh", "bash <<EOF\nrm -rf v\nEOF",
    "sh <<< 'rm -rf v'", "sh -s < x", "sh <(echo rm -rf v)", "source <(echo rm -rf v)", "python3 < x.py",
    "alias x=rm\nx -rf v", "hash -p /bin/rm ls; ls -rf v", "ls <>f; rm -rf v", "<<x rm -rf v\nx",
    # differential runs against dash and bash: a trap's one-word command, backquotes in
    # backquotes, a stream as a script, `-c` inside a cluster, words the grammar joins across a blank, and
    # bash evaluating a string's `$(…)` in arithmetic, `[[ -eq ]]`, `${x@P}`, and names it takes
    "trap rm\\ -rf\\ v EXIT", "echo `echo \\`rm -rf v\\``", "source /dev/stdin <<< 'rm -rf v'",
    "sh /dev/fd/0 <<< 'rm -rf v'",
    "bash -cx 'rm -rf v'", "bash -ctrue 'rm -rf v'", "bash -c -- 'rm -rf v'", "<<< $ ${x:-rm} -rf v",
    "x='a[$(rm -rf v)]'; echo $((x))", "x='a[$(rm -rf v)]'; [[ $x -eq 0 ]]", "x='$(rm -rf v)'; echo ${x@P}",
    "printf -v 'a[$(rm -rf v)]' x", "unset 'a[$(rm -rf v)]'", "[ -v 'a[$(rm -rf v)]' ]",
    "test -v 'a[$(rm -rf v)]'",
    "sh <<'EOF'\nrm -rf v\nEOF", "python3 - <<'EOF'\nimport os; os.system('rm -rf v')\nEOF",
    "sudo sh <<< 'rm -rf v'",
    # second round: `env -S` with its script attached, `eval --`, a shell's `-c` filled in by xargs or
    # find, backquotes in interpreter code, code that builds its command, substitutions the grammar leaves
    # in a word or a here-document, `! !`
    "env -S'rm -rf v'", "env --split-string='rm -rf v'", "eval -- rm -rf v", "printf 'rm -rf v' | xargs sh -c",
    "echo v | xargs -I% sh -c %", "find . -exec sh -c {} \\;", "perl -e '`rm -rf v`'",
    "awk 'BEGIN { system(\"r\" \"m -rf v\") }'", "python3 -c 'import os; os.system(\"r\" + \"m -rf v\")'",
    "python3 - <<'EOF'\nimport os\nos.system('r' + 'm -rf v')\nEOF", "echo ${x-`rm -rf v`}",
    "cat <<-EOF\n\t$(rm -rf v)\n\tEOF", "cat <<EOF\n\t`rm -rf v`\nEOF", "! ! rm -rf v",
    "time { rm -rf v; }", "coproc X { rm -rf v; }", "sudo -u \"$U\" rm -rf v", "nohup -- rm -rf v",
    "uv run -- rm -rf v",
    # third round: variables a shell or program runs, a descriptor the grammar read as a word, awk's program file
    "x='$(rm -rf v)'; PS4=$x; set -x; :", "PS4='`rm -rf v`'; set -x; :", "PROMPT_COMMAND='rm -rf v' bash -i",
    "BASH_ENV=<(echo rm -rf v) bash -c :", "PAGER='rm -rf v' git log", "export GIT_SSH_COMMAND='rm -rf v'",
    "env EDITOR='rm -rf v' git commit", "sh 0< <(echo rm -rf v)", "awk -f <(echo 'BEGIN{system(\"rm -rf v\")}')",
])
def test_no_shell_spelling_gets_past_a_deny_rule(line: str) -> None:
    assert deny_matches(line, rule_words("rm -rf")), line
    assert deny_matches(line, rule_words("rm")), line


@pytest.mark.parametrize("line", [
    "echo rm -rf v", "ls /bin/rm", "grep -r 'rm -rf' .", "git commit -m 'rm -rf v'", "echo 'rm -rf v' > notes.txt",
    "cat <<'EOF'\nrm -rf v\nEOF", "cat <<EOF\nrm -rf v\nEOF", "printf '%s\\n' \"# don't\" && ls",
    "echo x # rm -rf v", "rmdir v", "python3 tool.py < data.json", "sh script.sh < input.txt",
    "echo v | python3 script.py", "x=$(date) && echo $x", "for f in *.py; do echo $f; done",
    # code a shell or interpreter reads from a here-document the line writes is read, not refused
    "python3 - <<'EOF'\nprint('hello')\nEOF", "sh <<'EOF'\nls -la\nEOF", "bash <<< 'echo hi'",
    "grep -n '$(' script.sh", "bash -c 'echo $1' _ x", "bash script.sh rm",
    "printf '#!/bin/sh\\necho $(date)\\n' > x.sh", "[ -f '$(x)' ]",  # `$(…)` as text bash does not evaluate
    "export EDITOR=vim", "PAGER=cat git log", "ls 2>/dev/null", "echo x>out",
    "python3 -c 'import os, sys; print(os.path.exists(\"filesystem\"), sys.executable)'",  # runs no command
    # what a launcher or a plain wrapper runs is a command of its own: its arguments are its own
    "for f in src/*.ts; do npx tsc --noEmit \"$f\"; done", "uv run pytest \"$T\"", "nohup ./server \"$PORT\" &",
])
def test_deny_still_lets_readable_commands_run(line: str) -> None:
    assert not deny_matches(line, rule_words("rm")), line


@pytest.mark.parametrize(("line", "allowed"), [
    ("{ git status; }", True), ("(git status)", True), ("</dev/null git status", True),
    ("git status 2>/dev/null", True), ("git status >/dev/null 2>&1", True),
    ("if git status; then git status; fi", True),
    ("git status # fine\ngit status", True),
    ("git status > out", False), ("git status >&out", False), ("git status; git() { rm -rf v; }", False),
    ("git status $((1+1))", False), ("[[ -f x ]] && git status", False), ("git status ${x@P}", False),
    ("git status ${!x}", False), ("git status ${a[$i]}", False), ("git status <(ls)", False),
    ("git status\\\n; touch x", False), ("git sta\\\ntus", True),
])
def test_allow_approves_what_sh_runs_and_nothing_it_cannot_judge(line: str, allowed: bool) -> None:
    assert allow_matches(line, [["git", "status"]]) is allowed


def test_the_grammar_is_imported_only_when_a_line_is_read() -> None:
    import subprocess
    import sys

    code = ("import sys, crow_cli.tools.approval; assert 'tree_sitter' not in sys.modules; "
            "from crow_cli.tools.shellrules import deny_matches; deny_matches('rm x', ['rm']); "
            "assert 'tree_sitter_bash' in sys.modules")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def _outcomes(ran_events: list[dict[str, object]]) -> dict[object, object]:
    return {e["result"]["call_id"]: e["result"]["outcome"]  # type: ignore[index]
            for e in ran_events if e["type"] == "tool_result"}


# `crow run --yes --deny run_shell:rm` and a model that deletes by every route: the victims are kept
async def test_crow_run_yes_deny_rm_keeps_the_victims(tmp_path: Path) -> None:
    (tmp_path / "victim").write_text("keep me")
    (tmp_path / "victim2").write_text("keep me")
    calls = [("redirect", "run_shell", {"command": "</dev/null rm -rf victim"}),
             ("comment", "run_shell", {"command": "echo cleaning up # don't worry\nrm -rf victim"}),
             ("continuation", "run_shell", {"command": "r\\\nm -rf victim2"})]
    ran = await run_here(script(calls), "go", flags={"deny": ["run_shell:rm"]}, yes=True, json=True, session=False,
                         cwd=tmp_path)
    assert ran.code == 0, ran.stderr
    assert _outcomes(ran.events()) == {"redirect": "denied", "comment": "denied", "continuation": "denied"}
    assert (tmp_path / "victim").read_text() == "keep me" and (tmp_path / "victim2").read_text() == "keep me"


@pytest.mark.parametrize(("rule", "command"), [
    ("run_shell:pytest", "<<pytest touch planted\npytest"), ("run_shell:ls", "ls # it's fine\ntouch planted")])
async def test_crow_run_allow_does_not_run_what_the_rule_does_not_name(tmp_path: Path, rule: str, command: str) -> None:
    calls = [("c", "run_shell", {"command": command})]
    ran = await run_here(script(calls), "go", flags={"allow": [rule]}, json=True, session=False, cwd=tmp_path)
    assert ran.code == 0, ran.stderr
    assert _outcomes(ran.events()) == {"c": "denied"}  # nobody can answer here: not allowed means not run
    assert not (tmp_path / "planted").exists()


# "always" on a terminal: scoped to the command word sh runs, and to what a launcher launches
def test_crow_run_always_is_scoped_to_what_runs(tmp_path: Path) -> None:
    calls = [[("ls", "run_shell", {"command": "</dev/null ls"})],
             [("touch", "run_shell", {"command": "</dev/null touch planted2"})],
             [("uv", "run_shell", {"command": "uv run true -q"})],
             [("sh", "run_shell", {"command": "uv run sh -c 'touch planted3'"})]]
    with ReplayServer(script(*calls, final="Done.")) as server, ChatTerminal(
            ["--base-url", server.base_url, "--api-key", "sk-test", "--model", "m", "--no-session", "go"],
            cwd=tmp_path, command="run", stderr_on_terminal=True) as term:
        term.expect("[a]lways for `ls …` / always for the [t]ool: ")
        term.send("a\r")
        term.expect("Allow run_shell? [y]es / [n]o [reason] / [a]lways for `touch …`")  # asked, not approved
        term.send("n\r")
        term.expect("[a]lways for `uv run true …` / always for the [t]ool: ")
        term.send("a\r")
        term.expect("Allow run_shell? [y]es / [n]o [reason] / [a]lways for run_shell: ")  # no scope stands for it
        term.send("n\r")
        term.expect("Done.")
        assert term.wait() == 0
    assert "always for `/dev/null" not in term.screen() and "always for `uv run …`" not in term.screen()
    assert not (tmp_path / "planted2").exists() and not (tmp_path / "planted3").exists()


def test_a_line_shell_cannot_be_given_fails_closed() -> None:
    for line in ("rm\0 -rf v", "ls \udcff"):
        assert deny_matches(line, rule_words("git push")) and not allow_matches(line, [["ls"]])


def test_a_traps_one_word_command_is_a_command() -> None:
    assert deny_matches("trap rm EXIT", rule_words("rm")) and not deny_matches("trap 'echo bye' EXIT", ["rm"])


# programs that run a command line given as an option's value: the value is read as a script
@pytest.mark.parametrize("line", [
    "git -c core.pager='rm -rf v' log", "git -c alias.x='!rm -rf v' x", "ssh -o ProxyCommand='rm -rf v' host",
    "tar --to-command='rm -rf v' -xf a.tar", "tar -I 'rm -rf v' -cf x.tar .", "rsync -e 'rm -rf v' a host:",
    "make --eval='$(shell rm -rf v)'", "vim -c ':!rm -rf v'", "npx -c 'rm -rf v'", "git push --exec='rm -rf v'",
])
def test_a_command_given_as_an_options_value_is_read(line: str) -> None:
    assert deny_matches(line, rule_words("rm -rf"))


@pytest.mark.parametrize("line", ["git -c user.name=x commit -m 'rm -rf v'", "tar -I zstd -cf x.tar .",
                                  "git log --format='%h rm -rf'"])
def test_other_option_values_are_not_commands(line: str) -> None:
    assert not deny_matches(line, rule_words("rm -rf"))


@pytest.mark.parametrize("line", [
    "ls ${HOME#$(rm V)}", "echo ${HOME##`rm V`}", "echo ${HOME%%$(rm V)}", "echo ${HOME#*$(rm V)*}",
    "echo ${HOME%'x'$(rm V)}", "echo ${UNSET_ZZ-${HOME#$(rm V)}}", "x=${HOME#$(rm V)}",
    ": ${HOME#$(sh -c 'rm V')}", "echo > ${HOME#$(rm V)}/../ws/out",
])
def test_a_command_inside_an_expansions_pattern_is_never_past_a_rule(line: str) -> None:
    """Both shells run a `$(…)` inside `${x#…}`; the grammar keeps the pattern as opaque text: fail closed."""
    assert deny_matches(line, ["rm"]) and not allow_matches(line, [["ls"], ["echo"], ["x"], [":"]])


@pytest.mark.parametrize("line", ["echo $'\\' ; rm V ; echo '\\'", "ls $'\\' ; touch W ; ls '\\'"])
def test_quoting_dash_reads_otherwise_than_bash_fails_closed(line: str) -> None:
    """run_shell runs /bin/sh (dash): `$'…'` is one word to bash and three commands to dash."""
    assert deny_matches(line, ["rm"]) and not allow_matches(line, [["ls"], ["echo"]])
    assert command_prefixes(line) is None


def test_a_pattern_without_a_substitution_is_still_judged() -> None:
    assert allow_matches("ls ${HOME#*.txt}", [["ls"]]) and not deny_matches("ls ${HOME%/x}", ["rm"])
