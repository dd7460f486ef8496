"""The probe battery in-process (respx): refusals the replay server cannot script (GET /models 401,
/props, a round trip refused until reasoning_content is echoed)."""

from __future__ import annotations

import json

import httpx
import pytest
import respx

from crow_cli.config import Settings
from crow_cli.probe.checks import ProbeOptions, run_probe
from crow_cli.probe.report import Report
from tests.probe.conftest import QUIRKS, script_for
from tests.replay_server import ReplayServer
from tests.support import chunk, load_cases, sse, text_sse, tool_delta

BASE = "http://probe.test/v1"


def settings(api_key: str | None = None) -> Settings:
    return Settings(base_url=BASE, model="m", api_key=api_key)


def sse_response(body: str) -> httpx.Response:
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=body)


def names(report: Report) -> dict[str, str]:
    return {c.name: c.level for c in report.checks}


@respx.mock
async def test_a_refused_key_stops_after_the_auth_check() -> None:
    respx.get(f"{BASE}/models").respond(401, json={"error": {"message": "invalid key sk-bad-0000"}})
    chat = respx.post(f"{BASE}/chat/completions")
    report = await run_probe(settings(api_key="sk-bad-0000"))
    assert names(report) == {"reachable": "ok", "auth": "fail"}
    assert report.exit_code() == 1 and not chat.called


@respx.mock
async def test_context_window_from_llama_cpp_props() -> None:
    respx.get(f"{BASE}/models").respond(200, json={"data": [{"id": "m", "meta": {"n_ctx_train": 8192}}]})
    respx.get("http://probe.test/props").respond(200, json={"default_generation_settings": {"n_ctx": 4096}})
    respx.post(f"{BASE}/chat/completions").mock(return_value=sse_response(text_sse("hi")))
    report = await run_probe(settings(), ProbeOptions(budget_s=10))
    ctx = next(c for c in report.checks if c.name == "context window")
    assert (ctx.level, ctx.seen) == ("ok", "4096 tokens (/props n_ctx)")
    assert report.facts["context_window"] == 4096


@respx.mock
async def test_a_server_that_needs_reasoning_echoed_is_named() -> None:
    respx.get(f"{BASE}/models").respond(200, json={"data": [{"id": "m"}]})
    respx.get("http://probe.test/props").respond(404)
    call = sse(chunk({"reasoning_content": "I should call it."}),
               chunk({"tool_calls": [tool_delta(0, "call_1", "get_weather", '{"city": "Paris"}')]}),
               chunk({}, "tool_calls"))

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        messages = body["messages"]
        if any(m.get("role") == "tool" for m in messages):
            if not any("reasoning_content" in m for m in messages):
                return httpx.Response(400, json={"error": {"message": "reasoning_content must be passed back"}})
            return sse_response(text_sse("Sunny."))
        return sse_response(text_sse("Hello!") if "tools" not in body or body.get("tool_choice") == "none" else call)

    respx.post(f"{BASE}/chat/completions").mock(side_effect=answer)
    report = await run_probe(settings(), ProbeOptions(budget_s=20))
    trip = next(c for c in report.checks if c.name == "round trip")
    assert trip.level == "fail" and "reasoning_content" in trip.seen
    assert report.facts["reasoning_echo"] == "needed"
    assert report.facts["required_fields"] == ["reasoning_content"]  # later runs start with it (wire.facts)
    assert report.tool_calling and report.exit_code() == 0


@respx.mock
async def test_a_stream_ignored_json_answer_is_a_failed_text_check() -> None:
    respx.get(f"{BASE}/models").respond(200, json={"data": [{"id": "m"}]})
    respx.get("http://probe.test/props").respond(404)
    respx.post(f"{BASE}/chat/completions").respond(200, json={"choices": [{"message": {"content": "hi"}}]})
    report = await run_probe(settings(), ProbeOptions(budget_s=10))
    text = next(c for c in report.checks if c.name == "text streaming")
    assert text.level == "fail" and "not a stream" in text.seen
    assert report.exit_code() == 1


