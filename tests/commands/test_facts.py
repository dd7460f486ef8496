"""`crow facts list | forget`: what crow learned about servers, shown and dropped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import typer

from crow_cli.wire import facts
from tests.support import crow_here


def test_list_shows_each_endpoint_what_when_and_why(capsys: pytest.CaptureFixture[str]) -> None:
    facts.learn("http://a.test/v1", "m", request_rules=[{"op": "drop_param", "target": "seed", "value": None}],
                why="Extra inputs are not permitted: seed\x1b]0;owned\x07")
    assert crow_here("facts", "list") == 0
    out = capsys.readouterr().out
    assert out.startswith("http://a.test/v1 m\n  adapted requests: dropped parameter seed\n    learned 20")
    assert "from the refusal: Extra inputs are not permitted: seed" in out and "\x1b" not in out
    assert crow_here("facts", "list", "--json") == 0
    assert json.loads(capsys.readouterr().out)["http://a.test/v1 m"]["request_rules"][0]["target"] == "seed"


def test_forget_by_model_then_everything(capsys: pytest.CaptureFixture[str]) -> None:
    facts.learn("http://a.test/v1", "m", tool_calling=True)
    facts.learn("http://a.test/v1", "n", tool_calling=True)
    assert crow_here("facts", "forget", "--model", "n") == 0
    assert capsys.readouterr().out == "forgot http://a.test/v1 n\n"
    assert list(facts.recall_all()) == ["http://a.test/v1 m"]
    assert crow_here("facts", "forget", "--base-url", "http://a.test/v1/") == 0
    assert facts.recall_all() == {}
    assert crow_here("facts", "forget", "--all") == 0
    assert capsys.readouterr().out.endswith("nothing to forget\n")


# a bare `crow facts forget` needs --all: it would wipe what was learned of every server
def test_forget_without_a_filter_needs_all(capsys: pytest.CaptureFixture[str]) -> None:
    facts.learn("http://a.test/v1", "m", tool_calling=True)
    with pytest.raises(typer.BadParameter, match="--all to forget everything"):
        crow_here("facts", "forget")
    assert list(facts.recall_all()) == ["http://a.test/v1 m"]
    with pytest.raises(typer.BadParameter, match="give it alone"):
        crow_here("facts", "forget", "--all", "--model", "m")
    assert crow_here("facts", "forget", "--all") == 0
    assert facts.recall_all() == {}


def test_a_damaged_file_is_one_warning_and_nothing_listed(capsys: pytest.CaptureFixture[str]) -> None:
    path = facts.facts_path()
    path.parent.mkdir(parents=True)
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert crow_here("facts", "list") == 0
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "damaged" in captured.err
    assert captured.out.startswith("nothing learned yet")


def test_facts_list_imports_neither_openai_nor_rich() -> None:
    code = ("import sys\nsys.argv = ['crow', 'facts', 'list']\nfrom crow_cli.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('openai', 'rich', 'prompt_toolkit', 'httpx') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            env={**os.environ})
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stderr


# `crow facts forget --model ""` (or a blank value) is a usage error and forgets nothing
@pytest.mark.parametrize("flag", ["--model", "--base-url"])
def test_forget_with_an_empty_value_is_a_usage_error_and_forgets_nothing(flag: str) -> None:
    facts.learn("http://a.test/v1", "m", tool_calling=True)
    with pytest.raises(typer.BadParameter, match="empty") as raised:
        crow_here("facts", "forget", flag, "")
    assert "\n" not in str(raised.value)
    assert list(facts.recall_all()) == ["http://a.test/v1 m"]
    proc = subprocess.run([sys.executable, "-m", "crow_cli", "facts", "forget", flag, " "], capture_output=True,
                          text=True, timeout=60, env={**os.environ})
    assert proc.returncode == 2 and proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert list(facts.recall_all()) == ["http://a.test/v1 m"]


# Each fact says when it was learned and from which refusal, in the local date and time to the minute, the same
# in `crow facts list` and `crow probe --show`
def test_each_fact_is_listed_with_its_own_date_and_refusal(capsys: pytest.CaptureFixture[str]) -> None:
    from crow_cli.commands.facts import when

    path = facts.facts_path()
    path.parent.mkdir(parents=True)
    now = time.time()
    seed, default = now - 7200, now - 60
    path.write_text(json.dumps({
        "http://a.test/v1 m": {
            "request_rules": [{"op": "drop_param", "target": "seed", "value": None},
                              {"op": "drop_schema_keyword", "target": "default", "value": None}],
            "tool_calling": True, "probed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seed)),
            "learned_at": now, "provenance": {
                "request_rules drop_param seed": {"learned_at": seed, "why": "400: seed"},
                "request_rules drop_schema_keyword default": {"learned_at": default, "why": "400: default"},
                "tool_calling": {"learned_at": seed}}},
        "http://b.test/v1 m": {"tool_calling": True, "learned_at": seed, "why": "400: old"}}))
    assert crow_here("facts", "list") == 0
    listed = capsys.readouterr().out
    assert listed == (
        "http://a.test/v1 m\n"
        "  adapted requests: dropped parameter seed\n"
        f"    learned {when(seed)} from the refusal: 400: seed\n"
        "  adapted requests: dropped the schema keyword default from tool parameters\n"
        f"    learned {when(default)} from the refusal: 400: default\n"
        "  tool_calling: true\n"
        f"    learned {when(seed)}\n"
        f"  probed: {when(seed)}\n"
        "http://b.test/v1 m\n"  # written before each fact kept its own: said once, for the record
        "  tool_calling: true\n"
        f"  last learned {when(seed)}, from the refusal: 400: old\n")
    assert when(seed) == time.strftime("%Y-%m-%d %H:%M", time.localtime(seed))
    assert crow_here("probe", "--show") == 0
    assert capsys.readouterr().out.startswith(listed)  # then the configured server's profile
