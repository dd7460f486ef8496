"""`crow run` shows its retries: one dim stderr line in plain mode, a `notice` event with
`--json`, nothing with `--quiet`. Real sockets: the replay server answers 429 with Retry-After first; in process
(`run_here`: what `crow run` runs), but for a signal."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support import run_here, text_sse, write_config

LIMITED = {"status": 429, "body": json.dumps({"error": {"message": "slow down", "type": "rate_limit"}})}


def script(**headers: str) -> list[dict]:
    return [{**LIMITED, "headers": headers}, {"sse": text_sse("after the wait")}]


async def test_json_has_a_schema_valid_retrying_notice(tmp_path: Path) -> None:
    config = write_config(tmp_path, max_retries=2)
    ran = await run_here(script(**{"retry-after": "0.05"}), json=True, cwd=tmp_path, config=config)
    assert ran.code == 0, ran.stderr
    events = ran.events()  # each validated against the shipped schema
    notices = [e for e in events if e["type"] == "notice"]
    assert notices == [{"type": "notice", "message": "crow: rate limited (429); retrying in 0.05 s (attempt 2 of 3)",
                        "code": "retrying", "attempt": 2, "wait_s": 0.05, "status": 429,
                        "tokens_before": None, "tokens_after": None}]
    assert [e["type"] for e in events].index("notice") < [e["type"] for e in events].index("text")
    assert ran.stderr == "" and len(ran.requests) == 2


async def test_plain_mode_prints_one_line_on_stderr_and_quiet_hides_it(tmp_path: Path) -> None:
    config = write_config(tmp_path, max_retries=2)
    loud = await run_here(script(**{"retry-after-ms": "50"}), cwd=tmp_path, config=config)
    quiet = await run_here(script(**{"retry-after-ms": "50"}), quiet=True, cwd=tmp_path, config=config)
    for ran in (loud, quiet):
        assert ran.code == 0, ran.stderr
        assert ran.stdout == "after the wait\n"
    assert loud.stderr == "crow: rate limited (429); retrying in 0.05 s (attempt 2 of 3)\n"
    assert quiet.stderr == ""


def test_sigint_during_a_retry_wait_ends_the_run_cancelled(tmp_path: Path) -> None:
    import signal
    import subprocess

    from tests.replay_server import ReplayServer
    from tests.support import argv, schema_validator

    config = write_config(tmp_path, max_retries=2)
    with ReplayServer(script(**{"retry-after": "50"})) as server:
        proc = subprocess.Popen(argv(server.base_url, "--json", "hi", config=config), cwd=tmp_path, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None
        events = []
        for line in proc.stdout:
            events.append(json.loads(line))
            if events[-1]["type"] == "notice":
                proc.send_signal(signal.SIGINT)
                break
        try:
            rest, err = proc.communicate(timeout=120)  # bounds a hang; a run that waited 50 s would exit 0, not 130
        finally:
            proc.kill()
    events += [json.loads(line) for line in rest.splitlines()]
    for event in events:
        schema_validator().validate(event)
    assert events[1]["code"] == "retrying" and events[1]["wait_s"] == 50
    assert proc.returncode == 130, err
    assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "cancelled"
    assert err == "crow: interrupted (SIGINT)\n" and len(server.requests) == 1
