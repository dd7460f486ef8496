"""Closing a history cut by Ctrl-C, and recording it."""

from __future__ import annotations

from pathlib import Path

from crow_cli.config import Settings
from crow_cli.history import ToolCall, ToolResult, assistant_message, user_message
from crow_cli.sessions import SessionStore
from crow_cli.surfaces.persist import SessionRecorder, close_interrupted

CALLS = [ToolCall("a", "f", "{}", 0), ToolCall("", "g", "{}", 1), ToolCall("c", "h", "{}", 2)]
CANCELLED = "Error: the tool call was cancelled by the user; no result."


def test_finished_results_are_kept_and_the_rest_cancelled_in_call_order() -> None:
    history = [user_message("go"), assistant_message(None, CALLS)]
    done = {0: ToolResult("a", "f", "A", index=0), 2: ToolResult("c", "h", "C", index=2)}
    added = close_interrupted(history, "ignored", done)
    assert added == history[2:]
    # every finished call keeps its real result, wherever it stands; only the unfinished one is cancelled
    assert [(m["tool_call_id"], m["content"]) for m in added] == [("a", "A"), ("", CANCELLED), ("c", "C")]


def test_partial_text_is_kept_when_no_call_is_pending() -> None:
    history = [user_message("go")]
    assert close_interrupted(history, "Half an ans") == [
        {"role": "assistant", "content": "Half an ans\n\n[interrupted by the user]"}]
    assert close_interrupted(history, "more") == []  # already closed: nothing added
    assert close_interrupted([user_message("go")], "  ") == []


def test_recorder_creates_the_session_lazily_and_stores_only_new_messages(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "s.db") as store:
        recorder = SessionRecorder(store, Settings(model="m", base_url="http://h/v1", api_key="sk-secret"))
        history: list = []
        recorder.sync(history)
        assert recorder.session_id is None and store.recent() == []
        history += [user_message("one"), assistant_message("two")]
        recorder.sync(history)
        recorder.sync(history)
        assert store.messages(recorder.session_id) == history
        recorder.truncate(history, 1)
        history.append(assistant_message("again"))
        recorder.sync(history)
        assert store.messages(recorder.session_id) == [user_message("one"), assistant_message("again")]
        info = store.get(recorder.session_id)
        assert (info.model, info.base_url) == ("m", "http://h/v1")
    assert b"sk-secret" not in (tmp_path / "s.db").read_bytes()
