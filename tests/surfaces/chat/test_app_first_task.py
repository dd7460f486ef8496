"""docs/first-task.md's transcript is what crow shows: a scripted chat on a small repository, on a pseudo-terminal
against the replay server (the model reads a file, edits it, answers), from the first prompt to an approved diff,
`!python -m pytest`, `/undo`, `/rewind` to before the first prompt (code and conversation, picked from its
lists) and a resumed session.

The page holds the transcript between `<!-- generated: first-task -->` and `<!-- end generated -->`; this test
fails when it is stale. `UPDATE_DOCS=1 pytest tests/surfaces/chat/test_app_first_task.py` writes it (as
scripts/gen_docs.py does for the reference pages; not CROW_*: the tests drop those variables).
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import tempfile
from pathlib import Path

from tests.replay_server import ReplayServer
from tests.support import ROOT, ChatTerminal, text_sse, tool_calls_sse

PAGE = ROOT / "docs" / "first-task.md"
CALC = "def add(a, b):\n    return a - b\n"
TEST = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
SESSION = "k3fq7x"
"""The session id the page shows (the real one is random)."""


def _repository(root: Path) -> Path:
    repo = root / "calc"
    (repo / ".git").mkdir(parents=True)
    (repo / "calc.py").write_text(CALC)
    (repo / "test_calc.py").write_text(TEST)
    return repo


def _screen(term: ChatTerminal) -> list[str]:
    rows = term.display()
    while rows and not rows[-1]:
        rows.pop()
    return rows


def _steady(rows: list[str], repo: Path, session: str) -> str:
    """The transcript without what changes from run to run: the folder, the session id, durations."""
    text = "\n".join(rows).replace(str(repo), "~/calc").replace(session, SESSION)
    text = re.sub(r"\b\d+\.\d\ds\b", "0.01s", text)  # a call's duration, pytest's time
    return re.sub(r"\b\d+\.\d\d seconds\b", "0.01 seconds", text)


def transcript(tmp_path: Path) -> str:
    """Run the scripted first task; what the terminal showed, as the page shows it."""
    repo = _repository(tmp_path)
    task = [{"sse": tool_calls_sse(("call_1", "read_file", {"path": "calc.py"}))},
            {"sse": tool_calls_sse(("call_2", "edit_file", {"path": "calc.py", "old_string": "return a - b",
                                                            "new_string": "return a + b"}))},
            {"sse": text_sse("Fixed: `add` subtracted; it now returns `a + b`.")}]
    question = [{"sse": tool_calls_sse(("call_3", "read_file", {"path": "calc.py"}))},
                {"sse": text_sse("`add(a, b)` returns `a - b`: it subtracts, so `test_add` fails.")}]
    turns = [*task, *task, *question]  # the fix asked twice (once undone, once kept), then a question
    args = ["--api-key", "sk-test", "--model", "qwen3"]
    # the pytest typed in the chat: no plugin of the outer run's (pytest-xdist makes pytest-benchmark warn)
    env = {"CROW_SANDBOX": "off", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    with ReplayServer(turns) as server, ChatTerminal(["--base-url", server.base_url, *args], cwd=repo, env=env,
                                                     columns=88, rows=120) as term:
        term.expect("›")
        for attempt in ("undone", "kept"):
            term.send("The test fails: please fix add in calc.py\r")
            term.expect("Allow edit_file?")
            term.send("y\r")
            term.expect("it now returns")
            term.expect("›")
            if attempt == "undone":
                term.send("/undo\r")
                term.expect("undone")
                term.expect("›")
                assert (repo / "calc.py").read_text() == CALC
        term.send("!python -m pytest -q\r")
        term.expect("(the command and its output")
        term.expect("›")
        term.send("/rewind\r")
        term.expect("Rewind to before which prompt?")
        term.send("\r")
        term.expect("Rewind what?")
        term.send("\r")
        term.expect("rewound")
        term.expect("›")
        assert (repo / "calc.py").read_text() == CALC  # what `!python -m pytest` ran is restored too
        term.send("What does add in calc.py do?\r")
        term.expect("it subtracts")
        term.expect("›")
        term.send("\x04")
        term.expect("to continue this session: crow chat --resume ")
        assert term.wait() == 0
        first = _screen(term)
    session = re.search(r"crow chat --resume (\S+)", "\n".join(first))
    assert session is not None
    with ReplayServer([]) as server, ChatTerminal(["--base-url", server.base_url, *args, "--resume",
                                                    session.group(1)], cwd=repo, env=env, columns=88,
                                                   rows=40) as term:
        term.expect("resumed session")
        term.expect("ask ›")
        term.send("\x04")
        assert term.wait() == 0
        resumed = _screen(term)
    return (_steady(first, repo, session.group(1)) + "\n\n$ crow chat --resume " + SESSION + "\n"
            + _steady(resumed, repo, session.group(1)))


def test_the_first_task_page_shows_what_crow_shows() -> None:
    # a folder of the same length on every run: a line naming a file in it wraps at the same place
    folder = Path(tempfile.mkdtemp(prefix="crow-ft-", dir="/tmp"))
    try:
        wanted = "```text\n$ crow\n" + transcript(folder) + "\n```\n"
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    page = PAGE.read_text(encoding="utf-8")
    block = re.compile(r"(<!-- generated: first-task -->\n).*?(<!-- end generated -->)", re.S)
    assert block.search(page), f"{PAGE} has no '<!-- generated: first-task -->' block"
    current = block.sub(lambda m: m.group(1) + wanted + m.group(2), page)
    if os.environ.get("UPDATE_DOCS") == "1":
        PAGE.write_text(current, encoding="utf-8")
        return
    diff = "".join(difflib.unified_diff(page.splitlines(True), current.splitlines(True), "page", "shown"))
    assert current == page, f"{PAGE} is stale: run UPDATE_DOCS=1 pytest {Path(__file__).relative_to(ROOT)}\n{diff}"
