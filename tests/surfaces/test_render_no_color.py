"""NO_COLOR (https://no-color.org) or output that is not a terminal: no escape sequence at all, not even
`dim` or `bold`. Stdout and stderr on a pseudo-terminal or a pipe: of a `crow run` process once (its environment
read at start-up), else of what `crow run` runs (`run_prompt`) in this process."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.replay_server import ReplayServer
from tests.support import TOOLS, argv, text_sse, tool_turn, write_config

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
            code = await run_prompt(settings, RunOptions(prompt="roll", tools_dirs=(str(TOOLS),), yes=True, **options),
                                    out, err)
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
