"""Recording a history in the session store as it grows (closing a cancelled one: tests/test_loop.py)."""

from __future__ import annotations

from pathlib import Path

from crow_cli.config import Settings
from crow_cli.history import assistant_message, user_message
from crow_cli.sessions import SessionStore
from crow_cli.surfaces.persist import SessionRecorder


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