# The probe against the scripted server of every corpus case names the case's quirk
@pytest.mark.parametrize("case", [c for c in load_cases() if "sse" in c], ids=lambda c: c["id"])
async def test_the_probe_names_every_corpus_cases_quirk(case: dict) -> None:
    with ReplayServer(script_for(case["sse"])) as server:
        report = await run_probe(Settings(base_url=server.base_url, model="test-model"), ProbeOptions(budget_s=30))
        requests = list(server.requests)
    assert QUIRKS[case["id"]] <= {f.code for f in report.shape}, [f.code for f in report.shape]
    assert report.tool_calling == bool(case["expected"].get("tool_calls"))
    assert all(r.get("max_tokens") for r in requests), "every request is capped in tokens"
    if report.tool_calling:
        assert {c.name: c.level for c in report.checks if c.name in ("tool calling", "round trip")} == \
            {"tool calling": "ok", "round trip": "ok"}
        # the round trip carried the server's call back with its id unchanged, and one result per call
        trip = requests[5]["messages"]
        assert trip[1]["role"] == "assistant"
        assert [m["role"] for m in trip[2:]] == ["tool"] * len(trip[1]["tool_calls"])
        assert [m["tool_call_id"] for m in trip[2:]] == [c["id"] for c in trip[1]["tool_calls"]]


# found probing llama-server: it closes a kept-alive connection after 5 s idle, and the next request on it
# fails before any answer ("Server disconnected without sending a response")
@respx.mock
async def test_a_connection_closed_before_any_answer_is_tried_once_more() -> None:
    respx.get(f"{BASE}/models").respond(200, json={"data": [{"id": "m"}]})
    respx.get("http://probe.test/props").respond(404)
    call = sse(chunk({"tool_calls": [tool_delta(0, "call_1", "get_weather", '{"city": "Paris"}')]}),
               chunk({}, "tool_calls"))
    answers = iter([httpx.RemoteProtocolError("Server disconnected without sending a response."),
                    sse_response(text_sse("Hello!"))])

    def answer(request: httpx.Request) -> httpx.Response:
        step = next(answers, None)
        if isinstance(step, Exception):
            raise step
        return step or sse_response(call)

    route = respx.post(f"{BASE}/chat/completions").mock(side_effect=answer)
    report = await run_probe(settings(), ProbeOptions(budget_s=20))
    assert names(report)["text streaming"] == "ok"
    assert route.call_count >= 7  # the first request twice, then the battery


# `crow probe` follows no redirect, so the config's credential headers (an `X-Api-Key`, which httpx would
# keep, where it drops only Authorization) never go to another host
@respx.mock
async def test_a_redirect_is_not_followed_with_the_credential_headers() -> None:
    respx.get(f"{BASE}/models").respond(307, headers={"location": "http://elsewhere.test/v1/models"})
    elsewhere = respx.route(host="elsewhere.test")
    chat = respx.post(f"{BASE}/chat/completions")
    report = await run_probe(Settings(base_url=BASE, model="m", headers={"X-Api-Key": "sk-header-1234"}))
    assert names(report) == {"reachable": "fail"} and report.exit_code() == 1
    assert not elsewhere.called and not chat.called


# The API key and credential headers a server echoes in its error ("bad key Bearer sk-…") are masked in the
# probe's report, as `crow run` masks them
@respx.mock
async def test_a_key_the_server_echoes_is_masked_in_the_report() -> None:
    respx.get(f"{BASE}/models").respond(401, json={"error": {"message": "bad key Bearer sk-echoed-1234 / hdr-5678"}})
    report = await run_probe(Settings(base_url=BASE, model="m", api_key="sk-echoed-1234",
                                      headers={"X-Api-Key": "hdr-5678"}, secrets=("hdr-5678",)))
    text = json.dumps(report.to_json())
    assert "sk-echoed-1234" not in text and "hdr-5678" not in text and "bad key Bearer [REDACTED] / [REDACTED]" in text


@respx.mock
async def test_a_model_list_of_junk_ids_names_only_the_names() -> None:
    # ids that are objects, null or lists are not listed as "{'a': 1}, None, ['l']", Python's spelling of junk,
    # beside the real names
    respx.get(f"{BASE}/models").respond(200, json={"data": [{"id": {"a": 1}}, {"id": None}, {"id": ["l"]},
                                                            {"id": True}, {"id": "qwen3"}, {"id": 7}]})
    respx.get("http://probe.test/props").respond(404)
    respx.post(f"{BASE}/chat/completions").mock(return_value=sse_response(text_sse("hi")))
    report = await run_probe(settings(), ProbeOptions(budget_s=10))
    listed = next(c for c in report.checks if c.name == "model listed")
    assert listed.seen == "m is not listed (qwen3, 7)", listed.seen
