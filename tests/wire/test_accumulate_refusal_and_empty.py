"""`delta.refusal` is shown and kept; an answer with nothing in it says so."""

from __future__ import annotations

from crow_cli.events import TextDelta, WarningEvent
from crow_cli.wire.accumulate import StreamAccumulator
from tests.support import chunk, run_here, sse

REFUSAL = "I can't help with that."


def _assemble(*chunks):
    acc = StreamAccumulator()
    events = []
    for c in chunks:
        events += acc.feed(c)
    turn, tail = acc.finish()
    return turn, events + tail


def test_streamed_refusal_is_assembled_warned_and_sent_back_in_an_accepted_shape():
    turn, events = _assemble(chunk({"role": "assistant", "content": None, "refusal": "I can't "}),
                             chunk({"refusal": "help with that."}), chunk({}, "stop"))
    assert turn.refusal == REFUSAL and turn.content is None
    assert not [e for e in events if isinstance(e, TextDelta)]
    warnings = [e.message for e in events if isinstance(e, WarningEvent)]
    assert warnings == [f"the model refused: {REFUSAL}"]
    # OpenAI: assistant `content` is required without tool_calls; `refusal` is a field it accepts.
    assert turn.to_message() == {"role": "assistant", "content": REFUSAL, "refusal": REFUSAL}


def test_no_text_no_calls_no_refusal_is_an_empty_answer_warning():
    _, events = _assemble(chunk({"role": "assistant", "content": ""}), chunk({}, "stop"))
    assert [e.message for e in events if isinstance(e, WarningEvent)] == ["the model returned an empty answer"]
    _, events = _assemble(chunk({"content": "hi"}, "stop"))
    assert not [e for e in events if isinstance(e, WarningEvent)]


async def test_cli_shows_a_refusal_and_stores_it(tmp_path):
    body = sse(chunk({"role": "assistant", "content": None, "refusal": REFUSAL}), chunk({}, "stop"))
    ran = await run_here([{"sse": body}], json=True, cwd=tmp_path, model="m")
    assert ran.code == 0, ran.stderr
    assert {"type": "warning", "message": f"the model refused: {REFUSAL}", "call_id": None} in ran.events()
    ran = await run_here([{"sse": body}], cwd=tmp_path, model="m")
    assert ran.code == 0 and f"crow: warning: the model refused: {REFUSAL}" in ran.stderr
    # the stored session goes back
    ran = await run_here([{"sse": sse(chunk({"content": "ok"}, "stop"))}], "next", continue_last=True,
                         cwd=tmp_path, model="m")
    assert ran.code == 0, ran.stderr
    sent = [m for m in ran.requests[0]["messages"] if m["role"] == "assistant"]
    assert sent == [{"role": "assistant", "content": REFUSAL, "refusal": REFUSAL}]


async def test_cli_warns_about_an_empty_answer(tmp_path):
    body = sse(chunk({"role": "assistant", "content": ""}), chunk({}, "stop"))
    ran = await run_here([{"sse": body}], cwd=tmp_path, model="m")
    assert ran.code == 0 and ran.stdout == ""
    assert "crow: warning: the model returned an empty answer" in ran.stderr


def test_an_empty_text_turn_is_stored_with_empty_content_not_null() -> None:
    # Tester: an empty answer was stored and sent back as {"role": "assistant", "content": null}, which
    # servers reject (content is required without tool_calls) on every later turn of the session.
    from crow_cli.history import AssistantTurn, ToolCall, assistant_message

    assert AssistantTurn(content=None).to_message() == {"role": "assistant", "content": ""}
    assert assistant_message(None) == {"role": "assistant", "content": ""}
    with_calls = assistant_message(None, [ToolCall("c1", "f", "{}")])
    assert with_calls["content"] is None and with_calls["tool_calls"][0]["id"] == "c1"
