"""`default_prompt`: crow's built-in system prompt, what the request carries, and how it is replaced or left out."""

from __future__ import annotations

import datetime
import platform
from pathlib import Path

import pytest

from crow_cli.default_prompt import FIRST_LINE, default_prompt, retell_modes, without_default
from crow_cli.errors import ConfigError
from tests.replay_server import text_stream
from tests.support import crow_here, run_here

BUILTINS = ("read_file", "list_directory", "search_files", "write_file", "edit_file", "run_shell")


def test_it_names_the_workspace_os_date_modes_and_stays_small(tmp_path: Path) -> None:
    text = default_prompt(workspace=tmp_path, sandbox="workspace-write", approval="auto-edit", tools=BUILTINS,
                          today=datetime.date(2026, 12, 2))
    assert text.startswith(FIRST_LINE) and "$" not in text
    for part in (str(tmp_path), platform.system(), "2026-12-02", "with no network",
                 "file changes in the workspace apply without asking", "edit_file", "run_shell"):
        assert part in text, part
    assert len(text) / 4 < 500  # well under 1k tokens: small local models have small windows


@pytest.mark.parametrize("network", [False, True])
def test_retelling_the_modes_gives_the_prompt_built_with_them(tmp_path: Path, network: bool) -> None:
    # the one function a change of mode calls (a continued session, a stricter crow mcp call, /approval)
    modes = [(a, s) for a in ("ask", "auto-edit", "yolo", "read-only") for s in ("workspace-write", "read-only", "off")]
    day = datetime.date(2026, 12, 2)
    for was in modes:
        built = default_prompt(workspace=tmp_path, approval=was[0], sandbox=was[1], network=network, today=day)
        for now in modes:
            told = retell_modes(f"{built}\n\nUser text.", approval=now[0], sandbox=now[1], network=network)
            assert told == default_prompt(workspace=tmp_path, approval=now[0], sandbox=now[1], network=network,
                                          today=day) + "\n\nUser text.", (was, now)
    assert retell_modes("Be terse.", approval="yolo", sandbox="off") == "Be terse."


