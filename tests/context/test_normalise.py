"""`normalise`: the history that is sent is valid whatever the stored one holds (Mistral/Gemma chat
templates refuse anything else).

Sessions left invalid by older versions or a killed crow load and send correctly (a turn that failed
leaves no user message behind that would put two user messages in a row).
`crow run` runs in this process (`run_here`).
"""

from __future__ import annotations

import copy
import itertools
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from crow_cli.context.normalise import INTERRUPTED_OUTPUT, Normaliser, normalise
from crow_cli.history import ToolCall, assistant_message, tool_message, user_message
from crow_cli.sessions import SessionStore
from tests.replay_server import text_stream
from tests.support import assert_contract, run_here, write_config


def _roles(messages: list[dict]) -> list[str]:
    return [m["role"] for m in messages]


def test_two_user_messages_in_a_row_are_merged_nothing_lost() -> None:
    # a failed turn leaves its user message behind; the next one follows it
    history = [{"role": "system", "content": "sys"}, user_message("first, failed"), user_message("second")]
    before = copy.deepcopy(history)
    sent = normalise(history)
    assert _roles(sent) == ["system", "user"]
    assert sent[1]["content"] == "first, failed\n\nsecond"
    assert history == before  # the stored history is never changed


def test_merging_content_parts_keeps_every_part() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    sent = normalise([user_message("look"), {"role": "user", "content": [image]}])
    assert sent == [{"role": "user", "content": [{"type": "text", "text": "look"}, image]}]


def test_assistant_without_content_or_calls_is_dropped() -> None:
    history = [user_message("a"), {"role": "assistant", "content": None}, user_message("b"),
               assistant_message(""), user_message("c")]
    assert normalise(history) == [{"role": "user", "content": "a\n\nb\n\nc"}]


def test_a_refusal_is_kept() -> None:
    history = [user_message("a"), assistant_message(None, refusal="no"), user_message("b")]
    assert _roles(normalise(history)) == ["user", "assistant", "user"]


def test_tool_result_without_its_call_is_dropped() -> None:
    history = [user_message("a"), tool_message("call_x", "orphan"), assistant_message("hi"),
               tool_message("call_y", "orphan too"), user_message("b")]
    assert _roles(normalise(history)) == ["user", "assistant", "user"]


def test_extra_results_beyond_the_calls_are_dropped() -> None:
    calls = [ToolCall("c1", "ok", "{}")]
    history = [user_message("a"), assistant_message(None, calls), tool_message("c1", "r1"), tool_message("c1", "dup")]
    sent = normalise(history)
    assert _roles(sent) == ["user", "assistant", "tool"] and sent[2]["content"] == "r1"


def test_unanswered_call_mid_history_gets_an_interrupted_result() -> None:
    calls = [ToolCall("c1", "ok", "{}", 0), ToolCall("", "ok", "{}", 1)]
    history = [user_message("a"), assistant_message(None, calls), tool_message("c1", "r1"), user_message("b")]
    sent = normalise(history)
    assert _roles(sent) == ["user", "assistant", "tool", "tool", "user"]
    assert sent[3] == tool_message("", INTERRUPTED_OUTPUT, "cancelled")
    assert_contract(sent)


def test_a_valid_history_is_sent_unchanged() -> None:
    calls = [ToolCall("c1", "ok", "{}")]
    history = [{"role": "system", "content": "s"}, user_message("a"), assistant_message(None, calls),
               tool_message("c1", "r"), assistant_message("done"), user_message("b")]
    assert normalise(history) == history


# a turn normalises only what changed, not the whole history again: a conversation sends its history once
# per turn, so that work would grow with the square of its length.
class _Counted(dict):
    """A message that counts how often it is read."""

    reads = 0

    def get(self, key, default=None):
        type(self).reads += 1
        return super().get(key, default)


def _messy_history() -> list[dict]:
    call = ToolCall("c1", "f", "{}")
    return [{"role": "system", "content": "sys"}, user_message("a"), user_message("b"),
            assistant_message(None, [call, ToolCall("c2", "g", "{}")]), tool_message("c1", "one"),
            user_message("c"), tool_message("zz", "orphan"), assistant_message(""), user_message("d"),
            assistant_message(None, [ToolCall("", "h", "{}")]), tool_message("", "r"), tool_message("", "extra"),
            assistant_message("answer"), user_message("e"), assistant_message(None, [call])]


@given(st.lists(st.integers(min_value=1, max_value=4), max_size=12))
def test_the_normaliser_gives_what_normalise_gives_for_every_grown_history(steps: list[int]) -> None:
    history = _messy_history()
    normaliser = Normaliser()
    size = 0
    for step in steps:
        size = min(size + step, len(history))
        assert normaliser(history[:size]) == normalise(history[:size])


def test_the_normaliser_reads_only_the_messages_appended_since_its_last_call() -> None:
    history = [_Counted(m) for m in _messy_history()]
    normaliser = Normaliser()
    normaliser(history[:-3])
    _Counted.reads = 0
    sent = normaliser(history)
    assert 0 < _Counted.reads <= 3 * 4  # three messages, a few fields each
    assert sent == normalise(history)


def test_the_normaliser_starts_over_for_a_history_that_changed() -> None:
    history = _messy_history()
    normaliser = Normaliser()
    normaliser(history)
    rewritten = [history[0], user_message("summary"), *history[8:]]  # a compaction's view: same length or not
    assert normaliser(rewritten) == normalise(rewritten)
    shortened = [{**history[0]}, *history[1:]]  # an equal but different first message
    assert normaliser(shortened) == normalise(shortened)
    assert normaliser(history[:4]) == normalise(history[:4])

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
