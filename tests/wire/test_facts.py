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
    # learn says in one plain line why a store cannot be written
    assert reason is not None and str(blocker) in reason and "File exists" in reason
    assert "\n" not in reason and "Error" not in reason
    assert facts.learn("http://h/v1", "m") is None  # nothing to remember: nothing to report


# A value of the wrong type in a facts file edited by hand or by another version (`"required_fields": 7`)
# counts as not known, never `crow: internal error: TypeError` in every run against that server
def test_a_value_of_the_wrong_type_counts_as_not_known() -> None:
    from crow_cli.wire.outgoing import Outgoing

    path = facts.facts_path()
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"http://h/v1 m": {
        "refused_fields": "reasoning_details", "required_fields": 7, "request_rules": 5, "context_window": "big",
        "tool_message_name": "yes", "quirks": [1, "index-always-0"], "tool_calling": True, "future_key": {"a": 1}}}))
    known = facts.recall("http://h/v1", "m")
    assert known == {"quirks": ["index-always-0"], "tool_calling": True}  # a key of no known schema too
    # each damaged value is one plain warning, none dropped silently
    warnings = facts.problems()
    assert len(warnings) == 7 and all(w.startswith("crow: warning: learned facts for http://h/v1 m, ")
                                      for w in warnings)
    for key in ("refused_fields", "required_fields", "request_rules", "context_window", "tool_message_name",
                "quirks[0]", "future_key"):
        assert sum(f"m, {key}:" in w for w in warnings) == 1, (key, warnings)
    assert Outgoing(known=known).learned() == {"refused_fields": [], "required_fields": []}


