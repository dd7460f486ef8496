"""search_files with a catastrophic-backtracking regular expression: the match releases the GIL and has
a time budget, so the run ends, the tool timeout works and Ctrl-C / SIGTERM still stop crow.

With `re` (which holds the GIL for the whole match) each of these runs hung until SIGKILL.

search_files walks the tree crow is given: the git it runs runs nothing the repository configures, and a
symlink loop is skipped.
"""

from __future__ import annotations

import io
import json
import os
import resource
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from crow_cli.errors import ToolError
from crow_cli.tools.builtin import search
from crow_cli.tools.builtin.search import search_files
from crow_cli.tools.context import ToolContext, using_context
from tests.replay_server import ReplayServer
from tests.support import Ran, argv, run_crow, run_here, text_sse, tool_turn, wait_for, write_config

NESTED = "^(a+)+$"  # exponential in `re`, linear in `regex`
SLOW = "^(a|aa)+$"  # exponential in both: only a budget or a timeout stops it
CRASH_LINE = "a" * 60 + "b\n"


@pytest.fixture
def evil_ws(ws: Path) -> Path:
    (ws / "evil.txt").write_text("ok line\n" + CRASH_LINE + "aaaa\n")
    return ws


def _script(pattern: str) -> list[dict]:
    return [{"sse": tool_turn(("call_s", "search_files", json.dumps({"pattern": pattern})))},
            {"sse": text_sse("searched")}]


def _results(ran: Ran) -> list[dict]:
    return [e["result"] for e in ran.events() if e["type"] == "tool_result"]


async def test_the_testers_nested_pattern_answers(evil_ws: Path) -> None:
    ran = await run_here(_script(NESTED), "search", json=True, yes=True, cwd=evil_ws,
                         config=write_config(evil_ws, max_retries=0))
    assert ran.code == 0, ran.stderr
    assert [(r["call_id"], r["ok"], r["output"]) for r in _results(ran)] == [("call_s", True, "evil.txt:3: aaaa")]


