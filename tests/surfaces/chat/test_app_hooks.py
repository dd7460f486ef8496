"""`crow chat` fires the prompt hooks (`surfaces/chat/app`): SessionStart's and UserPromptSubmit's context reach
the request with the message; a blocked message is not sent, and the chat goes on to the next one."""

from __future__ import annotations

import os
from pathlib import Path

from crow_cli.config import Settings
from crow_cli.sessions import SessionStore
from tests.replay_server import text_stream
from tests.support import chat


async def test_a_chats_prompt_hooks_add_context_or_keep_a_message_back(store: SessionStore, tmp_path: Path) -> None:
    gate = tmp_path / "gate.sh"
    gate.write_text("#!/bin/sh\nif grep -q secret; then echo 'that message names a secret' >&2; exit 2; fi\n"
                    "echo 'branch: main'\n")
    gate.chmod(0o755)
    hooks = {"SessionStart": [{"command": "echo 'started here'"}], "UserPromptSubmit": [{"command": str(gate)}]}
    settings = Settings(model="test-model", api_key="sk-test", hooks=hooks,
                        sandbox=os.environ.get("CROW_SANDBOX", "workspace-write"))  # type: ignore[arg-type]
    output, server, _ = await chat([{"sse": text_stream("Noted.")}], "my secret is x\rhello\r/exit\r", store,
                                   settings=settings)
    assert "that message names a secret" in output and len(server.requests) == 1
    [sent] = [m for m in server.requests[0]["messages"] if m["role"] == "user"]
    assert sent["content"] == ("hello\n\n[SessionStart hook context]\nstarted here\n\n[UserPromptSubmit hook context]\n"
                               "branch: main")
