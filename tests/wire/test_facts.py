"""The learned-facts store: per base URL + model, merged, atomic, private, never raising."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crow_cli.wire import facts


def test_nothing_known_is_an_empty_dict() -> None:
    assert facts.recall("http://127.0.0.1:1/v1", "m") == {}
    assert facts.recall_all() == {}


def test_learn_merges_keys_into_the_endpoints_record() -> None:
    facts.learn("http://h/v1", "m", reasoning_echo="all")
    facts.learn("http://h/v1", "m", tool_message_name=True)
    facts.learn("http://h/v1", "other", reasoning_echo="none")
    assert facts.recall("http://h/v1", "m") == {"reasoning_echo": "all", "tool_message_name": True}
    assert facts.recall("http://h/v1", "other") == {"reasoning_echo": "none"}
    facts.learn("http://h/v1", "m", reasoning_echo="none")
    assert facts.recall("http://h/v1", "m")["reasoning_echo"] == "none"


def test_the_key_holds_no_credentials_and_no_query() -> None:
    # a key in the URL (user:pass@ or ?key=) must never be written to disk
    facts.learn("https://user:sk-secret-1@example.com/v1/?key=sk-secret-2", "m", tool_calling=True)
    text = facts.facts_path().read_text()
    assert "sk-secret" not in text
    assert list(facts.recall_all()) == ["https://example.com/v1 m"]
    assert facts.recall("https://example.com/v1/", "m") == {"tool_calling": True}


def test_the_file_is_private() -> None:
    facts.learn("http://h/v1", "m", tool_calling=True)
    assert stat.S_IMODE(facts.facts_path().stat().st_mode) == 0o600
    assert [p.name for p in facts.facts_path().parent.iterdir()] == ["facts.json"]  # no temp file left


def test_a_corrupt_file_counts_as_empty_and_is_replaced() -> None:
    path = facts.facts_path()
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert facts.recall_all() == {}
    facts.learn("http://h/v1", "m", tool_calling=True)
    assert facts.recall_all()["http://h/v1 m"]["tool_calling"] is True


def test_an_unwritable_state_dir_is_ignored(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # a read-only home must not fail a run: learning is an optimisation
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setattr(facts, "facts_path", lambda: blocker / "crow" / "facts.json")
    reason = facts.learn("http://h/v1", "m", tool_calling=True)
    assert facts.recall("http://h/v1", "m") == {}
    # a new-user tester of learned facts: a store that could not be written was silent; now learn says why
    assert reason is not None and str(blocker) in reason and "File exists" in reason
    assert "\n" not in reason and "Error" not in reason
    assert facts.learn("http://h/v1", "m") is None  # nothing to remember: nothing to report


# found trying it as a new user (wave 3): a facts file edited by hand or by another version, holding
# `"required_fields": 7`, made every run against that server `crow: internal error: TypeError`
def test_a_value_of_the_wrong_type_counts_as_not_known() -> None:
    from crow_cli.wire.outgoing import Outgoing

    path = facts.facts_path()
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"http://h/v1 m": {
        "refused_fields": "reasoning_details", "required_fields": 7, "request_rules": 5, "context_window": "big",
        "tool_message_name": "yes", "quirks": [1, "index-always-0"], "tool_calling": True, "future_key": {"a": 1}}}))
    known = facts.recall("http://h/v1", "m")
    assert known == {"quirks": ["index-always-0"], "tool_calling": True}  # a key of no known schema too
    assert Outgoing(known=known).learned() == {"refused_fields": [], "required_fields": []}


# A deeply nested facts.json was `internal error: RecursionError` in crow run and crow probe --show (issue 29)
def test_a_file_nested_too_deep_counts_as_empty_with_one_warning() -> None:
    path = facts.facts_path()
    path.parent.mkdir(parents=True)
    path.write_text('{"http://h/v1 m": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert facts.recall("http://h/v1", "m") == {}
    warning = facts.problem()
    assert warning is not None and "RecursionError" in warning and "\n" not in warning
    facts.learn("http://h/v1", "m", tool_calling=True)  # replaced on the next write
    assert facts.recall("http://h/v1", "m") == {"tool_calling": True} and facts.problem() is None


def test_a_file_larger_than_the_bound_counts_as_empty() -> None:
    path = facts.facts_path()
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"http://h/v1 m": {"tool_calling": True, "why": "x" * (facts.MAX_FILE + 1)}}))
    assert facts.recall_all() == {} and facts.problem() is not None


# Four 1 MB parameter names gave 2 MB notice lines, a 7 MB facts.json and a 1 MB key in later requests (issue 29)
def test_names_and_lists_are_bounded_when_learned_and_when_read() -> None:
    huge = "p" * 1_000_000
    facts.learn("http://h/v1", "m", refused_fields=[huge, "reasoning_content", *[f"f{i}" for i in range(100)]],
                request_rules=[{"op": "drop_param", "target": huge, "value": None},
                               {"op": "set_param", "target": "temperature", "value": huge},
                               {"op": "set_param", "target": "temperature", "value": {"deep": [1]}},
                               {"op": "drop_param", "target": "seed", "value": None}],
                why=huge)
    assert facts.facts_path().stat().st_size < 10_000
    known = facts.recall("http://h/v1", "m")
    assert known["refused_fields"][0] == "reasoning_content" and len(known["refused_fields"]) <= facts.MAX_ITEMS
    assert known["request_rules"] == [{"op": "drop_param", "target": "seed", "value": None}]
    assert len(facts.recall_all()["http://h/v1 m"]["why"]) <= 200


def test_a_learned_size_is_a_positive_int_when_learned_and_when_read() -> None:
    # a cap or limit a server named: anything but a bounded positive int (a hand-edited file) is not known
    path = facts.facts_path()
    path.parent.mkdir(parents=True)
    bad = [{"op": "cap_param", "target": "max_tokens", "value": v} for v in (0, -1, True, "8192", 1 << 40, 2.5)]
    good = [{"op": "cap_param", "target": "max_tokens", "value": 16384},
            {"op": "cut_tool_result", "target": "", "value": 10485760}]
    path.write_text(json.dumps({"http://h/v1 m": {"request_rules": bad + good, "learned_at": time.time()}}))
    assert facts.recall("http://h/v1", "m")["request_rules"] == good
    facts.learn("http://h/v1", "n", request_rules=[*bad, good[0]])
    assert facts.recall("http://h/v1", "n")["request_rules"] == [good[0]]


def test_a_record_older_than_max_age_is_not_known_and_is_learned_again() -> None:
    path = facts.facts_path()
    path.parent.mkdir(parents=True)
    old = time.time() - facts.MAX_AGE - 60
    path.write_text(json.dumps({"http://h/v1 m": {"tool_calling": True, "learned_at": old},
                                "http://h/v1 n": {"tool_calling": True, "learned_at": time.time()}}))
    assert facts.recall("http://h/v1", "m") == {}
    assert facts.recall("http://h/v1", "n") == {"tool_calling": True}
    facts.learn("http://h/v1", "m", tool_calling=False)
    assert facts.recall("http://h/v1", "m") == {"tool_calling": False}


# found by a new-user tester: a record dated in the year 2286 was trusted and so never reached its expiry
def test_a_record_dated_in_the_future_is_not_known() -> None:
    path = facts.facts_path()
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"http://h/v1 m": {"tool_calling": True, "learned_at": 9_999_999_999}}))
    assert facts.recall("http://h/v1", "m") == {}


def test_forget_drops_by_base_url_and_model() -> None:
    facts.learn("http://a/v1", "m", tool_calling=True)
    facts.learn("http://a/v1", "n", tool_calling=True)
    facts.learn("http://b/v1", "m", tool_calling=True)
    assert facts.forget(model="n") == ["http://a/v1 n"]
    assert facts.forget(base_url="http://b/v1/") == ["http://b/v1 m"]
    assert list(facts.recall_all()) == ["http://a/v1 m"]
    assert facts.forget() == ["http://a/v1 m"] and facts.recall_all() == {}


_WRITER = """
import sys
from crow_cli.wire import facts
facts.learn("http://h/v1", "m" + sys.argv[1], tool_calling=True)
"""


# Four runs learning at once kept 1 of 4 facts (no lock) (issue 29)
def test_concurrent_writers_keep_every_fact() -> None:
    import os

    env = {**os.environ}
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(i)], env=env) for i in range(8)]
    assert [p.wait() for p in procs] == [0] * 8
    assert sorted(facts.recall_all()) == sorted(f"http://h/v1 m{i}" for i in range(8))