# A deeply nested facts.json counts as empty with one warning, in crow run and crow probe --show alike
def test_a_file_nested_too_deep_counts_as_empty_with_one_warning() -> None:
    path = facts.facts_path()
    path.parent.mkdir(parents=True)
    path.write_text('{"http://h/v1 m": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert facts.recall("http://h/v1", "m") == {}
    [warning] = facts.problems()
    assert "nested too deep" in warning and str(path) in warning and "\n" not in warning
    assert "Error" not in warning  # Python's RecursionError is not named
    facts.learn("http://h/v1", "m", tool_calling=True)  # replaced on the next write
    assert facts.recall("http://h/v1", "m") == {"tool_calling": True} and facts.problems() == []


# Each damaged entry is one plain line naming no Python exception (JSONDecodeError, RecursionError, TypeError)
# (the file, or which server and model, which key, what is wrong)
@pytest.mark.parametrize(("content", "words"), [
    ("{not json", "not JSON (Expecting property name enclosed in double quotes at line 1 column 2)"),
    (b"{\xff}", "not UTF-8 text"), ("[1]", "a list, not a table of servers and models")])
def test_a_damaged_file_is_one_plain_warning(content: str | bytes, words: str) -> None:
    path = facts.facts_path()
    path.parent.mkdir(parents=True)
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    assert facts.recall_all() == {}
    assert facts.problems() == [f"crow: warning: learned facts in {path} are damaged: it is {words}; none are "
                                "used (the file is replaced on the next write)"]


def test_each_damaged_entry_is_one_warning_and_the_rest_is_used() -> None:
    path = facts.facts_path()
    path.parent.mkdir(parents=True)
    now = time.time()
    records = {f"http://e{i}/v1 m": {"tool_calling": True, "learned_at": now} for i in range(facts.MAX_ENDPOINTS - 4)}
    path.write_text(json.dumps({
        "http://old/v1 m": {"tool_calling": True},  # the oldest, one beyond the bound
        **records,
        "http://a/v1 m": [1, 2],
        "http://b/v1 m\x1b[2J": {"quirks": ["q"] * (facts.MAX_ITEMS + 1), "learned_at": now},
        "http://c/v1 m": {"tool_calling": True, "learned_at": now + 10 * 24 * 3600},
        "http://d/v1 m": {"request_rules": [7, {"op": [1]}], "provenance": {"request_rules": 5, "tool_calling": "x"},
                          "tool_calling": True, "learned_at": now}}))
    known = facts.recall_all()
    warnings = facts.problems()
    assert "http://d/v1 m" in known and "http://a/v1 m" not in known and "http://c/v1 m" not in known
    assert len(known["http://b/v1 m\x1b[2J"]["quirks"]) == facts.MAX_ITEMS
    assert not any("\x1b" in w or "Error" in w or "\n" in w for w in warnings)
    said = "\n".join(warnings)
    for words in ("than the 256 kept; the 1 oldest are not used", "http://a/v1 m: it is a list, not a table",
                  "quirks: 33 items, more than the 32 kept", "http://c/v1 m, learned_at: in the future",
                  "http://d/v1 m, request_rules[0]: a number, not a table", '"tool_calling": not a date'):
        assert words in said, words
    assert len(warnings) == 8 and 'request_rules[1]: the kind "[1]" is not a name' in said
    path.write_text(json.dumps({"http://h/v1 m": {f"k{i}": 1 for i in range(12)}}))  # many: the rest counted
    assert facts.recall_all() == {"http://h/v1 m": {}}
    assert len(facts.problems()) == 11
    assert facts.problems()[-1] == f"crow: warning: 2 more damaged entries in {path}, not used"


# A fact is checked as the same value in the config is (`refused_fields = ["content"]` would drop every
# message's text); one set of checks for both. A stored require_field of tool_calls or drop_field of content
# is no fact, with a warning, in every run and in `crow facts list`
def test_a_stored_field_rule_on_a_field_of_the_message_itself_is_no_fact_with_a_warning() -> None:
    path = facts.facts_path()
    path.parent.mkdir(parents=True)
    rules = [{"op": "require_field", "target": "tool_calls"}, {"op": "drop_field", "target": "content"},
             {"op": "drop_param", "target": "seed", "value": None}]
    path.write_text(json.dumps({"http://h/v1 m": {"request_rules": rules, "learned_at": time.time()}}))
    assert facts.recall("http://h/v1", "m")["request_rules"] == [rules[2]]
    warnings = facts.problems()
    assert len(warnings) == 2 and all("not a field crow may" in w and w.endswith("not used") for w in warnings)


def test_a_fact_the_config_would_refuse_is_no_fact_with_one_warning() -> None:
    from crow_cli.wire.profiles import MESSAGE_FIELDS, check_overrides
    from crow_cli.wire.rules import RULES
    from crow_cli.wire.rules.check import rules_problem

    bad = {"refused_fields": ["content", "reasoning_content"], "required_fields": ["role"],
           "request_rules": [{"op": "explode", "target": "seed", "value": None},
                             {"op": "drop_param", "target": "", "value": None},
                             {"op": "drop_param", "target": "seed", "value": None}]}
    for key, value in bad.items():  # the config refuses each
        assert check_overrides({key: value}) or rules_problem(value)
    path = facts.facts_path()
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"http://h/v1 m": {**bad, "learned_at": time.time()}}))
    assert facts.recall("http://h/v1", "m") == {"refused_fields": ["reasoning_content"], "required_fields": [],
                                                 "request_rules": [bad["request_rules"][2]]}
    message_fields = ", ".join(sorted(MESSAGE_FIELDS))
    assert [w.split(", ", 1)[1] for w in facts.problems()] == [
        f"refused_fields[0]: may not name 'content': it is a field of the message itself ({message_fields}); not used",
        f"required_fields[0]: may not name 'role': it is a field of the message itself ({message_fields}); not used",
        f"request_rules[0]: no rule 'explode' (known: {', '.join(RULES)}); not used",
        "request_rules[1]: drop_param needs a target; not used"]
    facts.learn("http://h/v1", "n", **bad)  # and none is learned
    assert facts.recall("http://h/v1", "n") == facts.recall("http://h/v1", "m")


