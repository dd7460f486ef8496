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


# issue: start-up and per-turn cost: without a usage count from the server, every turn estimated the
# whole history again.
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


# issue: start-up and per-turn cost: asking a server for its window cost two requests and a second
# connection before a one-line prompt, which fits any window.
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
