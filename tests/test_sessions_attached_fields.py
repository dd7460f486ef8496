"""A stored and resumed session (`crow run -c`, chat /resume, ACP session/load all `load` it) keeps what the
server attached to each assistant message, so the resumed requests send it back byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

from crow_cli.history import AssistantTurn, ToolCall, tool_message, user_message
from crow_cli.sessions import SessionStore
from crow_cli.wire.outgoing import Outgoing

BLOCKS = [{"type": "reasoning.text", "text": "Need the weather. ✓", "index": 0, "format": "anthropic-claude-v1",
           "signature": "EqQBCkYIBxgCKkB+/sig=="},
          {"type": "reasoning.encrypted", "data": "gAAAAB-opaque", "index": 0}]
SIG = {"google": {"thought_signature": "CiQB0e2K+/=="}}


def test_reasoning_blocks_signatures_and_extensions_survive_the_store_exactly(tmp_path: Path) -> None:
    turn = AssistantTurn(content="<think>hm</think>", tool_calls=[ToolCall("c1", "f", "{}", extra=SIG)],
                         fields={"reasoning": "Need the weather.", "reasoning_details": BLOCKS,
                                 "x_vendor": {"n": 1}})
    final = AssistantTurn(content="Sunny.", fields={"reasoning_content": "done", "extra_content": SIG})
    history = [user_message("weather?"), turn.to_message(), tool_message("c1", "sunny"), final.to_message()]
    with SessionStore(tmp_path / "s.db") as store:
        info = store.create(model="m", base_url="http://h/v1", cwd="/w")
        for message in history:
            store.append(info.id, message)
    with SessionStore(tmp_path / "s.db") as store:
        loaded = store.load(info.id)
    assert json.dumps(loaded, ensure_ascii=False) == json.dumps(history, ensure_ascii=False)
    resumed = [*loaded, user_message("tomorrow?")]
    assert json.dumps(Outgoing("auto").messages(resumed)) == json.dumps([*history, user_message("tomorrow?")])
