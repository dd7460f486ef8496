"""The learned-facts store: per base URL + model, merged, atomic, private, never raising."""

from __future__ import annotations

import json
import stat
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
    facts.learn("https://user:sk-secret-1@example.com/v1/?key=sk-secret-2", "m", x=1)
    text = facts.facts_path().read_text()
    assert "sk-secret" not in text
    assert list(facts.recall_all()) == ["https://example.com/v1 m"]
    assert facts.recall("https://example.com/v1/", "m") == {"x": 1}


def test_the_file_is_private() -> None:
    facts.learn("http://h/v1", "m", x=1)
    assert stat.S_IMODE(facts.facts_path().stat().st_mode) == 0o600
    assert [p.name for p in facts.facts_path().parent.iterdir()] == ["facts.json"]  # no temp file left


def test_a_corrupt_file_counts_as_empty_and_is_replaced() -> None:
    path = facts.facts_path()
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert facts.recall_all() == {}
    facts.learn("http://h/v1", "m", x=1)
    assert json.loads(path.read_text()) == {"http://h/v1 m": {"x": 1}}


def test_an_unwritable_state_dir_is_ignored(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # a read-only home must not fail a run: learning is an optimisation
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setattr(facts, "facts_path", lambda: blocker / "crow" / "facts.json")
    facts.learn("http://h/v1", "m", x=1)
    assert facts.recall("http://h/v1", "m") == {}


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
    assert known == {"quirks": ["index-always-0"], "tool_calling": True, "future_key": {"a": 1}}
    assert Outgoing(known=known).learned() == {"refused_fields": [], "required_fields": []}