def test_a_file_larger_than_the_bound_counts_as_empty() -> None:
    path = facts.facts_path()
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"http://h/v1 m": {"tool_calling": True, "why": "x" * (facts.MAX_FILE + 1)}}))
    assert facts.recall_all() == {} and len(facts.problems()) == 1


def test_a_facts_file_that_cannot_be_read_is_one_warning() -> None:
    facts.facts_path().mkdir(parents=True)  # a folder where the file should be
    assert facts.recall_all() == {}
    assert facts.problems() == [f"crow: warning: learned facts in {facts.facts_path()} cannot be read (Is a "
                                "directory); none are used"]


# Names and lists are bounded when learned and when read: 1 MB parameter names give no 2 MB notice lines, no
# 7 MB facts.json, no 1 MB key in later requests
def test_names_and_lists_are_bounded_when_learned_and_when_read() -> None:
    huge = "p" * 1_000_000
    facts.learn("http://h/v1", "m", refused_fields=[huge, "reasoning_content", *[f"f{i}" for i in range(100)]],
                request_rules=[{"op": "drop_param", "target": huge, "value": None},
                               {"op": "set_param", "target": "temperature", "value": huge},
                               {"op": "set_param", "target": "temperature", "value": {"deep": [1]}},
                               {"op": "drop_param", "target": "seed", "value": None}],
                why=huge)
    assert facts.facts_path().stat().st_size < 30_000  # each of 33 facts with a refusal of at most 200 characters
    known = facts.recall("http://h/v1", "m")
    assert known["refused_fields"][0] == "reasoning_content" and len(known["refused_fields"]) <= facts.MAX_ITEMS
    assert known["request_rules"] == [{"op": "drop_param", "target": "seed", "value": None}]
    whys = [p["why"] for p in facts.recall_all()["http://h/v1 m"]["provenance"].values()]
    assert whys and all(len(why) <= facts.MAX_WHY for why in whys)


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


# A record dated in the future (2286) is not known, so no record escapes its expiry
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


# Four runs learning at once keep all 4 facts (a lock)
def test_concurrent_writers_keep_every_fact() -> None:
    import os

    env = {**os.environ}
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(i)], env=env) for i in range(8)]
    assert [p.wait() for p in procs] == [0] * 8
    assert sorted(facts.recall_all()) == sorted(f"http://h/v1 m{i}" for i in range(8))


# Each fact keeps its own refusal and date, and records written before still read
def test_each_fact_keeps_its_own_refusal_and_date() -> None:
    rule = {"op": "drop_param", "target": "seed", "value": None}
    other = {"op": "drop_schema_keyword", "target": "default", "value": None}
    facts.learn("http://h/v1", "m", request_rules=[rule], refused_fields=["reasoning_content"], why="400: seed")
    first = facts.recall_all()["http://h/v1 m"]["provenance"]
    assert first["request_rules drop_param seed"]["why"] == "400: seed"
    assert first["refused_fields reasoning_content"]["why"] == "400: seed"
    facts.learn("http://h/v1", "m", request_rules=[rule, other], refused_fields=["reasoning_content"],
                why="400: default")
    record = facts.recall_all()["http://h/v1 m"]
    assert record["provenance"]["request_rules drop_param seed"] == first["request_rules drop_param seed"]
    assert record["provenance"]["request_rules drop_schema_keyword default"]["why"] == "400: default"
    assert record["provenance"]["request_rules drop_schema_keyword default"]["learned_at"] == record["learned_at"]
    assert "why" not in record and "provenance" not in facts.recall("http://h/v1", "m")
    facts.learn("http://h/v1", "m", request_rules=[other])  # a fact gone takes its provenance with it
    assert set(facts.recall_all()["http://h/v1 m"]["provenance"]) == {
        "request_rules drop_schema_keyword default", "refused_fields reasoning_content"}


