"""`crow probe` and `crow models` as a user runs them, against the scripted replay server (real sockets).

The probe's requests come in a fixed order (crow_cli/probe/checks.py): text, one call, two parallel
calls, tool_choice required, tool_choice none, the round trip. `script_for` serves a corpus case's
first stream to the three tool requests.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests.probe.conftest import script_for
from tests.replay_server import ReplayServer, text_stream
from tests.support import CASES_DIR, crow_here, first_sse

CROW = str(Path(sys.executable).with_name("crow"))


@cache
def validator() -> Any:
    from jsonschema import Draft202012Validator

    from crow_cli.probe.report import probe_schema

    schema = probe_schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def crow(*args: str) -> subprocess.CompletedProcess[str]:
    """`crow ARGS` as a process."""
    return subprocess.run([CROW, *args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


@pytest.fixture
def here(capsys: pytest.CaptureFixture[str]) -> Callable[..., subprocess.CompletedProcess[str]]:
    """What `crow ARGS` does, crow's app run in this process (`support.crow_here`): the tables of this
    module; one `crow probe` and one `crow models` stay processes."""
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        capsys.readouterr()
        code = crow_here(*args)
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess([CROW, *args], code, out, err)

    return run


def probe_json(here: Callable[..., subprocess.CompletedProcess[str]], server: ReplayServer,
               *args: str) -> tuple[int, dict[str, Any], str]:
    proc = here("probe", "--base-url", server.base_url, "--model", "test-model", "--json", *args)
    doc = json.loads(proc.stdout)
    validator().validate(doc)
    return proc.returncode, doc, proc.stderr


def check(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in doc["checks"] if c["name"] == name)


# The probe against the scripted server of a corpus case names the case's quirk: every case runs in process
# (tests/probe/test_checks.py, the same assertions); one goes through `crow probe --json` here (crow's app in this
# process: `here`)
@pytest.mark.parametrize(("case_id", "code"), [("ollama-index-always-zero", "index-always-0")])
def test_probe_names_the_quirk_of_a_corpus_case(case_id: str, code: str, here: Any) -> None:
    stream = first_sse(json.loads((CASES_DIR / f"{case_id}.json").read_text()))
    with ReplayServer(script_for(stream)) as server:
        status, doc, stderr = probe_json(here, server)
        requests = list(server.requests)
    assert status == 0, stderr
    assert doc["tool_calling"] is True and check(doc, "tool calling")["level"] == "ok"
    assert code in [f["code"] for f in doc["shape"]]
    assert check(doc, "round trip")["level"] == "ok"
    assert all(r.get("max_tokens") for r in requests), "every request is capped in tokens"
    # the round trip carried the server's call back with its id unchanged, and one result per call
    trip = requests[5]["messages"]
    assert trip[1]["role"] == "assistant" and [m["role"] for m in trip[2:]] == ["tool"] * len(trip[1]["tool_calls"])
    assert [m["tool_call_id"] for m in trip[2:]] == [c["id"] for c in trip[1]["tool_calls"]]


def test_the_report_has_one_line_per_check_and_no_escapes_when_piped() -> None:
    stream = first_sse(json.loads((CASES_DIR / "ollama-index-always-zero.json").read_text()))
    with ReplayServer(script_for(stream)) as server:
        proc = crow("probe", "--base-url", server.base_url, "--model", "test-model")
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for name in ("reachable", "auth", "model listed", "text streaming", "[DONE]", "usage", "tool calling",
                 "parallel calls", "tool_choice required", "tool_choice none", "stream shape", "round trip"):
        assert any(line[2:].startswith(f"{name}:") for line in lines), (name, proc.stdout)
    assert "✓ tool calling: a streamed call: store_blob(" in proc.stdout
    assert "    ⚠ index always 0: 2 calls all at index 0" in proc.stdout
    assert lines[-1].startswith("streamed tool calling works")


# A server that ignores tools (llama.cpp without a tool template) fails the probe: ✗ and a non-zero exit
def test_a_server_that_ignores_tools_fails_the_probe(here: Any) -> None:
    with ReplayServer([{"sse": text_stream("Hello, I cannot call tools but here is text.")}] * 7) as server:
        status, doc, _ = probe_json(here, server)
        proc = here("probe", "--base-url", server.base_url, "--model", "test-model")
    assert status == 1 and doc["tool_calling"] is False and doc["exit_code"] == 1
    assert check(doc, "tool calling")["level"] == "fail"
    assert "answered in text" in check(doc, "tool calling")["seen"]
    assert check(doc, "round trip")["level"] == "skip"
    assert proc.returncode == 1 and "✗ tool calling: tools ignored" in proc.stdout


def test_an_unreachable_server_is_one_failed_check(unused_port_url: str, here: Any) -> None:
    proc = here("probe", "--base-url", unused_port_url, "--model", "m")
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[1].startswith("✗ reachable: cannot connect")
    assert "Traceback" not in proc.stderr


def test_usage_refused_is_reported_and_the_request_sent_again(here: Any) -> None:
    refusal = {"status": 400, "body": json.dumps({"error": {"message": "Unrecognized field: stream_options"}})}
    stream = first_sse(json.loads((CASES_DIR / "fireworks-usage-only-chunk.json").read_text()))
    with ReplayServer([refusal, *script_for(stream)]) as server:
        status, doc, _ = probe_json(here, server)
        requests = list(server.requests)
    assert status == 0
    assert check(doc, "usage")["level"] == "warn" and "refused" in check(doc, "usage")["seen"]
    assert doc["facts"]["usage_option_refused"] is True
    assert "stream_options" in requests[0] and all("stream_options" not in r for r in requests[1:])


def test_record_keeps_every_exchange_without_the_key(tmp_path: Path, here: Any) -> None:
    stream = first_sse(json.loads((CASES_DIR / "dashscope-empty-id-continuation.json").read_text()))
    rec = tmp_path / "rec"
    with ReplayServer(script_for(stream)) as server:
        status, _, _ = probe_json(here, server, "--record", str(rec), "--api-key", "sk-secret-123456")
        headers = [r["headers"] for r in server.raw_requests]
    assert status == 0
    assert all(h.get("Authorization") == "Bearer sk-secret-123456" for h in headers)
    files = sorted(p.name for p in rec.iterdir())
    assert "0001-meta.json" in files and any(f.endswith("-response.sse") for f in files)
    assert "sk-secret-123456" not in "".join(p.read_text() for p in rec.iterdir())


def test_show_lists_what_earlier_probes_learned(here: Any) -> None:
    stream = first_sse(json.loads((CASES_DIR / "minimax-args-object.json").read_text()))
    with ReplayServer(script_for(stream)) as server:
        probe_json(here, server)
        base = server.base_url
    proc = here("probe", "--show", "--json")
    facts = json.loads(proc.stdout)["learned"]
    assert proc.returncode == 0
    assert facts[f"{base} test-model"]["tool_calling"] is True
    assert "arguments-object" in facts[f"{base} test-model"]["quirks"]
    text = here("probe", "--show").stdout
    assert f"{base} test-model" in text and "tool_calling: true" in text


# With the facts store unwritable, `crow probe` says in one line that its findings could not be remembered, never
# "remembered for later runs"
def test_a_probe_whose_findings_cannot_be_stored_says_so_in_one_line(here: Any, monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("")  # the state folder's place is a file
    monkeypatch.setenv("XDG_STATE_HOME", str(blocker))
    stream = first_sse(json.loads((CASES_DIR / "minimax-args-object.json").read_text()))
    with ReplayServer(script_for(stream)) as server:
        proc = here("probe", "--base-url", server.base_url, "--model", "test-model")
    assert proc.returncode == 0 and "remembered for later runs" not in proc.stdout
    warning = proc.stderr.strip()
    assert "could not be remembered" in warning and str(blocker) in warning and len(warning.splitlines()) == 1
    assert "Error" not in warning


def test_show_lists_the_request_changes_a_run_learned(here: Any) -> None:
    # A fix learned from a server's refusal is listed by `crow probe --show`
    from crow_cli.wire import facts

    facts.learn("http://127.0.0.1:9/v1", "m", request_rules=[
        {"op": "drop_param", "target": "seed", "value": None},
        {"op": "drop_schema_keyword", "target": "default", "value": None}])
    facts.learn("http://127.0.0.1:9/v1", "m", refused_fields=[], required_fields=[])  # what every adapted run stores
    text = here("probe", "--show").stdout
    assert "http://127.0.0.1:9/v1 m" in text
    assert "  adapted requests: dropped parameter seed\n" in text  # one line per fact, then when it was learned
    assert "  adapted requests: dropped the schema keyword default from tool parameters\n    learned 20" in text
    # An empty list of refused or required fields (nothing learned) is not listed
    assert "[]" not in text and "refused_fields" not in text
    shown = json.loads(here("probe", "--show", "--json").stdout)["learned"]
    assert shown["http://127.0.0.1:9/v1 m"]["request_rules"][0]["target"] == "seed"


# `crow probe --show` says which layer each value of the server's profile came from
def test_show_names_the_layer_of_each_value_of_the_configured_servers_profile(here: Any, tmp_path: Path) -> None:
    from crow_cli.wire import facts

    facts.learn("http://127.0.0.1:9/v1", "m", request_rules=[{"op": "drop_param", "target": "seed", "value": None}])
    config = tmp_path / "config.toml"
    config.write_text('base_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n[provider]\nreasoning_fields = ["thinking"]\n')
    proc = here("probe", "--show", "--config", str(config))
    assert proc.returncode == 0, proc.stderr
    profile = proc.stdout.split("server profile of http://127.0.0.1:9/v1 m", 1)[1]
    assert '  reasoning_fields: ["thinking"] (config, replacing built-in: ["reasoning_content", "reasoning"])' \
        in profile
    assert "  needs_key: false (built-in)" in profile
    assert "  rule drop_param seed: dropped parameter seed (DropParam) (learned)" in profile


def test_show_with_nothing_probed(here: Any) -> None:
    proc = here("probe", "--show")
    assert proc.returncode == 0 and proc.stdout.startswith("nothing probed yet")


def test_models_lists_the_servers_models(here: Any) -> None:
    with ReplayServer([]) as server:
        proc = here("models", "--base-url", server.base_url)
        as_json = here("models", "--base-url", server.base_url, "--json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["test-model", "context", "length", "not", "given"]
    assert json.loads(as_json.stdout) == [{"id": "test-model", "owned_by": "replay", "context_length": None}]


def test_models_on_an_unreachable_server_is_one_line(unused_port_url: str) -> None:
    proc = crow("models", "--base-url", unused_port_url)
    assert proc.returncode == 1
    assert proc.stderr.startswith("crow: error: cannot reach") and len(proc.stderr.splitlines()) == 1
    # It says why, as crow run does (refused, a certificate), not only "ConnectError"
    assert not proc.stderr.rstrip().endswith(": ConnectError"), proc.stderr


# With no key set, crow models against the default (OpenAI) says the key is missing, not "cannot reach"
def test_models_without_a_key_says_so_in_one_line(here: Any) -> None:
    proc = here("models")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("crow: error: no API key for https://api.openai.com/v1")
    assert len(proc.stderr.splitlines()) == 1 and "ConnectError" not in proc.stderr


@pytest.fixture
def unused_port_url() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


# A deeply nested facts.json is one warning in crow probe --show, and nothing is known from it
def test_show_of_a_damaged_facts_file_is_one_warning_and_nothing_known(capsys) -> None:
    from crow_cli.wire import facts
    from tests.support import crow_here

    path = facts.facts_path()
    path.parent.mkdir(parents=True)
    path.write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert crow_here("probe", "--show") == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("nothing probed yet") and captured.err.count("\n") == 1
    assert "damaged" in captured.err


def _provider_config(tmp_path: Path, provider: str, top: str = "") -> Path:
    config = tmp_path / "config.toml"
    config.write_text(f'base_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n{top}[provider]\n{provider}')
    return config


# `probe --show --json` holds the profile the text shows, with its layers, beside the learned facts
def test_show_json_holds_the_profile_the_text_shows_with_its_layers(here: Any, tmp_path: Path) -> None:
    from crow_cli.wire import facts

    facts.learn("http://127.0.0.1:9/v1", "m", request_rules=[
        {"op": "cap_param", "target": "max_tokens", "value": 4096}])
    config = _provider_config(tmp_path, 'reasoning_fields = []\nrequest_rules = [{op = "cap_param", '
                                        'target = "max_tokens", value = 8192}]\n')
    doc = json.loads(here("probe", "--show", "--json", "--config", str(config)).stdout)
    assert doc["learned"]["http://127.0.0.1:9/v1 m"]["request_rules"][0]["value"] == 4096
    profile = doc["profile"]
    assert profile["endpoint"] == "http://127.0.0.1:9/v1 m" and profile["adapt_requests"] is True
    values = {v["key"]: v for v in profile["values"]}
    assert values["reasoning_fields"]["value"] == [] and values["reasoning_fields"]["layer"] == "config"
    assert values["rule cap_param max_tokens"] == {
        "key": "rule cap_param max_tokens", "layer": "learned",
        "value": {"op": "cap_param", "target": "max_tokens", "value": 4096},
        "text": "lowered parameter max_tokens to 4096 (CapParam)",
        "replaced": [{"layer": "config", "value": {"op": "cap_param", "target": "max_tokens", "value": 8192},
                      "text": "lowered parameter max_tokens to 8192 (CapParam)"}]}
    text = here("probe", "--show", "--config", str(config)).stdout
    # the text says an empty list as such, and what a learned rule replaced
    assert '  reasoning_fields: [] (config, replacing built-in: ["reasoning_content", "reasoning"])' in text
    assert ("  rule cap_param max_tokens: lowered parameter max_tokens to 4096 (CapParam) (learned, replacing "
            "config: lowered parameter max_tokens to 8192 (CapParam))") in text
    assert [line.split(":")[0].strip() for line in text.split("server profile of")[1].splitlines()[1:]] == \
        [v["key"] for v in profile["values"]]  # the same values, in the same order


# With `adapt_requests = false`, `probe --show` lists the configured rules (and no learned one)
def test_show_lists_configured_rules_when_adapting_requests_is_off(here: Any, tmp_path: Path) -> None:
    from crow_cli.wire import facts

    facts.learn("http://127.0.0.1:9/v1", "m", request_rules=[{"op": "drop_param", "target": "top_k", "value": None}])
    config = _provider_config(tmp_path, 'request_rules = [{op = "drop_param", target = "seed"}]\n',
                              top="adapt_requests = false\n")
    proc = here("probe", "--show", "--config", str(config))
    profile = proc.stdout.split("server profile of", 1)[1]
    assert "  rule drop_param seed: dropped parameter seed (DropParam) (config)" in profile
    assert "top_k" not in profile and "adapt_requests = false" in profile


# A configured rule that cannot act ends every command in one line, exit 2
@pytest.mark.parametrize("command", [("run", "hi"), ("chat",), ("probe",), ("probe", "--show")])
def test_a_rule_that_cannot_act_ends_each_command_in_one_line_exit_2(here: Any, tmp_path: Path,
                                                                    command: tuple[str, ...]) -> None:
    config = _provider_config(tmp_path, 'request_rules = [{op = "drop_param", target = "seed"}, '
                                        '{op = "rename_param", target = "max_tokens", value = "a b"}]\n')
    proc = here(*command, "--config", str(config), "--api-key", "sk-test")
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"crow: error: {config}: [provider] request_rules[1]: rename_param value must be "
                                  "a parameter name")


# a run that recovered tool calls written as text remembers the format, which `crow probe --show` shows
def test_show_names_the_text_format_a_run_recovered_calls_from(here: Any, tmp_path: Path) -> None:
    from tests.support import crow as crow_process

    (tmp_path / "a.txt").write_text("hello\n")
    turn = text_stream('<tool_call>{"name": "read_file", "arguments": {"path": "a.txt"}}</tool_call>')
    with ReplayServer([{"sse": turn}, {"sse": text_stream("It says hello.")}]) as server:
        proc = crow_process("run", "--base-url", server.base_url, "--api-key", "sk-test", "--model", "test-model",
                            "--yes", "read a.txt", cwd=tmp_path)
        base = server.base_url
    assert proc.returncode == 0, proc.stderr
    assert "hermes format" in proc.stderr
    shown = here("probe", "--show", "--base-url", base, "--model", "test-model").stdout
    assert 'text_call_format: "hermes" (learned)' in shown, shown
    assert '\n  text_call_format: "hermes"\n    learned ' in shown  # the record, with when it was learned
