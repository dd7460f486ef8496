"""The options every command shares (crow_cli/commands/options.py): what an empty one means."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from crow_cli.commands.options import RunFlags, with_run_flags
from tests.support import crow_here


# an empty flag value is a usage error: `--tools-dir "$DIR"` with DIR unset would import every .py file of
# the working directory as plugin tools, and `--config "$CFG"` read the user's own config file
@pytest.mark.parametrize("command", [["run", "hi"], ["chat"], ["acp"], ["tools"]])
@pytest.mark.parametrize("flag", ["--tools-dir", "--config"])
def test_an_empty_tools_dir_or_config_is_refused_naming_it(tmp_path: Path, command: list[str], flag: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "plugin.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'w').close()\n")
    with contextlib.chdir(tmp_path), pytest.raises(Exception) as caught:  # click's usage error
        crow_here(command[0], flag, "", *command[1:])
    assert getattr(caught.value, "exit_code", None) == 2
    assert f"'{flag}'" in caught.value.format_message() and "empty" in caught.value.format_message()
    assert not (tmp_path / "imported").exists()


def test_the_shared_run_flags_stand_where_the_command_puts_them_and_reach_it_gathered() -> None:
    # run, chat, acp and mcp declared these 19 options one by one, each a near-copy of the others
    seen: list[tuple[str, RunFlags, bool]] = []

    @with_run_flags(omit=("workspace",))
    def command(*, text: Annotated[str, typer.Argument()], flags: RunFlags,
                loud: Annotated[bool, typer.Option("--loud")] = False) -> None:
        seen.append((text, flags, loud))

    app = typer.Typer()
    app.command()(command)
    app.command("other")(lambda: None)  # two commands: `command` is named on the command line
    result = CliRunner().invoke(app, ["command", "hi", "-m", "m1", "--deny", "a", "--deny", "b", "--loud", "-y"])
    assert result.exit_code == 0, result.output
    assert seen == [("hi", RunFlags(model="m1", deny=["a", "b"], yes=True), True)]
    shown = CliRunner().invoke(app, ["command", "--help"]).output
    assert shown.index("--model") < shown.index("--debug") < shown.index("--loud") and "--workspace" not in shown
    refused = CliRunner().invoke(app, ["command", "hi", "--workspace", "/tmp"])
    assert refused.exit_code == 2


def test_the_modes_a_flag_names_are_the_ones_a_continued_session_may_be_loosened_to() -> None:
    assert RunFlags().surface().modes_given == frozenset()
    assert RunFlags(yes=True).surface().modes_given == {"approval"}
    assert RunFlags(approval="ask", sandbox="off").surface().modes_given == {"approval", "sandbox"}


@pytest.mark.parametrize("command", [["run", "hi"], ["chat"], ["acp"], ["mcp"], ["tools"]])
def test_a_tools_dir_that_is_no_folder_is_one_line_and_exit_2(tmp_path: Path, command: list[str],
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    # `--tools-dir /missing` was a warning where a missing `--workspace` is exit 2
    (tmp_path / "file.py").write_text("")
    connection = [] if command == ["tools"] else ["--base-url", "http://127.0.0.1:9/v1", "--api-key", "sk-test",
                                                  "--model", "m"]
    for folder, what in ((tmp_path / "missing", "does not exist"), (tmp_path / "file.py", "is not a folder")):
        code = crow_here(command[0], *connection, "--tools-dir", str(folder), *command[1:])
        err = capsys.readouterr().err
        assert code == 2 and err == f"crow: error: --tools-dir {str(folder)!r} {what}\n"
