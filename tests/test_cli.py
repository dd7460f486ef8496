"""`crow` as a user runs it: a subprocess against a local scripted server over real sockets; what depends on
no process (tables over flags, piped files) runs crow's app (`crow_here`) or what `crow run` runs
(`run_here`) in this process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.replay_server import ReplayServer
from tests.support import (
    CROW,
    ROOT,
    SECRET,
    chunk,
    crow,
    crow_here,
    run_against,
    run_args,
    run_here,
    sse,
    text_sse,
    tool_delta,
    write_config,
)


def dice_call(cid: str = "call_d1") -> str:
    return sse(chunk({"tool_calls": [tool_delta(0, cid, "roll_dice", '{"sides": 6, ')]}),
               chunk({"tool_calls": [tool_delta(0, arguments='"count": 2}')]}), chunk({}, "tool_calls"))


def test_run_streams_answer_runs_plugin_tool_and_sends_result_back(tmp_path):
    proc, requests = run_against([{"sse": dice_call()}, {"sse": text_sse("You rolled.")}],
                                 "--tools-dir", str(ROOT / "tools"), "roll two dice", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "You rolled.\n"
    assert "roll_dice" in proc.stderr and "✓" in proc.stderr
    first, second = requests
    assert {t["function"]["name"] for t in first["tools"]} >= {"read_file", "list_directory", "roll_dice"}
    assistant, result = second["messages"][1], second["messages"][2]
    assert assistant["tool_calls"][0]["id"] == "call_d1"
    assert result["tool_call_id"] == "call_d1" and result["content"].startswith("rolls: [")
    assert SECRET not in proc.stdout + proc.stderr


def test_prompt_from_stdin_and_system_prompt(tmp_path):
    (tmp_path / "piped").write_text("hello\n")
    with ReplayServer([{"sse": text_sse("hi")}]) as srv:
        code = crow_here(*run_args(srv, "--system", "Be brief.", "--no-tools"), stdin=tmp_path / "piped")
    requests = srv.requests
    assert code == 0
    assert requests[0]["messages"] == [{"role": "system", "content": "Be brief."},
                                       {"role": "user", "content": "hello\n"}]
    assert "tools" not in requests[0]


def test_no_prompt_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = crow_here("run", "--base-url", "http://127.0.0.1:9/v1")
    assert code == 2 and capsys.readouterr().err.strip() == "crow: error: no prompt: pass it as an argument or on " \
        "standard input"


def test_bad_config_is_one_line_exit_2(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("model = [")
    proc = crow("run", "--config", str(cfg), "hi")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "not valid TOML" in proc.stderr


def test_auth_error_is_one_line_exit_1_without_the_key():
    body = json.dumps({"error": {"message": "Incorrect API key provided.", "code": "invalid_api_key"}})
    proc, requests = run_against([{"status": 401, "body": body}] * 3, "hi")
    assert proc.returncode == 1 and len(requests) == 1
    assert proc.stderr.strip().startswith("crow: error: authentication failed (401")
    assert "Traceback" not in proc.stderr and SECRET not in proc.stderr + proc.stdout


async def test_max_turns_exit_1_names_the_limit(tmp_path):
    ran = await run_here([{"sse": dice_call("a")}, {"sse": dice_call("b")}], "go", flags={"max_turns": 2},
                         tools_dirs=(str(ROOT / "tools"),), cwd=tmp_path)
    assert ran.code == 1 and "--max-turns 2" in ran.stderr and len(ran.requests) == 2


async def test_debug_traces_deltas_and_never_the_key(tmp_path):
    ran = await run_here([{"sse": dice_call()}, {"sse": text_sse("ok")}], "go", flags={"api_key": SECRET},
                         debug=True, tools_dirs=(str(ROOT / "tools"),), cwd=tmp_path)
    assert ran.code == 0
    assert "[delta] index=0 id='call_d1' name='roll_dice'" in ran.stderr
    assert SECRET not in ran.stderr + ran.stdout


async def test_unreachable_server_is_one_line(tmp_path):
    ran = await run_here([], base_url="http://127.0.0.1:9/v1", config=write_config(tmp_path, max_retries=0),
                         cwd=tmp_path)
    assert ran.code == 1 and ran.stderr.strip().startswith("crow: error: cannot reach http://127.0.0.1:9/v1")


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text + "\n")
    return path


def test_tools_lists_builtins_and_plugins_with_source():
    proc = crow("tools", "--tools-dir", str(ROOT / "tools"))
    assert proc.returncode == 0
    assert "read_file" in proc.stdout and "source: builtin" in proc.stdout
    assert "roll_dice" in proc.stdout and f"source: {ROOT / 'tools' / 'dice.py'}" in proc.stdout


def test_version():
    from crow_cli import __version__

    proc = crow("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"crow {__version__}"


# smaller: a usage error is one crow line and exit 2, never typer's usage box ending in "Error: …"
@pytest.mark.parametrize(("args", "line"), [
    (["run", "--max-turns", "x", "hi"],
     "invalid value for '--max-turns': 'x' is not a valid int (see crow run --help)"),
    (["sessions", "nosuch"], "no such command 'nosuch' (see crow sessions --help)"),  # `crow nosuch`: a chat
    (["run", "--bogus", "hi"], "no such option: --bogus (see crow run --help)"),
    (["sessions", "show"], "missing argument 'session_id' (see crow sessions show --help)"),
    # an argument is echoed with its controls escaped, U+202E too
    (["run", "hi", "evil\x1b[2J\u202e"],
     "got unexpected extra argument(s) (evil\\x1b[2J\\u202e) (see crow run --help)"),
])
def test_usage_errors_are_one_crow_line_exit_2(args, line):
    proc = crow(*args)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"crow: error: {line}\n")


# `crow fix the test` unquoted, or a mistyped command, says how to quote a prompt (and names the command
# meant), not "unexpected extra argument(s) (the test) (see crow chat --help)"
@pytest.mark.parametrize(("args", "line"), [
    (["fix", "the", "test"], 'a prompt of several words goes in quotes: crow "fix the test"'),
    (["sesions", "list"], "no command 'sesions' (did you mean crow sessions?); a prompt of several words goes in "
                          'quotes: crow "sesions list"'),
])
def test_words_after_a_first_word_that_is_no_command_say_how_to_quote_a_prompt(args, line):
    proc = crow(*args)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"crow: error: {line}\n")


# `crow --install-completion` installs shell completion, and it completes
def test_shell_completion_installs_and_completes(tmp_path):
    def from_bash(command: str) -> subprocess.CompletedProcess:  # the shell is detected from the parent
        return subprocess.run(["bash", "-c", f"'{CROW}' {command}; exit $?"], capture_output=True, text=True,
                              timeout=60, env={**os.environ, "HOME": str(tmp_path)}, stdin=subprocess.DEVNULL)

    script = from_bash("--show-completion")
    assert script.returncode == 0 and "_CROW_COMPLETE=complete_bash" in script.stdout, script.stderr
    installed = from_bash("--install-completion")
    assert installed.returncode == 0, installed.stderr
    assert "_CROW_COMPLETE=complete_bash" in (tmp_path / ".bash_completions" / "crow.sh").read_text()
    completed = crow(env={"_CROW_COMPLETE": "complete_bash", "COMP_WORDS": "crow sessions ex", "COMP_CWORD": "2"})
    assert completed.stdout.split() == ["export"]


def test_output_piped_into_a_reader_that_leaves_early(tmp_path):
    long_text = "line\n" * 20000
    with ReplayServer([{"sse": text_sse(long_text)}]) as srv:
        shell = f"'{CROW}' run --base-url {srv.base_url} --no-tools hi | head -1"
        proc = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "NO_COLOR": "1"})
    assert proc.stdout == "line\n"
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr


# Piped stdin goes after the prompt
def test_piped_stdin_goes_after_the_prompt() -> None:
    with ReplayServer([{"sse": text_sse("ok")}]) as srv:
        proc = subprocess.run(f"printf 'diff --git a b\\n' | '{CROW}' run --base-url {srv.base_url} --no-tools "
                              "'Review this diff'", shell=True, capture_output=True, text=True, timeout=60)
        body = srv.requests[0]
    assert proc.returncode == 0, proc.stderr
    assert body["messages"][-1]["content"] == "Review this diff\n\ndiff --git a b\n"


# `python -m crow_cli` runs, without a traceback
def test_no_traceback_from_python_m() -> None:
    proc = subprocess.run([sys.executable, "-m", "crow_cli", "--version"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("crow ")


# A profile whose key variable is unset stops before sending any key (an OpenAI key never goes to its server)
def test_a_profile_whose_key_variable_is_unset_stops_before_sending_any_key(tmp_path, monkeypatch):
    with ReplayServer([{"sse": text_sse("hi")}]) as srv:
        cfg = _config(tmp_path, f'[profiles.other]\nbase_url = "{srv.base_url}"\napi_key_env = "OTHER_KEY"')
        proc = crow("run", "--config", str(cfg), "--profile", "other", "--no-tools", "hi",
                    env={"OPENAI_API_KEY": SECRET, "CROW_API_KEY": SECRET})
        assert proc.returncode == 2 and srv.raw_requests == []
        assert proc.stderr.strip().splitlines() == [
            f"crow: error: OTHER_KEY is not set: api_key_env in {cfg} [profiles.other] names it as the API key for "
            f"{srv.base_url}"]
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)  # OpenAI's key is for OpenAI only (read when crow runs)
        assert crow_here("run", "--base-url", srv.base_url, "--model", "m", "--no-tools", "hi") == 0
        (sent,) = srv.raw_requests
        assert SECRET not in json.dumps(sent)


# smaller: a missing key is exit 2 once the options are checked, before any request
def test_a_hosted_api_without_a_key_is_exit_2_after_the_options_are_checked(capsys: pytest.CaptureFixture[str]
                                                                           ) -> None:
    assert crow_here("run", "--no-tools", "hi") == 2  # no OPENAI_API_KEY or CROW_API_KEY (conftest drops them)
    assert capsys.readouterr().err.startswith("crow: error: no API key for https://api.openai.com/v1: set "
                                              "OPENAI_API_KEY")
    assert crow_here("run", "--approval", "sometimes", "hi") == 2  # the option error comes first
    said = capsys.readouterr().err
    assert "--approval must be one of ask, auto-edit, yolo, read-only, plan (got 'sometimes')" in said


# smaller: `--session ""` is refused, not a continuation of nothing in particular
def test_an_empty_session_id_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code = crow_here("run", "--session", "", "--base-url", "http://127.0.0.1:9/v1", "hi")
    assert (code, capsys.readouterr().err.strip()) == (2, "crow: error: --session needs a session id (crow sessions "
                                                       "list shows them)")
    code = crow_here("chat", "--resume", "", "--base-url", "http://127.0.0.1:9/v1")
    assert (code, capsys.readouterr().err.strip()) == (2, "crow: error: --resume needs a session id, or none to pick a "
                                                       "session")


# A `while read` loop runs one prompt per line: crow run never reads the loop's remaining lines
def test_a_while_read_loop_runs_one_prompt_per_line():
    with ReplayServer([{"sse": text_sse("one")}, {"sse": text_sse("two")}]) as srv:
        shell = (f"printf 'a\\nb\\n' | while read l; do '{CROW}' run --base-url {srv.base_url} --model m "
                 f"--no-session --no-tools \"$l\"; done")
        proc = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "NO_COLOR": "1"}, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "one\ntwo\n"
    assert [r["messages"][-1]["content"] for r in srv.requests] == ["a", "b"]


def test_input_piped_through_a_wrapper_is_read_and_stdin_forces_it():
    with ReplayServer([{"sse": text_sse("one")}, {"sse": text_sse("two")}]) as srv:
        run = f"'{CROW}' run --base-url {srv.base_url} --model m --no-session --no-tools"
        shell = (f"printf 'the diff' | timeout 60 {run} Review; "
                 f"printf 'a\\nb\\n' | while read l; do {run} --stdin \"$l\"; done")
        proc = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "NO_COLOR": "1"}, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert [r["messages"][-1]["content"] for r in srv.requests] == ["Review\n\nthe diff", "a\n\nb\n"]


def test_piped_input_joins_the_prompt_unless_no_stdin(tmp_path):
    (tmp_path / "piped").write_text("the diff\n")  # `crow run … <piped`: a file counts as piped input too
    for flags, sent in (((), "Review this\n\nthe diff\n"), (("--no-stdin",), "Review this")):
        with ReplayServer([{"sse": text_sse("ok")}]) as srv:
            assert crow_here(*run_args(srv, "--no-tools", *flags, "Review this"), stdin=tmp_path / "piped") == 0
        assert srv.requests[0]["messages"][-1]["content"] == sent


# What a command imports, run in a fresh interpreter: crow's `main` with the given argv, then the names of
# every module loaded at exit, written to a file (SystemExit passes through the `finally`).
IMPORTS_AT_EXIT = """
import json, sys
out, sys.argv = sys.argv[1], ["crow", *sys.argv[2:]]
try:
    from crow_cli.cli import main
    main()