def test_an_endless_search_is_stopped_by_the_tool_timeout(evil_ws: Path) -> None:
    # a process: the abandoned search thread ends with it (in this one it would match on until its budget)
    cfg = write_config(evil_ws, max_retries=0, tool_timeout=0.5)  # far below the search's own budget (30 s)
    before = _children_cpu_s()
    ran = run_crow(_script(SLOW), "--json", "--yes", "search", cwd=evil_ws, config=cfg, timeout=90)
    assert ran.code == 0, ran.stderr
    # the loop ran while the match did (it releases the GIL): a match holding it ran until the budget
    # ended it, the timeout's result came 30 s of CPU later
    assert _children_cpu_s() - before < search.SEARCH_BUDGET_S / 2
    results = _results(ran)
    assert [(r["call_id"], r["ok"]) for r in results] == [("call_s", False)]
    assert results[0]["output"] == "Error: search_files timed out after 0.5 s and was cancelled"
    assert ran.events()[-1]["final_text"] == "searched"


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_during_an_endless_search_stops_crow(evil_ws: Path, sig: int, code: int) -> None:
    turn = tool_turn(("call_s", "search_files", json.dumps({"pattern": SLOW})))
    cfg = write_config(evil_ws, max_retries=0)
    before = _children_cpu_s()
    with ReplayServer([{"sse": turn}, {"sse": text_sse("never")}]) as server:
        proc = subprocess.Popen(argv(server.base_url, "--json", "--yes", "search", config=cfg), cwd=evil_ws, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                if json.loads(line)["type"] == "tool_call":
                    break
            started = _cpu_s(proc.pid)
            wait_for(lambda: _cpu_s(proc.pid) >= started + 0.2)  # the search is under way: it burns the CPU
            proc.send_signal(sig)
            rest, err = proc.communicate(timeout=120)  # bounds a hang; a search run to its end exits 0
        finally:
            proc.kill()
    assert proc.returncode == code, err
    events = [json.loads(line) for line in rest.splitlines()]
    results = [e["result"] for e in events if e["type"] == "tool_result"]
    assert [(r["call_id"], r["ok"]) for r in results] == [("call_s", False)]
    assert events[-1]["status"] == "cancelled"
    assert _children_cpu_s() - before < search.SEARCH_BUDGET_S / 2  # the signal stopped it, not the budget


def _children_cpu_s() -> float:
    """CPU seconds used by the processes this one started and has reaped (`crow run`), user + system."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _cpu_s(pid: int) -> float:
    """CPU seconds process `pid` has used so far (user + system, from /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_the_search_budget_stops_the_search_with_a_clear_error(evil_ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search, "SEARCH_BUDGET_S", 0.5)
    with pytest.raises(ToolError) as caught:
        search_files(pattern=SLOW)  # without the budget: exponential, it would not return
    assert str(caught.value) == (
        "search stopped after 0.5 s at evil.txt: the pattern '^(a|aa)+$' backtracks too much (nested or "
        "overlapping repeats such as (a+)+ or (a|aa)+); simplify it or narrow the path")


def test_matches_found_before_the_budget_ran_out_are_returned_under_a_note(
        evil_ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (evil_ws / "a.txt").write_text("aa\n")  # searched before evil.txt
    monkeypatch.setattr(search, "SEARCH_BUDGET_S", 0.5)
    out = search_files(pattern=SLOW)
    assert out.splitlines() == [
        "[search stopped after 0.5 s at evil.txt: the pattern '^(a|aa)+$' backtracks too much (nested or "
        "overlapping repeats such as (a+)+ or (a|aa)+); the matches found before are shown]",
        "a.txt:1: aa",
    ]


def test_python_re_syntax_still_works(evil_ws: Path) -> None:
    (evil_ws / "code.py").write_text("def f(x):\n    return x  # done\n")
    assert search_files(pattern=r"(?P<kw>def|return)\s+\w+", path="code.py") == (
        "code.py:1: def f(x):\ncode.py:2:     return x  # done")
    assert search_files(pattern=r"(?i)DONE$", path="code.py") == "code.py:2:     return x  # done"
    with pytest.raises(ToolError, match=r"^invalid regular expression '\(unclosed': "):
        search_files(pattern="(unclosed")


TRICKY = ("foo bar\r\n\r\nfoo\r\nbar baz;\n  \nx foo\u2028foo x\n\u00e9t\u00e9 foo\rend\nab\nyz\nfoo;\n\n")
PATTERNS = [r"foo$", r"^foo", r"^$", r"^\s*$", r"\bfoo\b", r"foo\s+bar", r"\Afoo", r"foo\Z", r"(?<!x )foo",
            r"foo(?!\n)", r"foo(?= x)", r"[^;]*;$", r"(?s).*end", r"(?i)FOO$", r"^\S+$", r"\Bo", r"(?m)^x",
            r"b(?>[^y]*)$", r"a[^y]*+$", r"(?-i:foo)$", r"\w+;$", r"t\u00e9\s", r"^(?:ab|yz)$", r"", r"z\n?$"]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_matches_are_those_of_re_line_by_line(evil_ws: Path, pattern: str) -> None:
    """The whole-file pre-search only skips files: every line re finds is still found, and no other."""
    import re

    (evil_ws / "evil.txt").unlink()
    (evil_ws / "t.txt").write_text(TRICKY, newline="")
    lines = [line.rstrip("\r\n") for line in io.StringIO(TRICKY, newline="")]  # read_file's lines
    expected = [f"t.txt:{n}: {line}" for n, line in enumerate(lines, 1) if re.search(pattern, line)]
    assert search_files(pattern=pattern) == ("\n".join(expected) if expected else f"no matches for {pattern!r}")


def test_lines_bound_constructs_skip_the_whole_file_search() -> None:
    unsafe = [p for p in PATTERNS if not search.whole_file_safe(p)]
    assert unsafe == [r"\Afoo", r"foo\Z", r"(?<!x )foo", r"foo(?!\n)", r"foo(?= x)", r"b(?>[^y]*)$", r"a[^y]*+$",
                      r"(?-i:foo)$"]


async def test_line_numbers_agree_with_read_file(evil_ws: Path) -> None:
    # Lines break at \n only, as read_file and grep count them: str.splitlines() also breaks at \f, U+0085,
    # U+2028…, which would say line 3 where they have line 2.
    from crow_cli.tools.builtin.files import read_file

    (evil_ws / "ff.txt").write_bytes(b"alpha\x0cbeta\nfoo one\nx\xc2\x85y\nfoo two\r\nz\rfoo three\n")
    out = await search_files.invoke({"pattern": "foo", "path": "ff.txt"})
    assert out == "ff.txt:2: foo one\nff.txt:4: foo two\nff.txt:6: foo three"
    assert await read_file.invoke({"path": "ff.txt", "start_line": 4, "end_line": 4}) == "foo two\r\n"


async def test_a_reverse_search_flag_finds_every_line(evil_ws: Path) -> None:
    (evil_ws / "one.txt").write_text("abc\nfoo bar\n  foo\nFOO\nfoo\tx\n")
    out = await search_files.invoke({"pattern": "(?r)foo", "path": "one.txt"})
    assert out == "one.txt:2: foo bar\none.txt:3:   foo\none.txt:5: foo\tx"


async def test_files_over_the_size_limit_are_named_not_passed_over(evil_ws: Path) -> None:
    # A file over the size limit is named, not skipped silently with "no matches" though it holds the needle.
    big = evil_ws / "big"
    big.mkdir()
    (big / "huge.txt").write_text(("x" * 99 + "\n") * 12_000 + "needle here\n")
    (big / "small.txt").write_text("nothing\n")
    assert await search_files.invoke({"pattern": "needle", "path": "big/huge.txt"}) == "big/huge.txt:12001: needle here"
    out = await search_files.invoke({"pattern": "needle", "path": "big"})
    assert out == ("no matches for 'needle'\n[1 file over 1 MiB not searched: big/huge.txt; "
                   "name it as the path to search it]")


def test_the_budget_bounds_the_whole_search_not_only_one_match(evil_ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the budget is checked between lines too, so a search of many quick lines ends at the documented
    # 30 s (not 1 ms per match past it)
    for n in range(3):
        (evil_ws / f"f{n}.txt").write_text("needle\n" * 50)
    monkeypatch.setattr(search, "SEARCH_BUDGET_S", 0.0)
    with pytest.raises(ToolError, match=r"^search stopped after 0 s at f0\.txt:1: the time budget of one search "
                                        r"is spent; simplify it or narrow the path$"):
        search_files(pattern="needle")


# a pattern that grows huge while compiling (`(?:x{65535}){65535}`: past 20 GB) is refused before the budget
@pytest.mark.parametrize("pattern", ["(?:x{65535}){65535}", "(a{1000}){1000}", "((x{100}){100}){100}",
                                     "[a-z]{400}(?:b{1,300}){400}", "x{65535}{65535}"])
def test_patterns_whose_counted_repeats_multiply_past_the_bound_are_refused(evil_ws: Path, pattern: str) -> None:
    with pytest.raises(ToolError, match=r"^the pattern .* repeats too much: its counted repeats expand to "):
        search_files(pattern)


@pytest.mark.parametrize("pattern", [r"\d{4}-\d{2}-\d{2}", "(?:ab){2,5}c{0,}", "x{65535}", r"[{]{3}\{9999999\}",
                                     "a{}b{,}"])
def test_ordinary_counted_repeats_are_searched(evil_ws: Path, pattern: str) -> None:
    assert search_files(pattern).startswith("no matches")


def test_the_budget_covers_the_git_call(evil_ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[float] = []
    real_run = subprocess.run

    def run(*args: object, timeout: float, **kwargs: object) -> object:
        seen.append(timeout)
        return real_run(*args, timeout=timeout, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(search.subprocess, "run", run)
    monkeypatch.setattr(search, "SEARCH_BUDGET_S", 5.0)
    search_files("ok")
    assert seen and all(0 < t <= 5.0 for t in seen)

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(root: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", *args], cwd=root, check=True, env=env, capture_output=True)


# in a git work tree, search_files never runs .git/config's core.fsmonitor (no approval asked, and the
# API-key variables run_shell hides are in crow's environment)
@needs_git
def test_the_repository_s_fsmonitor_never_runs(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _git(ws, "init", "-q")
    (ws / "a.txt").write_text("needle\n")
    marker = ws.parent / f"{ws.name}-ran"
    hook = ws.parent / f"{ws.name}-fsmonitor.sh"
    hook.write_text(f"#!/bin/sh\nenv > {marker}\nexit 1\n")
    hook.chmod(0o755)
    _git(ws, "config", "core.fsmonitor", str(hook))
    _git(ws, "add", "a.txt")
    marker.unlink(missing_ok=True)  # `git add` above may have run it
    monkeypatch.setenv("CROW_API_KEY", "sk-live-abcdef")
    with using_context(ToolContext.for_workspace(ws, secrets=["sk-live-abcdef"])):
        assert search_files("needle") == "a.txt:1: needle"
    assert not marker.exists()


@needs_git
def test_git_gets_the_scrubbed_environment(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from crow_cli.tools.builtin import search

    _git(ws, "init", "-q")
    (ws / "a.txt").write_text("needle\n")
    envs: list[dict[str, str]] = []
    real_run = subprocess.run

    def run(*args: object, env: dict[str, str], **kwargs: object) -> object:
        envs.append(env)
        return real_run(*args, env=env, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(search.subprocess, "run", run)
    monkeypatch.setenv("CROW_API_KEY", "sk-live-abcdef")
    monkeypatch.setenv("OTHER_TOKEN", "x-sk-live-abcdef-y")
    with using_context(ToolContext.for_workspace(ws, secrets=["sk-live-abcdef"])):
        assert search_files("needle") == "a.txt:1: needle"
    (env,) = envs
    assert "CROW_API_KEY" not in env and "OTHER_TOKEN" not in env and "PATH" in env


# a symlink loop (`ln -s loop loop`) does not make a search of the tree fail
@pytest.mark.parametrize("git", [False, True])
def test_a_symlink_loop_is_skipped(ws: Path, git: bool) -> None:
    if git:
        if shutil.which("git") is None:
            pytest.skip("git is not installed")
        _git(ws, "init", "-q")
    (ws / "loop").symlink_to("loop")
    (ws / "a.txt").write_text("needle\n")
    assert search_files("needle") == "a.txt:1: needle"
