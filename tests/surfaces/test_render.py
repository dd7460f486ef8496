"""Streamed Markdown rendering: block splitting (pure) and the rich view at a fixed width, no colour.

NO_COLOR (https://no-color.org) or output that is not a terminal: no escape sequence at all, not even
`dim` or `bold`. Stdout and stderr on a pseudo-terminal or a pipe: of a `crow run` process once (its environment
read at start-up), else of what `crow run` runs (`run_prompt`) in this process.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pty
import re
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from crow_cli.history import ToolCall, ToolResult
from crow_cli.surfaces.render import MarkdownBlocks, TurnView
from tests.replay_server import ReplayServer, text_stream
from tests.support import TOOLS, ChatTerminal, argv, text_sse, tool_turn, write_config

DOC = ("# Title\n\nFirst paragraph\nstill first.\n\n```python\nx = 1\n\ny = 2\n```\nAfter the code.\n\n"
       "- item one\n- item two\n\n~~~~\ncode ``` not closing\n~~~~\n\nLast words")


def split(text: str, sizes: list[int], max_tail: int = 10_000) -> tuple[list[str], str]:
    blocks = MarkdownBlocks(max_tail=max_tail)
    done: list[str] = []
    i = 0
    for n in sizes or [len(text)]:
        done += blocks.feed(text[i : i + n])
        i += n
    done += blocks.feed(text[i:])
    return done, blocks.finish()


def test_blocks_end_at_blank_lines_outside_fences() -> None:
    done, rest = split(DOC, [1] * len(DOC))
    assert done == ["# Title\n\n", "First paragraph\nstill first.\n\n", "```python\nx = 1\n\ny = 2\n```\n",
                    "After the code.\n\n", "- item one\n- item two\n\n", "~~~~\ncode ``` not closing\n~~~~\n"]
    assert rest == "\nLast words"


@given(st.lists(st.integers(min_value=1, max_value=15), max_size=40))
def test_any_chunking_gives_the_same_blocks(sizes: list[int]) -> None:
    done, rest = split(DOC, sizes)
    assert "".join(done) + rest == DOC
    assert split(DOC, [])[0] == done


def test_a_long_code_block_is_cut_and_reopened() -> None:
    code = "```sh\n" + "".join(f"echo {i}\n" for i in range(200)) + "```\n"
    done, rest = split(code, [7] * 400, max_tail=300)
    assert len(done) > 3
    assert all(b.startswith("```sh\n") and b.endswith("```\n") for b in done)
    assert all(len(b) < 400 for b in done)
    body = "".join(b.removeprefix("```sh\n").removesuffix("```\n") for b in done)
    assert body == "".join(f"echo {i}\n" for i in range(200))
    assert rest == ""


def test_a_huge_paragraph_keeps_the_tail_small() -> None:
    text = "word " * 5000
    blocks = MarkdownBlocks(max_tail=500)
    longest = 0
    out = []
    for i in range(0, len(text), 3):
        out += blocks.feed(text[i : i + 3])
        longest = max(longest, len(blocks.tail))
    assert longest <= 503
    assert "".join(out) + blocks.finish() == text


def capture(plain: bool) -> tuple[TurnView, io.StringIO]:
    out = io.StringIO()
    console = Console(file=out, width=60, force_terminal=not plain, color_system=None, highlight=False)
    return TurnView(console, plain=plain, min_interval_s=0), out


@pytest.mark.parametrize("plain", [False, True])
def test_view_renders_a_turn(plain: bool) -> None:
    view, out = capture(plain)
    view.reasoning("thinking it over\n")
    view.reasoning("done")
    for piece in ["# Result\n\nThe **answer** is ", "42.\n\n", "Bye."]:
        view.text(piece)
    view.end_answer()
    call = ToolCall("c1", "read_file", '{"path": "README.md"}', 0)
    view.tool_started(call)
    view.tool_finished(ToolResult("c1", "read_file", "contents", ok=True, duration_s=0.25, index=0), call)
    bad = ToolCall("c2", "shell", '{"cmd": "false"}', 1)
    view.tool_started(bad)
    view.tool_finished(ToolResult("c2", "shell", "Error: exit 1", ok=False, duration_s=1.5, index=1), bad)
    view.stop()
    text = out.getvalue()
    assert "thinking it over" in text
    if plain:
        assert "The **answer** is 42." in text  # no Markdown, exactly as streamed
        assert "→ read_file(README.md)" in text  # a path as a path
        assert "  ok read_file 0.25s" in text and "  error shell 1.50s: Error: exit 1" in text
        assert "\x1b" not in text
    else:
        assert "The answer is 42." in text  # rendered: no asterisks
        assert "**" not in text
        assert "✓ read_file(README.md) ok 0.25s" in text
        assert "✗ shell({\"cmd\": \"false\"}) error 1.50s: Error: exit 1" in text


def test_hidden_reasoning_is_not_shown() -> None:
    view, out = capture(True)
    view.show_reasoning = False
    view.reasoning("secret thoughts")
    view.text("answer")
    view.end_answer()
    assert out.getvalue() == "answer\n"


def render_whole(text: str, width: int = 60) -> str:
    from crow_cli.surfaces.render import honest_markdown

    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(honest_markdown(text, TurnView.code_theme))
    return out.getvalue()


def render_streamed(text: str, sizes: list[int], width: int = 60) -> str:
    """The frozen output of a streamed answer (a console that is not a terminal shows no live frames)."""
    out = io.StringIO()
    view = TurnView(Console(file=out, width=width, color_system=None), plain=False, min_interval_s=0)
    i = 0
    for n in sizes:
        view.text(text[i : i + n])
        i += n
    view.text(text[i:])
    view.end_answer()
    view.stop()
    return out.getvalue()


@given(st.lists(st.integers(min_value=1, max_value=15), max_size=40))
def test_streamed_markdown_keeps_the_blank_lines_between_blocks(sizes: list[int]) -> None:
    """Paragraphs, code blocks and lists stay apart as in the answer rendered whole."""
    assert render_streamed(DOC, sizes) == render_whole(DOC)


def test_two_paragraphs_stay_apart() -> None:
    shown = render_streamed("First paragraph.\n\nSecond paragraph.\n", [1] * 40)
    assert [line.rstrip() for line in shown.splitlines()] == ["First paragraph.", "", "Second paragraph."]


# A listing or a poem streamed line by line keeps its lines (soft breaks do not join them into a paragraph)
@given(st.lists(st.integers(min_value=1, max_value=7), max_size=20))
def test_lines_streamed_as_separate_lines_stay_separate_lines(sizes: list[int]) -> None:
    shown = render_streamed("Roses are red,\nviolets are blue.\n", sizes)
    assert [line.rstrip() for line in shown.splitlines()] == ["Roses are red,", "violets are blue."]


def test_lists_and_code_blocks_render_as_before() -> None:
    from rich.markdown import Markdown

    text = "Steps:\n\n- one\n- two\n\n```\na = 1\nb = 2\n```\n"
    rich_alone = io.StringIO()
    Console(file=rich_alone, width=60, color_system=None).print(Markdown(text, code_theme=TurnView.code_theme))
    assert render_streamed(text, [3] * 30) == rich_alone.getvalue()


def test_the_live_tail_starts_where_its_frozen_block_will_be() -> None:
    """The growing paragraph does not jump down a line when its block is frozen."""
    from crow_cli.surfaces.render import _LiveArea  # noqa: PLC2701  # the live area

    view, _frozen = capture(plain=False)
    view.text("First.\n\nSecond, still growing")
    live = io.StringIO()
    Console(file=live, width=60, color_system=None).print(_LiveArea(view))
    view.stop()
    assert [line.rstrip() for line in live.getvalue().splitlines()] == ["", "Second, still growing"]


def test_a_tool_name_from_the_model_cannot_drive_the_terminal() -> None:
    # an unknown tool's name (`evil\x1b]0;PWNED\x1b[2J`) is filtered in `crow chat` as in `crow run`

    for plain in (True, False):
        out = io.StringIO()
        view = TurnView(Console(file=out, width=100, color_system=None), plain=plain)
        call = ToolCall("c1", "evil\x1b]0;PWNED\x07\x1b[2J", "{}", 0)
        view.tool_started(call)
        view.tool_finished(ToolResult("c1", call.name, "Error: unknown tool", ok=False, index=0), call)
        view.stop()
        assert "\x1b]0" not in out.getvalue() and "\x07" not in out.getvalue() and "evil" in out.getvalue()


# A chat answer `[https://github.com/acme/repo](https://evil.example/x)` never becomes a terminal hyperlink
# showing one URL and opening the other
def _hyperlinked(text: str) -> str:
    out = io.StringIO()
    view = TurnView(Console(file=out, width=100, force_terminal=True, color_system="truecolor"), plain=False,
                    min_interval_s=0)
    view.text(text)
    view.end_answer()
    view.stop()
    return out.getvalue()


def test_a_link_whose_text_differs_from_its_target_shows_the_target() -> None:
    shown = _hyperlinked("See [https://github.com/acme/repo](https://evil.example/x) now.\n")
    assert "\x1b]8;" not in shown  # no OSC 8 hyperlink
    assert "evil.example/x" in shown and "github.com/acme/repo" in shown


@pytest.mark.parametrize("answer", ["See <https://example.com/a> now.\n", "[https://x.io](https://x.io)\n"])
def test_a_link_that_shows_its_target_stays_a_hyperlink(answer: str) -> None:
    shown = _hyperlinked(answer)
    assert "\x1b]8;" in shown and shown.count("x.io") + shown.count("example.com/a") >= 1


def test_the_live_area_is_not_padded_to_the_terminal_width() -> None:
    # Resizing the terminal during a streamed answer leaves no stale partial lines: were the live area's rows
    # padded to the full width, a narrower terminal would rewrap each into two and the redraw, which moves up
    # as many rows as it drew, would leave the rest on the screen
    from crow_cli.surfaces.render import _LiveArea  # noqa: PLC2701  # the live area

    view, _frozen = capture(plain=False)
    view.text("A short paragraph that is still growing\n- an item\n- another")
    live = io.StringIO()
    Console(file=live, width=60, color_system=None).print(_LiveArea(view))
    view.stop()
    lines = live.getvalue().splitlines()
    assert "A short paragraph that is still growing" in lines and " • an item" in lines
    assert all(line == line.rstrip(" ") for line in lines)


# A poem streamed line by line shows as its lines in a terminal chat, not one paragraph
def test_a_chat_on_a_terminal_shows_two_streamed_lines_as_two_lines(tmp_path: Path) -> None:
    with ReplayServer([{"sse": text_stream("Roses are red,\nviolets are blue.\n")}]) as server, ChatTerminal(
            ["--base-url", server.base_url, "--api-key", "sk-test", "--model", "test-model", "--no-tools",
             "--no-session"], cwd=tmp_path) as term:
        term.expect("›")
        term.send("a poem\r")
        term.expect("violets are blue.")
        term.expect("›")
        term.send("\x04")
        assert term.wait() == 0
        screen = term.screen()
    assert re.search(r"Roses are red, *\r?\n *violets are blue\.", screen), screen
    assert "Roses are red, violets" not in screen, screen


# The token-cap warning comes as the stream ends, before the answer's last block is drawn: it is shown after
# the answer, not inside it
@pytest.mark.parametrize("plain", [True, False])
def test_a_warning_that_comes_while_the_answer_streams_is_shown_after_it(plain: bool) -> None:
    out = io.StringIO()  # not a terminal: the frozen output only, no live frames
    view = TurnView(Console(file=out, width=60, color_system=None), plain=plain, min_interval_s=0)
    view.text("First part.\n\nSecond part")
    view.warning("crow: warning: the model hit its token limit")
    view.end_answer()
    view.stop()
    lines = [line.rstrip() for line in out.getvalue().splitlines() if line.strip()]
    assert lines == ["First part.", "Second part", "crow: warning: the model hit its token limit"]
    view.warning("between turns")  # no answer streaming: at once
    assert out.getvalue().rstrip().endswith("between turns")


# The wait for a first token says what is happening (a local model processing a long prompt on the CPU),
# not only "waiting for the model…" for minutes
def test_the_wait_for_a_first_token_says_what_is_happening() -> None:
    from crow_cli.surfaces.render import WAIT_SECONDS_AFTER_S, _LiveArea  # noqa: PLC2701  # the live area

    view = TurnView(Console(file=io.StringIO(), width=80, force_terminal=True, color_system=None), plain=False)
    view.waiting(True)
    assert view.waiting_text() == view.waiting_text(1) == "waiting for the model…"
    assert view.waiting_text(WAIT_SECONDS_AFTER_S + 9.2) == "waiting for the model… 12 s"
    view.waiting_for("processing the prompt (512 of 2,048 tokens)…")  # the server's progress
    live = io.StringIO()
    Console(file=live, width=80, color_system=None).print(_LiveArea(view))
    assert "processing the prompt (512 of 2,048 tokens)…" in live.getvalue()
    view.stop()

FORCING = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "CLICOLOR_FORCE", "NO_COLOR")


def _script() -> list[dict]:
    """Every style `crow run` uses on stderr: a retry and a restart notice (dim), a tool call (cyan), a
    finished call (green) and a failed one (red); then the answer."""
    limited = {"status": 429, "headers": {"retry-after-ms": "10"},
               "body": json.dumps({"error": {"message": "slow down"}})}
    cut = {"sse": text_sse("partial answer here"), "cut_after_events": 2}
    calls = tool_turn(("c1", "roll_dice", '{"sides": 6, "count": 2}'), ("c2", "no_such_tool", "{}"))
    return [limited, cut, {"sse": calls}, {"sse": text_sse("done")}]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in FORCING}
    return {**env, "TERM": "xterm-256color", "COLUMNS": "100", **extra}


def _run_on_pty(args: list[str], cwd: Path, env: dict[str, str], script: list[dict]) -> tuple[int, bytes]:
    """Run `crow run ARGS` with stdout and stderr on a pseudo-terminal; what it wrote there."""
    with ReplayServer(script) as server:
        primary, secondary = pty.openpty()
        proc = subprocess.Popen(argv(server.base_url, *args, config=write_config(cwd, max_retries=2)), cwd=cwd,
                                env=env, stdin=subprocess.DEVNULL, stdout=secondary, stderr=secondary)
        os.close(secondary)
        out = b""
        try:
            while chunk := os.read(primary, 4096):
                out += chunk
        except OSError:  # EIO: the child closed the terminal
            pass
        finally:
            os.close(primary)
        return proc.wait(timeout=60), out


async def _run_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, terminal: bool, no_color: str | None = None,
                    **options: Any) -> tuple[int, bytes]:
    """`run_prompt` (what `crow run --tools-dir TOOLS --yes roll` runs) in this process on `_script()`, its
    stdout and stderr on one pseudo-terminal (`terminal`) or one pipe, in `_env`'s environment (NO_COLOR:
    `no_color`); the exit code and what was written there."""
    from crow_cli.config import load_settings
    from crow_cli.surfaces.options import SurfaceOptions
    from crow_cli.surfaces.run import RunOptions, run_prompt

    for name in FORCING:
        monkeypatch.delenv(name, raising=False)
    for name, value in {"TERM": "xterm-256color", "COLUMNS": "100", "NO_COLOR": no_color}.items():
        if value is not None:
            monkeypatch.setenv(name, value)
    reading, writing = pty.openpty() if terminal else os.pipe()
    shown = bytearray()

    def drain() -> None:
        with contextlib.suppress(OSError):  # EIO: no terminal end is open any more
            while chunk := os.read(reading, 4096):
                shown.extend(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        with ReplayServer(_script()) as server, contextlib.chdir(tmp_path), \
                open(writing, "w", buffering=1, encoding="utf-8", closefd=False) as out, \
                open(os.dup(writing), "w", buffering=1, encoding="utf-8") as err:  # line-buffered as on a terminal
            settings = load_settings({"base_url": server.base_url, "api_key": "sk-test", "model": "test-model"},
                                     config_path=str(write_config(tmp_path, max_retries=2)))
            surface = SurfaceOptions(tools_dirs=(str(TOOLS),), yes=True)
            code = await run_prompt(settings, RunOptions(prompt="roll", surface=surface, **options), out, err)
    finally:
        os.close(writing)
        reader.join()  # ends once every writing end is closed
        os.close(reading)
    return code, bytes(shown)


async def test_a_terminal_gets_styles_without_no_color(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = await _run_here(tmp_path, monkeypatch, terminal=True)
    assert code == 0, out
    assert b"\x1b[2m" in out and b"\x1b[" in out  # dim notices: the styles the next test must remove


@pytest.mark.parametrize("value", ["1", "true", "0"])  # any non-empty value counts
async def test_no_color_means_no_escape_sequences_on_a_terminal(tmp_path: Path, value: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = await _run_here(tmp_path, monkeypatch, terminal=True, no_color=value)
    assert code == 0, out
    text = out.decode()
    assert "retrying in 0.01 s" in text and "asking again" in text and "→ roll_dice(" in text
    assert "✗ no_such_tool" in text and "done\r\n" in text
    assert text.endswith(" · test-model · session " + text.rsplit("session ", 1)[-1])  # the run's token-use line
    assert "\x1b" not in text


def test_no_color_error_line_has_no_bold(tmp_path: Path) -> None:
    # a crow process: NO_COLOR read from the environment it starts with, its descriptors on a terminal
    denied = {"status": 400, "body": json.dumps({"error": {"message": "bad request"}})}
    code, out = _run_on_pty(["hi"], tmp_path, _env(NO_COLOR="1"), [denied])
    assert code == 1
    assert out == b"crow: error: request rejected (400): bad request\r\n"


async def test_a_pipe_gets_no_escape_sequences(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = await _run_here(tmp_path, monkeypatch, terminal=False)
    assert code == 0, out
    assert b"retrying in" in out and b"roll_dice" in out
    assert b"\x1b" not in out


def test_the_chat_console_obeys_no_color_too(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from crow_cli.surfaces.common import make_console

    for value, escapes in (("1", False), ("", True)):  # an empty NO_COLOR does not count
        monkeypatch.setenv("NO_COLOR", value)
        out = io.StringIO()
        make_console(out, force_terminal=True, highlight=False).print("tool ok", style="dim")
        assert ("\x1b" in out.getvalue()) is escapes, value
