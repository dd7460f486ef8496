"""NO_COLOR (https://no-color.org) or output that is not a terminal: no escape sequence at all, not even
`dim` or `bold`. Real `crow run` subprocesses, stderr on a pseudo-terminal or a pipe."""

from __future__ import annotations

import json
import os
import pty
import subprocess
from pathlib import Path

import pytest

from tests.conftest import text_sse
from tests.replay_server import ReplayServer
from tests.support import TOOLS, argv, tool_turn, write_config

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


def test_a_terminal_gets_styles_without_no_color(tmp_path: Path) -> None:
    code, out = _run_on_pty(["--tools-dir", str(TOOLS), "--yes", "roll"], tmp_path, _env(), _script())
    assert code == 0, out
    assert b"\x1b[2m" in out and b"\x1b[" in out  # dim notices: the styles the next test must remove


@pytest.mark.parametrize("value", ["1", "true", "0"])  # any non-empty value counts
def test_no_color_means_no_escape_sequences_on_a_terminal(tmp_path: Path, value: str) -> None:
    code, out = _run_on_pty(["--tools-dir", str(TOOLS), "--yes", "roll"], tmp_path, _env(NO_COLOR=value),
                            _script())
    assert code == 0, out
    text = out.decode()
    assert "retrying in 0.01 s" in text and "asking again" in text and "→ roll_dice(" in text
    assert "✗ no_such_tool" in text and text.endswith("done\r\n")
    assert "\x1b" not in text


def test_no_color_error_line_has_no_bold(tmp_path: Path) -> None:
    denied = {"status": 400, "body": json.dumps({"error": {"message": "bad request"}})}
    code, out = _run_on_pty(["hi"], tmp_path, _env(NO_COLOR="1"), [denied])
    assert code == 1
    assert out == b"crow: error: request rejected (400): bad request\r\n"


def test_a_pipe_gets_no_escape_sequences(tmp_path: Path) -> None:
    with ReplayServer(_script()) as server:
        proc = subprocess.run(argv(server.base_url, "--tools-dir", str(TOOLS), "--yes", "roll",
                                   config=write_config(tmp_path, max_retries=2)),
                              cwd=tmp_path, env=_env(), capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert b"retrying in" in proc.stderr and b"roll_dice" in proc.stderr
    assert b"\x1b" not in proc.stderr + proc.stdout


def test_the_chat_console_obeys_no_color_too(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from crow_cli.surfaces.common import make_console

    for value, escapes in (("1", False), ("", True)):  # an empty NO_COLOR does not count
        monkeypatch.setenv("NO_COLOR", value)
        out = io.StringIO()
        make_console(out, force_terminal=True, highlight=False).print("tool ok", style="dim")
        assert ("\x1b" in out.getvalue()) is escapes, value
