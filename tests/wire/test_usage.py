"""Token counts out of each server's usage shape (llama.cpp's cached prompt tokens included)."""

from __future__ import annotations

from crow_cli.wire.usage import token_counts


def test_cached_prompt_tokens_are_counted_in_each_servers_shape() -> None:
    openai = {"prompt_tokens": 1200, "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 1024}}
    assert token_counts(openai) == (1200, 1024, 30)
    assert token_counts({"prompt_tokens": 900, "completion_tokens": 5, "prompt_cache_hit_tokens": 800}) == (900, 800, 5)
    # llama.cpp: prompt_tokens is what it processed (prompt_n); the reused ones are timings.cache_n
    timings = {"prompt_n": 12, "cache_n": 980}
    assert token_counts({"prompt_tokens": 12, "completion_tokens": 7}, timings) == (992, 980, 7)
    # a llama.cpp that counts them already in prompt_tokens is not counted twice
    assert token_counts({"prompt_tokens": 992, "completion_tokens": 7}, timings) == (992, 980, 7)
    assert token_counts(None) == (0, 0, 0)
    assert token_counts({"prompt_tokens": "x", "completion_tokens": True}) == (0, 0, 0)
