"""The live area (`surfaces.live`): redrawn from its own lines at the terminal's current width."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console
from rich.text import Text

from crow_cli.surfaces.live import LiveArea, rows_taken
from tests.replay_server import ReplayServer
from tests.support import ChatTerminal, chunk, sse


def test_rows_taken_counts_the_rows_a_narrower_terminal_wraps_lines_onto() -> None:
    assert rows_taken([0, 60, 61, 150], 60) == 1 + 1 + 2 + 3
    assert rows_taken([117, 117], 150) == 2


def test_a_still_live_area_writes_nothing_on_refresh() -> None:
    out = io.StringIO()
    console = Console(file=out, width=60, height=20, force_terminal=True, force_interactive=True)
    area = LiveArea(console, Text("still"))
    area.start()
    area.refresh()
    drawn = len(out.getvalue())
    area.refresh()
    assert "still" in out.getvalue() and len(out.getvalue()) == drawn
    area.stop()


# Provenance: a terminal that went from 150 to 60 columns while an answer streamed showed three copies of the
# partial answer: the live area went up as many rows as it had drawn, the terminal had rewrapped them onto more.
def test_a_terminal_made_narrower_mid_answer_shows_the_answer_once(tmp_path: Path) -> None:
    lines = [f"LINE{n} " + " ".join(["word"] * 22) for n in (1, 2, 3)]  # 116 columns each: two rows at 60
    answer = sse(chunk({"role": "assistant", "content": "\n".join(lines) + "\n"}), chunk({"content": "the end."}),
                 chunk({}, "stop"))
    with ReplayServer([{"sse": answer, "hold_after_events": 1}]) as server, ChatTerminal(
            ["--base-url", server.base_url, "--api-key", "sk-test", "--model", "test-model", "--no-tools",
             "--no-session"], cwd=tmp_path, columns=150, rows=40) as term:
        term.expect("›")
        term.send("three lines\r")
        term.expect(lines[-1])  # the live area shows the held part of the answer
        term.resize(60, 40)
        server.release()
        term.expect("the end.")
        term.expect("›")
        shown = term.display()
        term.send("\x04")
        assert term.wait() == 0
    copies = {name: sum(row.count(name) for row in shown) for name in ("LINE1", "LINE2", "LINE3", "the end.")}
    assert copies == dict.fromkeys(copies, 1), "\n".join(shown)
