"""`Budget`: the prompt size from the server's last count or an estimate."""

from __future__ import annotations

from crow_cli.context.budget import DISCOVER_FROM_TOKENS, Budget, estimate_tokens
from crow_cli.history import ToolCall, assistant_message, tool_message, user_message


class _Counted(dict):
    """A message that counts how often it is read."""

    reads = 0

    def get(self, key, default=None):
        type(self).reads += 1
        return super().get(key, default)


def _history(rounds: int) -> list[dict]:
    history = [user_message("list the folder " * 3)]
    for n in range(rounds):
        history += [assistant_message(None, [ToolCall(f"c{n}", "list_directory", '{"path": "."}')]),
                    tool_message(f"c{n}", "a.txt\nb.txt\n" * (n + 1))]
    return history


# without a usage count from the server, a turn estimates only the messages appended since the last
# estimate, not the whole history again.
def test_the_estimate_reads_only_the_messages_appended_since_the_last_one() -> None:
    history = [_Counted(m) for m in _history(20)]
    budget = Budget(window=100_000)
    for size in range(1, len(history) + 1):
        _Counted.reads = 0
        tokens = budget.prompt_tokens(history[:size])
        assert _Counted.reads <= 2 * 3  # the new message only, a few fields
        assert tokens == estimate_tokens(history[:size])


def test_the_estimate_starts_over_for_a_changed_history_and_adds_to_a_server_count() -> None:
    history = _history(6)
    budget = Budget(window=100_000)
    assert budget.prompt_tokens(history) == estimate_tokens(history)
    compacted = [user_message("summary"), *history[-4:]]
    assert budget.prompt_tokens(compacted) == estimate_tokens(compacted)
    assert budget.prompt_tokens(history[:3]) == estimate_tokens(history[:3])
    budget.record_usage({"prompt_tokens": 500}, 3)
    assert budget.prompt_tokens(history) == 500 + estimate_tokens(history[3:])
    # Llama.cpp's prompt_tokens leaves out the tokens it reused from its cache (timings.cache_n)
    budget.record_usage({"prompt_tokens": 12}, 3, {"prompt_n": 12, "cache_n": 980})
    assert budget.prompt_tokens(history) == 992 + estimate_tokens(history[3:])


# asking a server for its window costs requests and a connection: it is asked for only once the prompt is
# big enough to need it.
async def test_the_window_is_asked_for_only_once_the_prompt_is_big_enough() -> None:
    asked = []

    async def discover() -> int:
        asked.append(True)
        return 8192

    budget = Budget(discover=discover)
    small = [user_message("hi")]
    assert await budget.window_for(small) is None and asked == []
    big = [*small, tool_message("c", "x" * 4 * DISCOVER_FROM_TOKENS)]
    assert await budget.window_for(big) == 8192 and await budget.window_for(big) == 8192
    assert asked == [True]


# the reasoning that goes back with each assistant message (a thinking model's reasoning_content,
# LiteLLM's thinking_blocks, Mistral's thinking parts) counts toward the window, so compaction comes before
# a refusal
def test_reasoning_that_goes_back_with_a_message_counts_toward_its_size() -> None:
    thought = "x" * 4000
    plain = estimate_tokens([assistant_message("ok")])
    for extra in ({"reasoning_content": thought}, {"reasoning": thought},
                  {"thinking_blocks": [{"type": "thinking", "thinking": thought, "signature": "S"}]},
                  {"reasoning_details": [{"type": "reasoning.summary", "summary": thought, "index": 0}]},
                  {"content": [{"type": "thinking", "thinking": [{"type": "text", "text": thought}]},
                               {"type": "text", "text": "ok"}]}):
        message = {**assistant_message("ok"), **extra}
        assert 1000 <= estimate_tokens([message]) - plain <= 1010, extra  # type: ignore[list-item]
