"""Sessions left invalid by older versions or a killed crow load and send correctly (issue 13: "a turn
that failed leaves its user message behind, so the next request carries two user messages in a row").
`crow run` runs in this process (`run_here`)."""

from __future__ import annotations

import itertools
from pathlib import Path

from crow_cli.history import ToolCall, assistant_message, tool_message, user_message
from crow_cli.sessions import SessionStore
from tests.replay_server import text_stream
from tests.support import assert_contract, run_here, write_config


def _no_two_users_in_a_row(messages: list[dict]) -> None:
    roles = [m["role"] for m in messages]
    assert all(not (a == b == "user") for a, b in itertools.pairwise(roles)), roles


async def test_a_session_left_by_a_killed_process_and_failed_turns_sends_a_valid_history(tmp_path: Path) -> None:
    with SessionStore() as store:
        info = store.create(model="test-model", cwd=str(tmp_path))
        for message in (user_message("failed turn"), user_message("asked again"),
                        assistant_message(None, [ToolCall("c1", "read_file", "{}", 0), ToolCall("c2", "x", "{}", 1)]),
                        tool_message("c1", "first result"),  # killed before c2's result was stored
                        {"role": "assistant", "content": None},  # an older crow stored an empty answer so
                        tool_message("stray", "a result without its call"),
                        user_message("and once more"),
                        assistant_message(None, [ToolCall("c3", "read_file", "{}")])):  # killed mid-turn
            store.append(info.id, message)
    ran = await run_here([{"sse": text_stream("fine")}], "next", cwd=tmp_path,
                         config=write_config(tmp_path, max_retries=0), session_id=info.id)
    assert ran.code == 0, ran.stderr
    sent = ran.requests[0]["messages"]
    assert_contract(sent)
    _no_two_users_in_a_row(sent)
    assert sent[0] == {"role": "user", "content": "failed turn\n\nasked again"}
    assert all(m.get("content") or m.get("tool_calls") for m in sent if m["role"] == "assistant")
    with SessionStore() as store:  # the stored session keeps what happened (plus the repair of the last turn)
        assert [m["content"] for m in store.messages(info.id)[:2]] == ["failed turn", "asked again"]


async def test_after_a_failed_run_continuing_sends_one_user_message(tmp_path: Path) -> None:
    config = write_config(tmp_path, max_retries=0)
    assert (await run_here([{"sse": text_stream("hello")}], "hi", cwd=tmp_path, config=config)).code == 0
    failed = await run_here([{"status": 500, "body": '{"error": {"message": "boom"}}'}], "first", cwd=tmp_path,
                            config=config, continue_last=True)
    assert (failed.code, len(failed.requests)) == (1, 1), failed.stderr
    ran = await run_here([{"sse": text_stream("ok")}], "second", cwd=tmp_path, config=config, continue_last=True)
    assert ran.code == 0, ran.stderr
    assert ran.requests[0]["messages"] == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                                           {"role": "user", "content": "first\n\nsecond"}]
