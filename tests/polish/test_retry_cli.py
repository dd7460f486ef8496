"""`crow run` shows the SDK's retries: one dim stderr line in plain mode, a `notice` event with
`--json`, nothing with `--quiet`. Real sockets: the replay server answers 429 with Retry-After first."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import text_sse
from tests.scripting.scripting_support import run_crow, write_config

LIMITED = {"status": 429, "body": json.dumps({"error": {"message": "slow down", "type": "rate_limit"}})}


def script(**headers: str) -> list[dict]:
    return [{**LIMITED, "headers": headers}, {"sse": text_sse("after the wait")}]


def test_json_has_a_schema_valid_retrying_notice(tmp_path: Path) -> None:
    config = write_config(tmp_path, max_retries=2)
    ran = run_crow(script(**{"retry-after": "1"}), "--json", "hi", cwd=tmp_path, config=config)
    assert ran.code == 0, ran.stderr
    events = ran.events()  # each validated against the shipped schema
    notices = [e for e in events if e["type"] == "notice"]
    assert notices == [{"type": "notice", "message": "crow: rate limited (429); retrying in 1 s (attempt 2 of 3)",
                        "code": "retrying", "attempt": 2, "wait_s": 1.0, "status": 429}]
    assert [e["type"] for e in events].index("notice") < [e["type"] for e in events].index("text")
    assert ran.stderr == "" and len(ran.requests) == 2


def test_plain_mode_prints_one_line_on_stderr_and_quiet_hides_it(tmp_path: Path) -> None:
    config = write_config(tmp_path, max_retries=2)
    loud = run_crow(script(**{"retry-after-ms": "50"}), "hi", cwd=tmp_path, config=config)
    quiet = run_crow(script(**{"retry-after-ms": "50"}), "--quiet", "hi", cwd=tmp_path, config=config)
    for ran in (loud, quiet):
        assert ran.code == 0, ran.stderr
        assert ran.stdout == "after the wait\n"
    assert loud.stderr == "crow: rate limited (429); retrying in 0.05 s (attempt 2 of 3)\n"
    assert quiet.stderr == ""