finally:
    open(out, "w").write(json.dumps(sorted(sys.modules)))
"""
HEAVY = ("openai.resources", "rich.markdown", "prompt_toolkit", "mcp", "acp")


def imported_by(tmp_path: Path, *args: str, input: str | None = None) -> tuple[subprocess.CompletedProcess[str], set]:
    out = tmp_path / "modules.json"
    env = {**os.environ, "NO_COLOR": "1", "TERM": "dumb"}
    proc = subprocess.run([sys.executable, "-c", IMPORTS_AT_EXIT, str(out), *args], input=input or "", text=True,
                          capture_output=True, timeout=120, cwd=tmp_path, env=env)
    return proc, set(json.loads(out.read_text()))


def loaded(modules: set, prefix: str) -> list[str]:
    return sorted(m for m in modules if m == prefix or m.startswith(prefix + "."))


def test_a_plain_run_imports_no_sdk_resources_renderer_editor_mcp_or_acp(tmp_path):
    # Start-up cost: `crow run` is called from scripts many times in a row; each of these costs
    # start-up time and a plain turn needs none (the SDK's resource modules alone were ~0.4 s)
    with ReplayServer([{"sse": text_sse("ok")}]) as server:
        proc, modules = imported_by(tmp_path, "run", "--base-url", server.base_url, "--api-key", "sk-test",
                                    "--model", "m", "--yes", "hi")
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stderr
    assert "openai" in modules  # the turn really went through the SDK
    assert [m for heavy in HEAVY for m in loaded(modules, heavy)] == []


def test_acp_answers_initialize_without_importing_openai(tmp_path):
    # Start-up cost: an editor starts `crow acp` and waits for `initialize` before anything else
    hello = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}})
    proc, modules = imported_by(tmp_path, "acp", "--model", "m", "--base-url", "http://127.0.0.1:9/v1",
                                input=hello + "\n")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[0])["result"]["protocolVersion"] == 1
    assert "acp" in modules and loaded(modules, "openai") == []


@pytest.mark.parametrize("args", [["--version"], ["tools"]])
@pytest.mark.parametrize("stdout", ["closed", "/dev/full"])
def test_output_that_cannot_be_written_fails_in_one_line(args: list[str], stdout: str,
                                                         _isolated_home: Path) -> None:
    # With stdout closed (`>&-`) or full (`>/dev/full`) crow says in one line it cannot write the output and
    # exits 1, never exit 0 with the output lost nor an internal error
    if stdout == "/dev/full" and not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    with open(os.devnull if stdout == "closed" else stdout, "w") as sink:
        ran = subprocess.run([CROW, *args], stdout=sink, stderr=subprocess.PIPE, text=True, timeout=60,
                             preexec_fn=(lambda: os.close(1)) if stdout == "closed" else None)
    assert ran.returncode == 1
    assert ran.stderr.startswith("crow: error: cannot write the output: ") and ran.stderr.count("\n") == 1


# `crow --help`'s command summaries are whole, not cut by Click at 45 characters ("Run one prompt: stream the
# answer to stdout, tool activity to...")
@pytest.mark.parametrize("group", [[], ["sessions"]])
def test_help_summaries_are_not_cut_mid_sentence(group: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    crow_here(*group, "--help")
    listing = capsys.readouterr().out.split("Commands:\n", 1)[1].split("\n\n", 1)[0]
    assert len(listing.splitlines()) >= 5
    for line in listing.splitlines():
        assert line.endswith(".") and not line.endswith("..."), line


# crow starts as Codex and Claude Code do
@pytest.mark.parametrize(("args", "terminal", "expected"), [
    ([], True, ["chat"]),  # `crow` on a terminal: a chat
    ([], False, []),  # ... help when stdin or stdout is not one
    (["fix the test"], False, ["chat", "fix the test"]),
    (["fix the test", "--model", "m"], True, ["chat", "fix the test", "--model", "m"]),
    (["--model", "m"], True, ["chat", "--model", "m"]),  # a command's option: chat's
    (["tools"], True, ["tools"]),  # a one-word prompt that is a command is the command
    (["sessions", "list"], True, ["sessions", "list"]),
    (["--version"], True, ["--version"]),
    (["--help"], True, ["--help"]),
])
def test_a_first_word_that_is_no_command_opens_chat_with_it(args: list[str], terminal: bool,
                                                            expected: list[str]) -> None:
    from crow_cli.cli import chat_by_default

    assert chat_by_default(args, terminal=terminal) == expected


def test_command_names_are_the_commands_typer_knows() -> None:
    import typer

    from crow_cli.cli import app, command_names

    assert command_names() == set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def test_bare_crow_off_a_terminal_prints_help(tmp_path: Path) -> None:
    result = crow(cwd=tmp_path)  # stdin and stdout are pipes: help, as before (no chat waiting on a pipe)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith("Usage: crow") and "crow chat --resume" in result.stderr


def test_without_a_model_a_custom_server_gets_the_first_of_its_models(tmp_path: Path) -> None:
    # not OpenAI's default name, which a local server does not serve
    with ReplayServer([{"sse": text_sse("Hi.")}]) as server:
        result = crow("run", "--base-url", server.base_url, "--api-key", "sk-test", "--no-tools", "hi", cwd=tmp_path,
                      env={"CROW_MODEL": ""})
    assert result.returncode == 0, result.stderr
    assert server.requests[0]["model"] == "test-model"  # the replay server's /models lists test-model
    assert [line for line in result.stderr.splitlines() if "model" in line] == [
        "crow: model: test-model (the first of the server's /models; --model NAME or `model` in the config picks "
        "another)"]


@pytest.mark.parametrize("command", ["acp", "mcp"])
def test_an_editor_or_agent_surface_without_a_model_takes_the_first_of_the_servers_models(
        tmp_path: Path, command: str) -> None:
    # `crow acp` and `crow mcp` pick the model as run and chat do: a custom server's own /models, not OpenAI's name
    with ReplayServer([]) as server:
        result = crow(command, "--base-url", server.base_url, "--api-key", "sk-test", cwd=tmp_path,
                      env={"CROW_MODEL": ""}, input="")
    assert result.returncode == 0, result.stderr
    assert "crow: model: test-model (the first of the server's /models" in result.stderr


def test_a_continued_session_keeps_its_model_unless_model_is_given(tmp_path: Path) -> None:
    # `--session ID` without --model goes on with the session's model, not the server's first
    with ReplayServer([{"sse": text_sse("One.")}, {"sse": text_sse("Two.")}, {"sse": text_sse("Three.")}],
                      models=["alpha", "beta"]) as server:
        base = ["run", "--base-url", server.base_url, "--api-key", "sk-test", "--no-tools"]
        first = crow(*base, "--model", "beta", "hi", cwd=tmp_path, env={"CROW_MODEL": ""})
        sid = crow("sessions", "list", cwd=tmp_path).stdout.splitlines()[1].split()[0]
        again = crow(*base, "--session", sid, "again", cwd=tmp_path, env={"CROW_MODEL": ""})
        named = crow(*base, "--continue", "--model", "alpha", "once more", cwd=tmp_path, env={"CROW_MODEL": ""})
    assert (first.returncode, again.returncode, named.returncode) == (0, 0, 0), again.stderr
    assert [r["model"] for r in server.requests] == ["beta", "beta", "alpha"]
    assert "crow: model:" not in again.stderr and "was using" not in again.stderr


def test_a_named_model_is_used_without_asking_the_server(tmp_path: Path) -> None:
    with ReplayServer([{"sse": text_sse("Hi.")}]) as server:
        result = crow("run", "--base-url", server.base_url, "--api-key", "sk-test", "--no-tools", "--model", "mine",
                      "hi", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert server.requests[0]["model"] == "mine"
    assert "crow: model:" not in result.stderr


def test_help_names_the_installed_manual_that_exists(capsys: pytest.CaptureFixture[str]) -> None:
    # `crow --help` names where the manual is, a path that exists
    crow_here("--help")
    text = " ".join(capsys.readouterr().out.split())
    assert f"Manual: {ROOT / 'docs'} (" in text
    assert (ROOT / "docs" / "index.md").is_file()
