"""`crow run` compacts a session near its context window, against a scripted server, so a conversation
that outgrows the model's context is never stuck on a 400. `crow run` runs in this process (`run_here`),
`crow sessions show / export` as their command functions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crow_cli.commands.sessions import export, show
from crow_cli.context.compact import SUMMARY_PREFIX
from crow_cli.history import ToolCall, assistant_message, tool_message, user_message
from crow_cli.sessions import SessionStore
from tests.replay_server import text_stream
from tests.support import assert_contract, run_here, write_config


def _stored_session(exchanges: int = 12) -> str:
    with SessionStore() as store:
        info = store.create(model="test-model", cwd=str(Path.cwd()))
        store.append(info.id, {"role": "system", "content": "be brief"})
        for n in range(exchanges):
            for message in (user_message(f"request {n}"),
                            assistant_message(None, [ToolCall(f"call_{n}", "read_file", '{"path": "a.txt"}')]),
                            tool_message(f"call_{n}", f"contents {n} " + "y" * 1200),
                            assistant_message(f"answer {n}")):
                store.append(info.id, message)
        return info.id


async def test_run_compacts_near_the_window_stores_a_checkpoint_and_keeps_every_message(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sid = _stored_session()
    config = write_config(tmp_path, context_window=4096, max_retries=0)
    ran = await run_here([{"sse": text_stream("SUMMARY: twelve reads of a.txt")}, {"sse": text_stream("Done.")}],
                         "go on", cwd=tmp_path, config=config, session_id=sid, json=True)
    assert ran.code == 0, ran.stderr
    events = ran.events()
    notices = [e for e in events if e["type"] == "notice"]
    assert [n["code"] for n in notices] == ["compacting", "compacted"]
    assert notices[1]["tokens_before"] > notices[1]["tokens_after"] > 0
    summary_request, turn_request = ran.requests
    assert "tools" not in summary_request and "request 0" in summary_request["messages"][-1]["content"]
    sent = turn_request["messages"]
    assert sent[0]["content"] == "be brief" and sent[1]["content"].startswith(SUMMARY_PREFIX)
    assert sent[-1] == {"role": "user", "content": "go on"}
    assert_contract(sent)
    assert events[-1]["type"] == "run_finished" and events[-1]["final_text"] == "Done."
    with SessionStore() as store:
        assert len(store.messages(sid)) == 1 + 12 * 4 + 2  # nothing dropped from the stored session
        (checkpoint,) = store.checkpoints(sid)
        assert checkpoint.summary == "SUMMARY: twelve reads of a.txt"
    capsys.readouterr()
    show(sid)
    shown = capsys.readouterr().out
    assert "request 0" in shown and "## Compacted here" in shown and "> SUMMARY: twelve reads" in shown
    export(sid, "json", None)
    exported = json.loads(capsys.readouterr().out)
    assert exported["checkpoints"][0]["summary"].startswith("SUMMARY") and len(exported["messages"]) == 51

    # the next run starts from the checkpoint: no new summary, the summary is sent again
    again = await run_here([{"sse": text_stream("Fine.")}], "and then?", cwd=tmp_path, config=config,
                           session_id=sid, json=True)
    assert again.code == 0, again.stderr
    assert again.requests[0]["messages"][1]["content"].startswith(SUMMARY_PREFIX)


OVERFLOW_400 = json.dumps({"error": {"code": "context_length_exceeded", "type": "invalid_request_error",
                                     "message": "This model's maximum context length is 8192 tokens. However, "
                                                "your messages resulted in 9000 tokens."}})


async def test_an_overflow_refusal_compacts_and_the_retried_turn_succeeds(tmp_path: Path) -> None:
    sid = _stored_session()
    config = write_config(tmp_path, max_retries=0)
    ran = await run_here([{"status": 400, "body": OVERFLOW_400}, {"sse": text_stream("SUMMARY: reads")},
                          {"sse": text_stream("Done.")}], "go on", cwd=tmp_path, config=config, session_id=sid,
                         json=True)
    assert ran.code == 0, ran.stderr
    assert [e["code"] for e in ran.events() if e["type"] == "notice"] == ["compacting", "compacted"]
    assert len(ran.requests) == 3 and ran.requests[2]["messages"][1]["content"].startswith(SUMMARY_PREFIX)
    assert_contract(ran.requests[2]["messages"])


# When the newest exchange alone is past the target (a long signed thinking block), summarising the small
# older part cannot make the prompt fit: no summary request is spent, and one line says why
async def test_no_summary_is_asked_for_when_the_newest_exchanges_alone_are_too_long(tmp_path: Path) -> None:
    with SessionStore() as store:
        info = store.create(model="test-model", cwd=str(Path.cwd()))
        for n in range(6):
            store.append(info.id, user_message(f"request {n}"))
            store.append(info.id, assistant_message(f"answer {n}"))
        store.append(info.id, user_message("think hard"))
        store.append(info.id, {**assistant_message("Thought it through."), "reasoning_content": "z" * 40_000})
    config = write_config(tmp_path, context_window=8192, max_retries=0)
    ran = await run_here([{"sse": text_stream("Done.")}], "go on", cwd=tmp_path, config=config, session_id=info.id,
                         json=True)
    assert ran.code == 0, ran.stderr
    assert len(ran.requests) == 1 and "tools" in ran.requests[0]  # the turn itself, no summary request
    warnings = [e["message"] for e in ran.events() if e["type"] == "warning"]
    assert any("summarising the 12 earlier messages cannot make the prompt fit" in w for w in warnings), warnings


async def test_a_summary_keeps_the_todo_list_and_the_mode_the_model_was_told(tmp_path: Path) -> None:
    # compaction keeps the todo list in what the model gets (and the mode note it was last given)
    from crow_cli.modes import mode_note

    sid = _stored_session()
    todos = [{"content": "read a.txt", "status": "completed"}, {"content": "sum it up", "status": "in_progress"}]
    with SessionStore() as store:
        store.append(sid, user_message("keep a list"))
        store.append(sid, mode_note("auto-edit"))
        store.append(sid, assistant_message(None, [ToolCall("call_t", "todo_write", json.dumps({"todos": todos}))]))
        store.append(sid, tool_message("call_t", "Todo list saved", "ok"))
        for n in range(3):  # the list's exchange is summarised: later ones are kept verbatim
            store.append(sid, user_message(f"more {n} " + "z" * 1500))
            store.append(sid, assistant_message(f"fine {n}"))
    config = write_config(tmp_path, context_window=4096, max_retries=0)
    ran = await run_here([{"sse": text_stream("SUMMARY: reads")}, {"sse": text_stream("Done.")}], "go on",
                         cwd=tmp_path, config=config, session_id=sid, json=True, flags={"approval": "auto-edit"})
    assert ran.code == 0, ran.stderr
    sent = ran.requests[1]["messages"]
    assert "todo_write" not in json.dumps(sent[2:])  # the call itself was summarised away
    assert ("SUMMARY: reads\n\n[crow: your todo list (todo_write) so far:\n[x] read a.txt\n[~] sum it up]\n\n"
            "[crow: the approval mode is now auto-edit: file changes in the workspace apply without asking; commands "
            "are approved by the user]") in sent[1]["content"]
