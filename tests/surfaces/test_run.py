"""`crow run`'s plain output: what reaches stdout on a terminal, a pipe, a latin-1 stream or a closed stdout."""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path

from crow_cli.events import TextDelta
from crow_cli.sessions import SessionStore
from crow_cli.text import strip_controls
from tests.conftest import chunk, sse, text_sse, tool_delta
from tests.replay_server import ReplayServer, text_stream
from tests.support import CROW, run_against, run_args


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


# found trying it as a new user (second round)
def test_model_text_cannot_drive_the_terminal() -> None:
    from crow_cli.surfaces.run import _Printer  # internals the run surface rewrite replaces

    hostile = "ok\x1b[2J\x1b[H\x1b]0;PWNED\x07 done\r\n"
    assert strip_controls(hostile) == "ok[2J[H]0;PWNED done\n"
    out, err = _Terminal(), io.StringIO()
    _Printer(out, err, debug=False).handle(TextDelta(hostile))
    assert "\x1b" not in out.getvalue() and "\x07" not in out.getvalue()
    piped = io.StringIO()
    _Printer(piped, err, debug=False).handle(TextDelta(hostile))
    assert piped.getvalue() == hostile  # a pipe gets the text as the model sent it


# found trying it as a new user
def test_latin1_stdout_still_gets_the_answer() -> None:
    proc, _ = run_against([{"sse": text_sse("Eagle 🦅 done")}], "--no-tools", "hi",
                          env={"PYTHONIOENCODING": "latin-1"})
    assert proc.returncode == 0 and proc.stdout == "Eagle ? done\n"


# found trying it as a new user
def test_text_of_consecutive_turns_is_not_glued_in_a_pipe(tmp_path: Path) -> None:
    first = sse(chunk({"content": "Let me look."}),
                chunk({"tool_calls": [tool_delta(0, "l1", "list_directory", "{}")]}), chunk({}, "tool_calls"))
    proc, _ = run_against([{"sse": first}, {"sse": text_sse("All done.")}], "go", cwd=tmp_path)
    assert proc.stdout == "Let me look.\nAll done.\n"


# found trying it as a new user (third round)
def test_run_with_stdout_closed_is_not_an_internal_error(_isolated_home: Path) -> None:
    with ReplayServer([{"sse": text_stream("answer nobody reads")}]) as server:
        result = subprocess.run([CROW, *run_args(server, "hi")], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, timeout=60, preexec_fn=lambda: os.close(1))
    assert "internal error" not in result.stderr and result.returncode == 0, result.stderr
    with SessionStore() as store:
        latest = store.latest()
        assert latest is not None
        stored = store.messages(latest.id)
    assert stored[-1] == {"role": "assistant", "content": "answer nobody reads"}
