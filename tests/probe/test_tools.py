"""`crow probe --tools` as a user runs it, against the scripted replay server (real sockets): each point's
outcome (native call, recovered call, no call, malformed), what is stored for later runs and `--show`.

The points come in a fixed order (crow_cli/probe/tools.py): one call, a call with an integer argument, two calls.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from crow_cli.probe.report import probe_schema
from tests.replay_server import ReplayServer, text_stream
from tests.support import crow_here, tool_calls_sse

POINTS = ("one call", "typed argument", "two calls")
WEATHER = ("call_1", "get_weather", {"city": "Paris"})
FORECAST = ("call_2", "get_forecast", {"city": "Paris", "days": 3})
TIME = ("call_3", "get_time", {"city": "Tokyo"})


def hermes(*calls: tuple[str, dict[str, Any]]) -> str:
    """A turn whose calls are written as text, Hermes / Qwen markup, as a server without a parser streams them."""
    return text_stream("".join(f'<tool_call>{{"name": "{n}", "arguments": {json.dumps(a)}}}</tool_call>'
                               for n, a in calls))


SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "native call": [{"sse": tool_calls_sse(WEATHER)}, {"sse": tool_calls_sse(FORECAST)},
                    {"sse": tool_calls_sse(WEATHER, TIME)}],
    "recovered call": [{"sse": hermes(WEATHER[1:])}, {"sse": hermes(FORECAST[1:])},
                       {"sse": hermes(WEATHER[1:], TIME[1:])}],
    "no call": [{"sse": text_stream("I cannot do that.")}] * 3,
    "malformed": [{"sse": tool_calls_sse(("call_1", "get_weather", {"town": "Paris"}))},
                  {"sse": tool_calls_sse(("call_2", "get_forecast", {"city": "Paris", "days": "three"}))},
                  {"sse": tool_calls_sse(("call_3", "get_wether", {"city": "Paris"}), TIME)}],
}
"""A scripted model answering every point the same way: natively, as text, not at all, malformed."""


@pytest.fixture
def here(capsys: pytest.CaptureFixture[str]) -> Callable[..., subprocess.CompletedProcess[str]]:
    """What `crow ARGS` does, crow's app run in this process (`support.crow_here`)."""
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        capsys.readouterr()
        code = crow_here(*args)
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["crow", *args], code, out, err)

    return run


def point_lines(text: str) -> dict[str, str]:
    """Each point's report line, after its name: `native call: get_weather(…)`."""
    found = {}
    for line in text.splitlines():
        match = re.match(r"^. (one call|typed argument|two calls): (.*)$", line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


@pytest.mark.parametrize("outcome", list(SCRIPTS))
def test_each_point_reports_the_outcome_the_model_gave(outcome: str, here: Any) -> None:
    with ReplayServer(SCRIPTS[outcome]) as server:
        proc = here("probe", "--tools", "--base-url", server.base_url, "--model", "test-model")
        requests = list(server.requests)
    lines = point_lines(proc.stdout)
    assert list(lines) == list(POINTS), proc.stdout
    assert all(said.startswith(f"{outcome}:") for said in lines.values()), proc.stdout
    assert proc.returncode == (0 if outcome in ("native call", "recovered call") else 1), proc.stdout
    assert len(requests) == 3 and all(r["tools"] and r["max_tokens"] for r in requests)
    assert "Traceback" not in proc.stderr and "\x1b" not in proc.stdout


def test_a_malformed_point_names_what_is_wrong(here: Any) -> None:
    with ReplayServer(SCRIPTS["malformed"]) as server:
        proc = here("probe", "--tools", "--base-url", server.base_url, "--model", "test-model")
    lines = point_lines(proc.stdout)
    assert "'city' is required" in lines["one call"]
    assert "'days': expected integer" in lines["typed argument"]
    assert "get_wether is no offered tool" in lines["two calls"]


def test_an_integer_sent_as_text_is_coerced_as_a_run_would_not_malformed(here: Any) -> None:
    script = [{"sse": tool_calls_sse(WEATHER)}, {"sse": tool_calls_sse(("c", "get_forecast",
                                                                       {"city": "Paris", "days": "3"}))},
              {"sse": tool_calls_sse(WEATHER, TIME)}]
    with ReplayServer(script) as server:
        proc = here("probe", "--tools", "--base-url", server.base_url, "--model", "test-model")
    assert point_lines(proc.stdout)["typed argument"].startswith("native call: get_forecast(")


def test_the_outcomes_and_the_leaked_format_are_stored_and_shown(here: Any) -> None:
    script = [{"sse": tool_calls_sse(WEATHER)}, {"sse": hermes(FORECAST[1:])}, {"sse": text_stream("No.")}]
    with ReplayServer(script) as server:
        proc = here("probe", "--tools", "--base-url", server.base_url, "--model", "test-model", "--json")
        base = server.base_url
    doc = json.loads(proc.stdout)
    Draft202012Validator(probe_schema()).validate(doc)  # the document --json promises
    assert doc["facts"]["tool_probe"] == {"one": "native", "typed": "recovered", "two": "none"}
    assert doc["facts"]["text_call_format"] == "hermes" and doc["exit_code"] == 0
    shown = here("probe", "--show", "--base-url", base, "--model", "test-model")
    assert shown.returncode == 0
    said = "one call: native call; typed argument: recovered call; two calls: no call"
    # the learned record, and the server profile's values with their layer
    assert f"  tool_probe: {said}" in shown.stdout
    assert f"  tool_probe: {said} (learned)" in shown.stdout
    assert '  text_call_format: "hermes" (learned)' in shown.stdout
    learned = json.loads(here("probe", "--show", "--json").stdout)["learned"][f"{base} test-model"]
    assert learned["tool_probe"] == {"one": "native", "typed": "recovered", "two": "none"}


def test_an_unreachable_server_has_no_outcome_and_stores_nothing(here: Any) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    proc = here("probe", "--tools", "--base-url", url, "--model", "m")
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[1].startswith("✗ one call: the request: cannot connect")
    assert "nothing probed yet" in here("probe", "--show").stdout


@pytest.mark.parametrize("answer", [
    {"sse": 'data: {"error": {"message": "model overloaded", "type": "server_error"}}\n\n'},
    {"sse": "<html><body>Bad gateway</body></html>", "content_type": "text/html"},
    {"sse": "data: {garbage\n\ndata: [DONE]\n\n"},
], ids=["error in the stream", "an html page", "no decodable event"])
def test_an_answer_that_is_no_stream_of_chunks_has_no_outcome_and_stores_nothing(answer: dict[str, Any],
                                                                                  here: Any) -> None:
    # a server failing this way says nothing of the model: stored as "no call", every later run would warn
    with ReplayServer([answer] * 3) as server:
        proc = here("probe", "--tools", "--base-url", server.base_url, "--model", "m")
    lines = point_lines(proc.stdout)
    assert list(lines) == list(POINTS), proc.stdout
    assert all(said.startswith("the request: ") for said in lines.values()), proc.stdout
    assert proc.returncode == 1 and "remembered" not in proc.stdout
    assert "nothing probed yet" in here("probe", "--show").stdout