async def test_yes_tells_the_model_calls_run_without_asking(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `crow run --yes` told the model "the user approves each file change": the config's policy, not the run's
    monkeypatch.delenv("CROW_DEFAULT_PROMPT", raising=False)
    ran = await run_here([{"sse": text_stream("ok")}], cwd=tmp_path, yes=True)
    system = ran.requests[0]["messages"][0]["content"]
    assert "Approval: calls run without asking." in system and "approves each" not in system


def test_it_names_the_shell_that_runs_commands_not_the_login_shell(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # the prompt named $SHELL (/bin/bash) while run_shell runs /bin/sh (dash): [[ ]], {1..3}, source failed
    import os

    from crow_cli.tools.builtin import BUILTIN_TOOLS

    monkeypatch.setenv("SHELL", "/bin/bash")
    text = default_prompt(workspace=tmp_path, sandbox="off")
    real = os.path.basename(os.path.realpath("/bin/sh"))
    assert "Commands run with /bin/sh (" in text and "no bash extensions" in text and "/bin/bash" not in text
    assert real == "sh" or f"/bin/sh ({real}: POSIX sh" in text
    (shell,) = [t for t in BUILTIN_TOOLS if t.name == "run_shell"]
    told = shell.schema()["function"]["parameters"]["properties"]["command"]["description"]
    assert "/bin/sh -c (POSIX sh" in told and "no bash" in told


def test_only_the_hints_of_offered_tools_are_given(tmp_path: Path) -> None:
    text = default_prompt(workspace=tmp_path, sandbox="off", tools=("read_file",))
    assert "read_file" in text and "run_shell" not in text and "unconfined" in text
    assert "No tools are offered" in default_prompt(workspace=tmp_path, sandbox="off")


def test_skills_are_listed_with_the_hints_only_when_the_skill_tool_is_offered(tmp_path: Path) -> None:
    listing = ["- forms: Fill in forms.", "- notes: Keep notes."]
    text = default_prompt(workspace=tmp_path, sandbox="off", tools=("read_file", "skill"), skills=listing)
    assert "(read_file; list_directory and search_files find files).\nSkills (load one with the skill tool before a " \
           "task its description matches, then follow it):\n- forms: Fill in forms.\n- notes: Keep notes.\n\n" in text
    assert without_default(f"{text}\n\nBe terse.") == "Be terse."  # the listing adds no paragraph
    assert "forms" not in default_prompt(workspace=tmp_path, sandbox="off", tools=("read_file",), skills=listing)


def test_a_prompt_file_replaces_it_with_the_same_placeholders(tmp_path: Path) -> None:
    (tmp_path / "p.md").write_text("Be terse. You work in $workspace.")
    assert default_prompt(workspace=tmp_path, sandbox="off", file=str(tmp_path / "p.md")) == \
        f"Be terse. You work in {tmp_path}."
    with pytest.raises(ConfigError, match="cannot be read"):
        default_prompt(workspace=tmp_path, sandbox="off", file=str(tmp_path / "missing.md"))


def test_a_stored_prompt_is_compared_without_any_days_built_in_part(tmp_path: Path) -> None:
    yesterday = default_prompt(workspace=tmp_path, sandbox="off", today=datetime.date(2026, 12, 1))
    assert without_default(yesterday) is None
    assert without_default(f"{yesterday}\n\nBe terse.\n\n# AGENTS.md (project)\n\nTabs.") == \
        "Be terse.\n\n# AGENTS.md (project)\n\nTabs."
    assert without_default("Be terse.") == "Be terse."


# Messages[0] tells the model where it works, on what system, and the date, then --system, then AGENTS.md
async def test_the_request_carries_the_default_prompt_then_system_then_agents_md(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CROW_DEFAULT_PROMPT", raising=False)
    (tmp_path / "AGENTS.md").write_text("Use tabs.")
    ran = await run_here([{"sse": text_stream("ok")}], cwd=tmp_path, flags={"system": "Be terse."})
    system = ran.requests[0]["messages"][0]
    assert system["role"] == "system" and system["content"].startswith(FIRST_LINE)
    for part in (str(tmp_path.resolve()), platform.system(), datetime.date.today().isoformat()):
        assert part in system["content"]
    assert system["content"].index("Be terse.") < system["content"].index("Use tabs.")
    assert without_default(system["content"]).startswith("Be terse.")


async def test_system_file_replaces_it_and_no_default_prompt_leaves_it_out(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CROW_DEFAULT_PROMPT", raising=False)
    (tmp_path / "mine.md").write_text("You are a reviewer in $workspace.")
    ran = await run_here([{"sse": text_stream("ok")}], cwd=tmp_path,
                         flags={"system_prompt_file": str(tmp_path / "mine.md")})
    assert ran.requests[0]["messages"][0] == {"role": "system",
                                              "content": f"You are a reviewer in {tmp_path.resolve()}."}
    ran = await run_here([{"sse": text_stream("ok")}], cwd=tmp_path, flags={"default_prompt": False})
    assert ran.requests[0]["messages"][0]["role"] == "user"
    ran = await run_here([], cwd=tmp_path, flags={"system_prompt_file": str(tmp_path / "nope.md")})
    assert (ran.code, ran.requests) == (2, [])
    assert ran.stderr.count("\n") == 1 and "system prompt file" in ran.stderr and "cannot be read" in ran.stderr


async def test_a_continued_session_keeps_the_prompt_it_started_with(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CROW_DEFAULT_PROMPT", raising=False)
    first = await run_here([{"sse": text_stream("one")}], cwd=tmp_path, flags={"approval": "yolo"})
    later = await run_here([{"sse": text_stream("two")}], "and?", cwd=tmp_path, continue_last=True,
                           flags={"approval": "ask"})
    assert later.code == 0, later.stderr
    # its own prompt (its day, its folder), telling the modes it runs under now: the stricter `ask`
    started = first.requests[0]["messages"][0]["content"]
    assert "calls run without asking" in started
    assert later.requests[0]["messages"][0]["content"] == started.replace(
        "calls run without asking", "the user approves each file change and command before it runs")


def test_crow_prompt_prints_the_system_message(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CROW_DEFAULT_PROMPT", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "AGENTS.md").write_text("Use tabs.")
    assert crow_here("prompt", "--approval", "read-only") == 0
    out = capsys.readouterr().out
    assert out.startswith(FIRST_LINE) and "are refused" in out and out.rstrip().endswith("Use tabs.")
    assert crow_here("prompt", "--no-default-prompt", "--no-project-instructions") == 0
    assert capsys.readouterr().out == ""


# `crow prompt --tools-dir /nope` is refused naming the missing folder, and an empty --system-file is named as
# the reason there is no system prompt
def test_crow_prompt_says_what_is_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CROW_DEFAULT_PROMPT", raising=False)
    monkeypatch.chdir(tmp_path)
    assert crow_here("prompt", "--tools-dir", str(tmp_path / "nope")) == 2  # as a missing --workspace
    assert capsys.readouterr().err == f"crow: error: --tools-dir {str(tmp_path / 'nope')!r} does not exist\n"
    (tmp_path / "empty.md").write_text("")
    assert crow_here("prompt", "--system-file", "empty.md", "--no-project-instructions") == 0
    err = capsys.readouterr().err
    assert "the system prompt file 'empty.md' is empty" in err and "(no system prompt, and no AGENTS.md)" in err


# A prompt file is a regular file (not /dev/zero, which would never end) of at most 64 KiB
def test_a_prompt_file_must_be_a_small_regular_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not a regular file"):
        default_prompt(workspace=tmp_path, sandbox="off", file="/dev/zero")
    (tmp_path / "big.md").write_text("x" * 70_000)
    with pytest.raises(ConfigError, match="at most 65,536"):
        default_prompt(workspace=tmp_path, sandbox="off", file=str(tmp_path / "big.md"))


# `crow run -c --system-file F` and `-c --no-default-prompt` are refused, as `-c --system X` is: a continued
# session keeps its stored prompt
@pytest.mark.parametrize("flags", [["--system-file", "x.md"], ["--no-default-prompt"]])
def test_a_continued_session_refuses_a_flag_that_would_change_its_prompt(
        tmp_path: Path, flags: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code = crow_here("run", "--base-url", "http://127.0.0.1:9/v1", "--api-key", "k", "-c", *flags, "more")
    assert code == 2 and "cannot change the system prompt of a continued session" in capsys.readouterr().err


def test_plan_mode_and_the_todo_list_are_said_in_one_short_line_each(tmp_path: Path) -> None:
    text = default_prompt(workspace=tmp_path, sandbox="off", approval="plan", tools=["todo_write", "exit_plan_mode"])
    assert "Approval: you are planning: read files and run read-only commands only" in text
    assert "exit_plan_mode" in text
    hint = next(line for line in text.splitlines() if "todo_write" in line)
    assert hint == "For a task of three steps or more, keep a todo list with todo_write."
    assert "todo_write" not in default_prompt(workspace=tmp_path, sandbox="off", tools=["read_file"])
