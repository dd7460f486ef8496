"""`normalise`: the history that is sent is valid whatever the stored one holds (issue 13, "a valid
history is always sent": found trying long conversations on Mistral/Gemma chat templates)."""

from __future__ import annotations

import copy

from hypothesis import given
from hypothesis import strategies as st

from crow_cli.context.normalise import INTERRUPTED_OUTPUT, Normaliser, normalise
from crow_cli.history import ToolCall, assistant_message, tool_message, user_message
from tests.support import assert_contract


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


# issue: start-up and per-turn cost: every turn normalised the whole history again; a conversation
# sends its history once per turn, so that work grew with the square of its length.
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