def test_a_record_written_before_facts_kept_their_own_provenance_still_reads() -> None:
    path = facts.facts_path()
    path.parent.mkdir(parents=True)
    now = time.time()
    path.write_text(json.dumps({"http://h/v1 m": {
        "request_rules": [{"op": "drop_param", "target": "seed", "value": None}], "learned_at": now,
        "why": "400: seed"}}))
    assert facts.recall("http://h/v1", "m") == {"request_rules": [{"op": "drop_param", "target": "seed",
                                                                   "value": None}]}
    assert facts.recall_all()["http://h/v1 m"]["why"] == "400: seed" and facts.problems() == []
    facts.learn("http://h/v1", "m", tool_calling=True)
    record = facts.recall_all()["http://h/v1 m"]
    assert record["why"] == "400: seed" and list(record["provenance"]) == ["tool_calling"]  # no guessed why


# `crow probe --tools`' outcomes and the format of recovered text calls are facts of fixed words: anything else is
# no fact, with one warning naming it
def test_a_tool_probe_and_a_call_format_are_kept_only_in_their_own_words() -> None:
    good = {"one": "native", "typed": "malformed", "two": "none"}
    assert facts.learn("http://h/v1", "m", tool_probe=good, text_call_format="harmony") is None
    assert facts.recall("http://h/v1", "m") == {"tool_probe": good, "text_call_format": "harmony"}
    path = facts.facts_path()
    path.write_text(json.dumps({"http://h/v1 m": {"tool_probe": {"one": "native", "three": "none"},
                                                  "text_call_format": "<tool_call>", "learned_at": time.time()},
                                "http://h/v1 n": {"tool_probe": {"one": "works"}, "learned_at": time.time()}}))
    assert facts.recall_all() == {"http://h/v1 m": {"learned_at": pytest.approx(time.time(), abs=60)},
                                  "http://h/v1 n": {"learned_at": pytest.approx(time.time(), abs=60)}}
    said = "\n".join(facts.problems())
    assert said.count("tool_probe: not a table of points (one, typed, two) and outcomes") == 2
    assert 'text_call_format: "<tool_call>" is not a format crow reads calls from' in said


# message facts of the old form (`refused_fields`, `tool_call_id_rule` …) keep their own refusal and date when the
# next write turns them into request rules, never the refusal of that write (a `max_tokens` 400)
def test_message_facts_of_the_old_form_keep_their_refusal_when_they_become_rules() -> None:
    facts.learn("http://h/v1", "m", refused_fields=["reasoning_content"], required_fields=["reasoning"],
                why="422: reasoning_content extra_forbidden")
    first = facts.recall_all()["http://h/v1 m"]["provenance"]
    drop = {"op": "drop_field", "target": "reasoning_content", "value": None}
    need = {"op": "require_field", "target": "reasoning", "value": None}
    rename = {"op": "rename_param", "target": "max_tokens", "value": "max_completion_tokens"}
    facts.learn("http://h/v1", "m", request_rules=[drop, need, rename], refused_fields=[], required_fields=[],
                why="400: Use 'max_completion_tokens' instead")
    provenance = facts.recall_all()["http://h/v1 m"]["provenance"]
    assert provenance["request_rules drop_field reasoning_content"] == first["refused_fields reasoning_content"]
    assert provenance["request_rules require_field reasoning"] == first["required_fields reasoning"]
    assert provenance["request_rules rename_param max_tokens"]["why"] == "400: Use 'max_completion_tokens' instead"


# `crow probe` gives reasoning_echo None when it could not tell: that forgets nothing learned before
def test_a_fact_given_as_none_is_left_out_and_the_stored_one_kept() -> None:
    facts.learn("http://h/v1", "m", reasoning_echo="needed", tool_message_name=True)
    facts.learn("http://h/v1", "m", reasoning_echo=None, context_window=8192)
    assert facts.recall("http://h/v1", "m") == {"reasoning_echo": "needed", "tool_message_name": True,
                                                "context_window": 8192}
