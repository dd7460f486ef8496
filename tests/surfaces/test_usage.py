"""Token use as the person reads it: cached prompt tokens counted in every server's shape, the cost from
`[prices]`, chat's footer and `crow run`'s last line on a terminal."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from crow_cli.config import Settings
from crow_cli.events import SubagentEvent, SubagentStarted, TurnFinished
from crow_cli.sessions import SessionStore
from crow_cli.surfaces.run import PlainPrinter
from crow_cli.surfaces.usage import TokenUse, footer
from tests.replay_server import ReplayServer
from tests.support import ChatTerminal, chat, chunk, run_here, sse, write_config


def test_the_cost_comes_from_the_models_prices() -> None:
    use = TokenUse({"input": 2.5, "output": 10.0, "cached_input": 1.25})
    use.add({"prompt_tokens": 2000, "completion_tokens": 100, "prompt_tokens_details": {"cached_tokens": 1000}})
    assert use.cost == pytest.approx((1000 * 2.5 + 1000 * 1.25 + 100 * 10.0) / 1e6)
    assert use.text() == "2,000 in (1,000 cached) · 100 out · $0.0047"
    unpriced = TokenUse()
    unpriced.add({"prompt_tokens": 5, "completion_tokens": 1})
    assert unpriced.text() == "5 in · 1 out" and unpriced.cost is None
    no_cached_price = TokenUse({"input": 1.0})
    no_cached_price.add({"prompt_tokens": 10, "completion_tokens": 0, "prompt_tokens_details": {"cached_tokens": 4}})
    assert no_cached_price.cost == pytest.approx(10 / 1e6)  # a cached token costs the input price then
    assert footer(TokenUse(), TokenUse(), "m", None) == "── no token usage reported · m"


def test_a_subagents_tokens_count_in_the_total_at_its_own_models_prices() -> None:
    use = TokenUse({"input": 10.0, "output": 10.0})
    use.add({"prompt_tokens": 1000, "completion_tokens": 100})
    use.add_other({"prompt_tokens": 2000, "completion_tokens": 200}, None, {"input": 1.0, "output": 1.0})
    use.add_other({"prompt_tokens": 50, "completion_tokens": 5}, None, None)  # a model without prices
    assert (use.prompt, use.completion) == (3050, 305)
    assert use.cost == pytest.approx((1100 * 10.0 + 2200 * 1.0) / 1e6)
    only_child = TokenUse()
    only_child.add_other({"prompt_tokens": 1000, "completion_tokens": 0}, None, {"input": 2.0})
    assert only_child.cost == pytest.approx(2000 / 1e6)


def test_crow_runs_count_includes_the_childs_requests() -> None:
    printer = PlainPrinter(io.StringIO(), io.StringIO(), debug=False, prices={"input": 10.0},
                           all_prices={"parent": {"input": 10.0}, "small": {"input": 1.0}})
    printer.handle(TurnFinished(1, "tool_calls", {"prompt_tokens": 100, "completion_tokens": 1}, None))
    printer.handle(SubagentStarted("call_1", 0, "explorer", "find", "small"))
    printer.handle(SubagentEvent("call_1", 0, "explorer", TurnFinished(1, "stop", {"prompt_tokens": 1000,
                                                                                    "completion_tokens": 0}, "x")))
    assert printer.usage.prompt == 1100 and printer.usage.cost == pytest.approx((100 * 10.0 + 1000 * 1.0) / 1e6)


def llama_turn(text: str, prompt_n: int, cache_n: int) -> str:
    """A llama.cpp answer: usage counts the processed prompt tokens only, timings the cached ones."""
    usage = {"prompt_tokens": prompt_n, "completion_tokens": 3, "total_tokens": prompt_n + 3}
    timings = {"prompt_n": prompt_n, "cache_n": cache_n, "predicted_n": 3}
    return sse(chunk({"role": "assistant", "content": text}), chunk({}, "stop", usage=usage, timings=timings))


# Behind llama.cpp the footer counts the tokens it reused from its cache (cache_n), so it grows with the history
async def test_chat_footer_counts_llama_cpps_cached_tokens_and_the_cost(tmp_path: Path) -> None:
    settings = Settings(model="test-model", api_key="sk-test", prices={"test-model": {"input": 1.0, "output": 2.0}})
    turns = [{"sse": llama_turn("One.", 1000, 0)}, {"sse": llama_turn("Two.", 12, 1000)}]
    with SessionStore(tmp_path / "s.db") as store:
        out, _server, _app = await chat(turns, "hi\ragain\r/exit\r", store, settings=settings)
    footers = [line for line in out.splitlines() if line.startswith("── ")]
    assert footers[0].startswith("── 1,000 in · 3 out · $0.0010 this turn, 1,000 in · 3 out · $0.0010 this session")
    assert footers[1].startswith("── 1,012 in (1,000 cached) · 3 out · $0.0010 this turn, "
                                 "2,012 in (1,000 cached) · 6 out · $0.0020 this session · test-model")


def test_crow_run_on_a_terminal_ends_with_the_token_use_line(tmp_path: Path) -> None:
    with ReplayServer([{"sse": llama_turn("Hello.", 12, 980)}]) as server, ChatTerminal(
            ["--base-url", server.base_url, "--api-key", "sk-test", "--model", "test-model", "--no-session", "hi"],
            cwd=tmp_path, command="run", stderr_on_terminal=True) as term:
        term.expect("Hello.")
        assert term.wait() == 0
        term.expect("── 992 in (980 cached) · 3 out this run · test-model")


async def test_crow_run_on_a_pipe_or_with_json_has_no_token_use_line(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    config.write_text('[prices."test-model"]\ninput = 1\noutput = 1\n')
    for options in ({}, {"json": True}):
        ran = await run_here([{"sse": llama_turn("Hello.", 12, 980)}], cwd=tmp_path, config=config, **options)
        assert ran.code == 0, ran.stderr
        assert "──" not in ran.stderr and "──" not in ran.stdout
    finished = [json.loads(line) for line in ran.stdout.splitlines() if '"turn_finished"' in line]
    assert finished[0]["timings"] == {"prompt_n": 12, "cache_n": 980, "predicted_n": 3}  # the JSONL carries them
    assert ran.stderr == ""
