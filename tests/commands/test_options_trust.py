"""`crow run` on a terminal asks once whether the folder is trusted (`commands.options.ask_trust`) before anything
of the project is read, and a yes lets the project's hooks act in that same run."""

from __future__ import annotations

import os
import pty
import select
from pathlib import Path

from tests.replay_server import ReplayServer
from tests.support import CROW, text_sse


def test_crow_run_on_a_terminal_asks_and_a_yes_runs_the_projects_hooks(tmp_path: Path) -> None:
    folder = tmp_path / "repo"
    (folder / ".crow").mkdir(parents=True)
    (folder / ".crow" / "settings.toml").write_text('[[hooks.UserPromptSubmit]]\ncommand = "echo PROJECT-CONTEXT"\n')
    with ReplayServer([{"sse": text_sse("answer")}]) as server:
        pid, fd = pty.fork()
        if pid == 0:  # the child: crow on the terminal (HOME and the XDG folders are the test's)
            os.chdir(folder)
            os.environ.update(NO_COLOR="1", CROW_SANDBOX="off")
            os.execv(CROW, [CROW, "run", "--base-url", server.base_url, "--api-key", "sk-x", "--model", "m", "hi"])
        shown = b""
        answered = False
        while True:
            ready, _, _ = select.select([fd], [], [], 60)
            assert ready, f"crow said nothing more: {shown!r}"
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the terminal's other end closed (crow exited)
                break
            if not chunk:
                break
            shown += chunk
            if not answered and b"[y]es / [N]o" in shown:
                os.write(fd, b"y\n")
                answered = True
        _, status = os.waitpid(pid, 0)
        requests = list(server.requests)
    assert os.waitstatus_to_exitcode(status) == 0, shown
    assert b".crow/settings.toml (hooks" in shown and answered
    assert "PROJECT-CONTEXT" in requests[0]["messages"][-1]["content"]
