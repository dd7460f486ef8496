"""What the person is shown of a finished tool call: a command's first and last lines and exit code, an applied
edit's diff, in `crow run` (stderr) and `crow chat`, in every approval mode."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from crow_cli.history import ToolCall, ToolDisplay, ToolResult
from crow_cli.sessions import SessionStore
from crow_cli.surfaces.render import TurnView
from crow_cli.surfaces.shown import call_arguments, display_lines, display_status
from tests.support import chat, chat_options, needs_sandbox, run_here, script

SEQ = "seq 1 40"  # 40 lines: 1..5, "… 30 lines …", 36..40


def test_a_long_output_shows_its_first_and_last_lines_around_a_count() -> None:
    output = "".join(f"line {n}\n" for n in range(1, 41))
    shown = [text.strip() for text, _style in display_lines(ToolDisplay(output=output, exit_code=0,
                                                                        status="exit code 0"))]
    assert shown == ["line 1", "line 2", "line 3", "line 4", "line 5", "… 30 lines …",
                     "line 36", "line 37", "line 38", "line 39", "line 40"]
    eleven = "".join(f"{n}\n" for n in range(11))
    assert [t.strip() for t, _ in display_lines(ToolDisplay(output=eleven))] == [str(n) for n in range(11)]


def test_shown_lines_lose_control_characters_and_show_a_redrawn_line_as_it_ended() -> None:
    shown = display_lines(ToolDisplay(output="\x1b[2Jcleared\n 10%\r 50%\r100%\n\x1b]0;title\x07x\n"))
    assert [t.strip() for t, _ in shown] == ["[2Jcleared", "100%", "]0;titlex"]
    assert display_lines(ToolDisplay(output="")) == [("    (no output)", "dim")]
    assert display_lines(None) == [] and display_status(ToolDisplay(diff="--- a/x\n")) is None


def test_a_diff_is_coloured_on_a_terminal_and_plain_on_a_pipe() -> None:
    diff = "--- a/f.py\n+++ b/f.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
    result = ToolResult("c", "edit_file", "edited f.py", display=ToolDisplay(diff=diff))
    call = ToolCall("c", "edit_file", '{"path": "f.py"}')
    coloured = io.StringIO()
    TurnView(Console(file=coloured, force_terminal=True, color_system="standard", width=100),
             plain=False).tool_finished(result, call)
    assert "\x1b[31m    -x = 1" in coloured.getvalue() and "\x1b[32m    +x = 2" in coloured.getvalue()
    piped = io.StringIO()
    TurnView(Console(file=piped, width=100), plain=True).tool_finished(result, call)
    assert piped.getvalue() == "  ok edit_file 0.00s\n" + "".join(f"    {line}\n" for line in diff.splitlines())


# After an approved command, `crow run` shows on stderr its first and last lines and its exit code
async def test_crow_run_shows_a_commands_first_and_last_lines_and_exit_code_on_stderr(tmp_path: Path) -> None:
    turns = script([("c1", "run_shell", {"command": SEQ}), ("c2", "run_shell", {"command": "echo oops; exit 3"})])
    ran = await run_here(turns, "go", yes=True, session=False, cwd=tmp_path)
    assert ran.code == 0, ran.stderr
    assert "  ✓ run_shell " in ran.stderr and "s · exit code 0\n" in ran.stderr
    lines = [line.strip() for line in ran.stderr.splitlines()]
    at = lines.index("1")
    assert lines[at:at + 11] == ["1", "2", "3", "4", "5", "… 30 lines …", "36", "37", "38", "39", "40"]
    assert "s · exit code 3\n    oops\n" in ran.stderr and "  ✗ run_shell " in ran.stderr
    assert ran.stdout == "All done.\n"  # never on stdout
    assert ran.requests[1]["messages"][-2]["content"] == "[exit code 0]\n" + "".join(f"{n}\n" for n in range(1, 41))
    quiet = await run_here(turns, "go", yes=True, session=False, quiet=True, cwd=tmp_path)
    assert quiet.code == 0 and "oops" not in quiet.stderr and "36" not in quiet.stderr


# A command the sandbox refused shows its exit status, that the sandbox refused it, and its first and last lines,
# not one cut line
@needs_sandbox()
async def test_a_command_the_sandbox_refused_shows_its_status_and_output(tmp_path: Path) -> None:
    turns = script([("c1", "run_shell", {"command": "seq 1 30; touch /var/tmp/crow-x; echo end; exit 5"})])
    ran = await run_here(turns, "go", yes=True, session=False, cwd=tmp_path)
    assert ran.code == 0, ran.stderr
    assert "s · exit code 5; the sandbox" in ran.stderr and "not run outside it\n" in ran.stderr
    assert "  ✗ run_shell " in ran.stderr
    lines = [line.strip() for line in ran.stderr.splitlines()]
    assert lines[lines.index("1"):lines.index("1") + 6] == ["1", "2", "3", "4", "5", "… 22 lines …"]
    assert "end" in lines


# Under --yes and auto-edit, where nobody sees a preview, the applied edit's diff is shown
async def test_crow_run_shows_an_applied_edits_diff_under_yes_and_auto_edit(tmp_path: Path) -> None:
    (tmp_path / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    edit = {"path": "calc.py", "old_string": "a - b", "new_string": "a + b"}
    for flags, options in (({}, {"yes": True}), ({"approval": "auto-edit"}, {})):
        (tmp_path / "calc.py").write_text("def add(a, b):\n    return a - b\n")
        ran = await run_here(script([("e1", "edit_file", edit), ("w1", "write_file", {"path": "new.txt",
                                                                                       "content": "hello\n"})]),
                             "fix", flags=flags, session=False, cwd=tmp_path, **options)
        assert ran.code == 0, ran.stderr
        assert "    --- a/calc.py\n    +++ b/calc.py\n" in ran.stderr, ran.stderr
        assert "    -    return a - b\n    +    return a + b\n" in ran.stderr
        assert "    +hello\n" in ran.stderr  # a new file: its content as added lines
        assert "\x1b[" not in ran.stderr  # plain on a pipe
        (tmp_path / "new.txt").unlink()


async def test_crow_run_json_carries_the_display_on_the_tool_result(tmp_path: Path) -> None:
    ran = await run_here(script([("c1", "run_shell", {"command": "echo hi; exit 2"})]), "go", yes=True,
                         json=True, session=False, cwd=tmp_path)
    result = next(e["result"] for e in ran.events() if e["type"] == "tool_result")  # schema-valid
    assert result["display"] == {"output": "hi\n", "exit_code": 2, "status": "exit code 2", "diff": None,
                                 "lines": None, "todos": None}
    assert result["output"] == "[exit code 2]\nhi\n"


@needs_sandbox()  # without one, --yes still asks about every command, and this chat's input has no answer
async def test_chat_shows_a_commands_output_and_an_applied_edits_diff(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "f.txt").write_text("old\n")
    turns = script([("c1", "run_shell", {"command": SEQ}),
                    ("e1", "edit_file", {"path": "f.txt", "old_string": "old", "new_string": "new"})])
    with SessionStore(tmp_path / "s.db") as store:
        out, _server, _app = await chat(turns, "go\r/exit\r", store, options=chat_options(yes=True))
    assert "  ok run_shell " in out and "s · exit code 0\n" in out
    lines = [line.strip() for line in out.splitlines()]
    at = lines.index("1")
    assert lines[at:at + 11] == ["1", "2", "3", "4", "5", "… 30 lines …", "36", "37", "38", "39", "40"]
    assert "    -old\n    +new\n" in out


def test_a_todo_list_is_a_checklist_below_its_call() -> None:
    from crow_cli.todos import TodoItem

    todos = (TodoItem("read", "completed"), TodoItem("fix \x1b[31mit", "in_progress"), TodoItem("test"))
    assert display_lines(ToolDisplay(todos=todos)) == [("    [x] read", "dim"), ("    [~] fix [31mit", "bold"),
                                                       ("    [ ] test", "")]
    assert display_lines(ToolDisplay(todos=())) == [("    (empty)", "dim")]


# Tool lines show arguments as a person reads them, not JSON with its whitespace collapsed
@pytest.mark.parametrize(("arguments", "shown"), [
    ('{"command": "pytest -q   tests/a.py"}', "pytest -q   tests/a.py"),  # the command's own spacing
    ('{"command": "cd src &&\\n  make"}', "cd src && ⏎   make"),
    ('{"path": "src/a.py"}', "src/a.py"),
    ('{"path": "a.py", "offset": 10}', "a.py, offset=10"),
    ('{"path": "a.py", "old_string": "x", "new_string": "y"}', 'a.py, old_string="x", new_string="y"'),
    ('{"text": "one"}', '{"text": "one"}'),  # no subject: its JSON
    ('{"command": "echo \\u001b[31mred"}', "echo \\u001b[31mred"),  # an escape is shown, never sent to the terminal
    ("not json", "not json"),
])
def test_call_arguments_show_a_command_as_a_command_and_a_path_as_a_path(arguments: str, shown: str) -> None:
    assert call_arguments(arguments) == shown


def test_call_arguments_are_cut_to_the_limit() -> None:
    assert call_arguments('{"command": "' + "x" * 100 + '"}', 20) == "x" * 19 + "…"
