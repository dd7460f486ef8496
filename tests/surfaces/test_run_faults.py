"""Fault injection in `crow run`: retries, final errors, cut and stalled streams, bad bodies.

Every run goes to the replay server over real sockets and each stdout line of `--json` is validated against
the shipped schema. They run `run_prompt` (what `crow run` runs) in this process (`run_here`); only what a
process has (its stdout a full disk) spawns `crow run`. Retries and timeouts are made small through the
config file.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

from tests.support import TOOLS, Ran, assert_contract, chunk, run_here, sse, text_sse, tool_turn, write_config

ERROR_500 = {"status": 500, "body": json.dumps({"error": {"message": "internal error", "type": "server_error"}})}
LONG = "The quick brown fox jumps over the lazy dog. " * 4
HTML_502 = ("<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title><style>body { font: 12px monospace; }"
            "</style></head>\n<body><center><h1>502 Bad Gateway</h1></center><hr><center>nginx/1.25.3</center>"
            "</body></html>\n")


def fails_in_one_line(ran: Ran, *needles: str) -> str:
    """The run failed with exit 1, one `crow: error:` line on stderr, and a final `error` event."""
    assert ran.code == 1, (ran.stdout, ran.stderr)
    assert "Traceback" not in ran.stderr + ran.stdout
    lines = ran.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("crow: error: "), ran.stderr
    for needle in needles:
        assert needle in lines[0]
    events = ran.events()
    assert events[0]["type"] == "run_started"
    assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "error"
    assert events[-1]["error"] == lines[0].removeprefix("crow: error: ")
    return lines[0]


def completes(ran: Ran, answer: str) -> list[dict]:
    assert ran.code == 0, ran.stderr
    events = ran.events()
    assert events[-1]["status"] == "completed" and events[-1]["final_text"] == answer
    return events


async def test_500_then_success_is_retried(tmp_path: Path) -> None:
    config = write_config(tmp_path, max_retries=2)
    ran = await run_here([ERROR_500, {"sse": text_sse("recovered")}], json=True, cwd=tmp_path, config=config)
    completes(ran, "recovered")
    assert len(ran.requests) == 2 and ran.requests[0] == ran.requests[1]


async def test_429_waits_for_retry_after(tmp_path: Path) -> None:
    config = write_config(tmp_path, max_retries=2)
    limited = {"status": 429, "headers": {"retry-after": "0.05"},
               "body": json.dumps({"error": {"message": "slow down", "type": "rate_limit"}})}
    ran = await run_here([limited, {"sse": text_sse("after the wait")}], json=True, cwd=tmp_path, config=config)
    events = completes(ran, "after the wait")
    assert len(ran.requests) == 2
    # what crow waited, as it reports it (a measured time is a margin): the server's 0.05 s, not its own
    # backoff (0.375 to 0.5 s before the first retry)
    assert [e["wait_s"] for e in events if e["type"] == "notice" and e["code"] == "retrying"] == [0.05]


async def test_429_past_the_retries_is_one_line(tmp_path: Path) -> None:
    config = write_config(tmp_path, max_retries=0)
    limited = {"status": 429, "headers": {"retry-after": "0"},
               "body": json.dumps({"error": {"message": "quota exceeded", "type": "rate_limit"}})}
    line = fails_in_one_line(await run_here([limited], json=True, cwd=tmp_path, config=config),
                             "rate limited (429)", "quota exceeded")
    assert "sk-test" not in line


async def test_401_is_final_and_one_line(tmp_path: Path) -> None:
    config = write_config(tmp_path, max_retries=3)
    denied = {"status": 401, "body": json.dumps({"error": {"message": "Incorrect API key provided.",
                                                           "code": "invalid_api_key"}})}
    ran = await run_here([denied] * 4, json=True, cwd=tmp_path, config=config)
    fails_in_one_line(ran, "authentication failed (401", "Incorrect API key provided.", "API key")
    assert len(ran.requests) == 1


async def test_html_502_is_one_line_without_markup(tmp_path: Path) -> None:
    config = write_config(tmp_path, max_retries=1)
    page = {"status": 502, "body": HTML_502, "headers": {"content-type": "text/html"}}
    ran = await run_here([page, page], json=True, cwd=tmp_path, config=config)
    line = fails_in_one_line(ran, "server error (502)", "502 Bad Gateway")
    assert "<" not in line and "font" not in line and "nginx" not in line
    assert len(ran.requests) == 2


async def test_a_chunk_that_is_not_json_is_a_clear_error(tmp_path: Path) -> None:
    config = write_config(tmp_path, max_retries=0)
    body = sse(chunk({"content": "Hel"}), done=False) + "data: {\"choices\": [{\"delta\": {\"content\": \"lo\n\n"
    ran = await run_here([{"sse": body}], json=True, cwd=tmp_path, config=config)
    fails_in_one_line(ran, "not JSON")
    assert len(ran.requests) == 1


async def test_stream_cut_mid_answer_is_asked_again_once(tmp_path: Path) -> None:
    config = write_config(tmp_path, max_retries=0)
    ran = await run_here([{"sse": text_sse(LONG), "cut_after_events": 3}, {"sse": text_sse("Second try.")}],
                         json=True, cwd=tmp_path, config=config)
    events = completes(ran, "Second try.")
    notice = next(i for i, e in enumerate(events) if e["type"] == "notice")
    assert events[notice]["code"] == "turn_restarted" and "broke" in events[notice]["message"]
    assert "".join(e["text"] for e in events[:notice] if e["type"] == "text") == LONG[:15]  # three 5-char deltas
    assert "".join(e["text"] for e in events[notice:] if e["type"] == "text") == "Second try."
    assert len(ran.requests) == 2 and ran.requests[0]["messages"] == ran.requests[1]["messages"]


async def test_plain_mode_restarts_the_answer_on_a_new_line_with_a_notice(tmp_path: Path) -> None:
    config = write_config(tmp_path, max_retries=0)
    ran = await run_here([{"sse": text_sse(LONG), "cut_after_events": 3}, {"sse": text_sse("Second try.")}],
                         cwd=tmp_path, config=config)
    assert ran.code == 0, ran.stderr
    assert ran.stdout == LONG[:15] + "\nSecond try.\n"
    assert "the stream broke mid-way" in ran.stderr and "the answer restarts" in ran.stderr


async def test_a_stream_cut_twice_fails_with_a_valid_history(tmp_path: Path) -> None:
    config = write_config(tmp_path, max_retries=0)
    first = {"sse": tool_turn(("call_d", "roll_dice", '{"sides": 6}'))}
    cut = {"sse": text_sse(LONG), "cut_after_events": 2}
    ran = await run_here([first, cut, cut, {"sse": text_sse("never")}], json=True, tools_dirs=(str(TOOLS),),
                         cwd=tmp_path, config=config)
    fails_in_one_line(ran, "the stream broke mid-way", "after 2 attempts")
    assert len(ran.requests) == 3
    assert ran.requests[1]["messages"] == ran.requests[2]["messages"]  # asked again from the same history
    assert_contract(ran.requests[2]["messages"])
    assert ran.requests[2]["messages"][-1]["tool_call_id"] == "call_d"


async def test_a_stalled_stream_past_idle_timeout_is_asked_again(tmp_path: Path) -> None:
    config = write_config(tmp_path, max_retries=0, idle_timeout=2)  # a fresh stream on a loaded machine is in time
    stalled = {"sse": text_sse("Stalled answer that never ends"), "delay_ms": 600_000}
    ran = await run_here([stalled, {"sse": text_sse("Fresh.")}], json=True, cwd=tmp_path, config=config)
    events = completes(ran, "Fresh.")
    notice = next(e for e in events if e["type"] == "notice")
    assert notice["code"] == "turn_restarted" and "idle" in notice["message"]
    assert len(ran.requests) == 2


async def test_a_server_that_never_answers_fails_after_retries(tmp_path: Path) -> None:
    config = write_config(tmp_path, max_retries=0, idle_timeout=2)
    stalled = {"sse": text_sse("late"), "delay_ms": 600_000}
    ran = await run_here([stalled, stalled], json=True, cwd=tmp_path, config=config)
    fails_in_one_line(ran, "idle", "after 2 attempts")


async def test_a_server_error_message_cannot_drive_the_terminal(tmp_path: Path) -> None:
    # issue 11 item 3 (found trying it as a new user): escape sequences (screen clear, colours, an OSC 8
    # link) in a provider's error message reached stderr unfiltered, in plain mode and with --json
    hostile = "bad model\x1b[2J\x1b[31m red \x1b]8;;http://evil.test\x07link\x1b]8;;\x07\x9b2J"
    denied = {"status": 400, "body": json.dumps({"error": {"message": hostile}})}
    config = write_config(tmp_path, max_retries=0)
    for json_mode in (False, True):
        ran = await run_here([denied], json=json_mode, cwd=tmp_path, config=config)
        assert ran.code == 1 and "bad model" in ran.stderr
        assert not any(c in ran.stderr for c in "\x1b\x07\x9b"), repr(ran.stderr)


async def test_a_damaged_event_mid_stream_is_a_warning_and_the_run_completes(tmp_path: Path) -> None:
    # One data: line held a chunk cut mid-JSON and the next data: frame; crow stopped the run (issue 10 item 2)
    config = write_config(tmp_path, max_retries=0)
    cut = json.dumps(chunk({"content": " lost"}))[:30]
    body = sse(chunk({"content": "Hel"}), done=False) + f"data: {cut}data: {json.dumps(chunk({'content': 'lo'}))}\n\n" \
        + sse(chunk({}, "stop"))
    ran = await run_here([{"sse": body}], json=True, cwd=tmp_path, config=config)
    events = completes(ran, "Hello")
    warnings = [e for e in events if e["type"] == "warning"]
    assert len(warnings) == 1 and "damaged event" in warnings[0]["message"]
    assert len(ran.requests) == 1
    plain = await run_here([{"sse": body}], cwd=tmp_path, config=config)
    assert plain.code == 0 and plain.stdout == "Hello\n"
    assert plain.stderr.startswith("crow: warning: the server sent a damaged event")


# found trying it as a new user (fourth round): `crow run … > /dev/full` exited 141 silently (plain) or with
# "internal error: OSError" (--json)
def test_an_output_that_cannot_be_written_is_said_on_stderr_and_exits_1(tmp_path: Path) -> None:
    import subprocess

    from tests.replay_server import ReplayServer
    from tests.support import argv

    for mode in ([], ["--json"]):
        with ReplayServer([{"sse": text_sse("hello world")}]) as server, open("/dev/full", "w") as full:
            proc = subprocess.run(argv(server.base_url, *mode, "--no-session", "hi"), stdout=full,
                                  stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, cwd=tmp_path)
        assert proc.returncode == 1, (mode, proc.stderr)
        assert proc.stderr.strip().splitlines()[-1] == "crow: error: cannot write the output: No space left on device"
        assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr


# found running it in process: the "cannot write the output" line went to sys.stderr, not to run_prompt's
# err (its docstring: everything but the answer goes to `err`); a process has them the same
async def test_an_output_that_cannot_be_written_is_said_on_runs_err(tmp_path: Path) -> None:
    from crow_cli.config import load_settings
    from crow_cli.surfaces.run import RunOptions, run_prompt
    from tests.replay_server import ReplayServer

    for json_mode in (False, True):
        err, full = io.StringIO(), open("/dev/full", "w")  # noqa: SIM115 - closed below, its failed flush ignored
        with ReplayServer([{"sse": text_sse("hello world")}]) as server, \
                contextlib.redirect_stderr(io.StringIO()) as elsewhere:
            settings = load_settings({"base_url": server.base_url, "api_key": "sk-test", "model": "test-model"})
            code = await run_prompt(settings, RunOptions(prompt="hi", json=json_mode, session=False), full, err)
        with contextlib.suppress(OSError):
            full.close()
        assert code == 1, err.getvalue()
        assert err.getvalue().splitlines()[-1:] == ["crow: error: cannot write the output: No space left on device"]
        assert elsewhere.getvalue() == "", elsewhere.getvalue()


# issue: while MCP servers started (up to their startup_timeout), crow run was silent: say what is awaited
async def test_run_says_it_is_starting_mcp_servers_before_it_waits_for_them(tmp_path: Path) -> None:
    import sys

    server = Path(__file__).resolve().parents[1] / "tools" / "mcp_fault_server.py"
    config = tmp_path / "c.toml"
    config.write_text(f'[mcp_servers.slowpoke]\ncommand = {sys.executable!r}\nargs = [{str(server)!r}, ""]\n')
    plain = await run_here([{"sse": text_sse("Done.")}], cwd=tmp_path, config=config)
    assert plain.code == 0 and plain.stdout == "Done.\n", plain.stderr
    assert plain.stderr.splitlines()[0] == "crow: starting MCP servers: slowpoke"
    ran = await run_here([{"sse": text_sse("Done.")}], json=True, cwd=tmp_path, config=config)
    notices = [e for e in ran.events() if e["type"] == "notice"]
    assert notices[0]["code"] == "mcp_starting" and "slowpoke" in notices[0]["message"]
