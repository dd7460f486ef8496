"""Retries (429 / 5xx / connection errors before a stream starts) are reported as `Notice(code="retrying")`
events by the wire layer, with the attempt, the wait and the status.
"""

from __future__ import annotations

import email.utils
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import respx

from crow_cli.errors import RateLimited
from crow_cli.events import Notice, RunFinished, TextDelta
from crow_cli.history import user_message
from crow_cli.loop import LoopSettings, react
from crow_cli.wire.client import ChatClient, ClientSettings
from crow_cli.wire.retries import backoff_s, retry_wait_s, should_retry
from tests.support import text_sse

BASE = "http://llm.test/v1"
URL = f"{BASE}/chat/completions"


def client(max_retries: int = 2) -> ChatClient:
    return ChatClient(ClientSettings(base_url=BASE, model="test-model", api_key="sk-test", max_retries=max_retries))


def limited(status: int = 429, **headers: str) -> httpx.Response:
    return httpx.Response(status, json={"error": {"message": "slow down"}}, headers=headers)


def answer(text: str = "hello") -> httpx.Response:
    return httpx.Response(200, content=text_sse(text).encode(), headers={"content-type": "text/event-stream"})


async def collect(c: ChatClient) -> list:
    try:
        return [item async for item in c.stream([user_message("hi")])]
    finally:
        await c.aclose()


@respx.mock(assert_all_called=True, assert_all_mocked=True)
async def test_a_429_with_retry_after_is_reported_before_the_wait(respx_mock) -> None:
    respx_mock.post(URL).mock(side_effect=[limited(**{"retry-after-ms": "40"}), answer()])
    items = await collect(client())
    notices = [i for i in items if isinstance(i, Notice)]
    assert notices == [Notice("crow: rate limited (429); retrying in 0.04 s (attempt 2 of 3)", "retrying",
                              attempt=2, wait_s=0.04, status=429)]
    assert isinstance(items[0], Notice) and all(isinstance(i, dict) for i in items[1:])


@respx.mock(assert_all_called=True, assert_all_mocked=True)
async def test_each_5xx_retry_is_one_notice_and_the_loop_passes_them_on(respx_mock) -> None:
    respx_mock.post(URL).mock(side_effect=[limited(503, **{"retry-after": "0.01"}),
                                           limited(502, **{"retry-after": "0.02"}), answer("back")])
    history = [user_message("hi")]
    c = client(max_retries=3)
    try:
        events = [e async for e in react(history, c, None, LoopSettings())]
    finally:
        await c.aclose()
    notices = [e for e in events if isinstance(e, Notice)]
    assert [(n.code, n.attempt, n.wait_s, n.status) for n in notices] == [("retrying", 2, 0.01, 503),
                                                                        ("retrying", 3, 0.02, 502)]
    assert notices[0].message == "crow: server error (503); retrying in 0.01 s (attempt 2 of 4)"
    first_text = next(i for i, e in enumerate(events) if isinstance(e, TextDelta))
    assert events.index(notices[1]) < first_text
    assert isinstance(events[-1], RunFinished) and events[-1].final_text == "back"
    assert [m["role"] for m in history] == ["user", "assistant"]  # notices are not history


@respx.mock(assert_all_called=True, assert_all_mocked=True)
async def test_a_connection_error_retry_has_no_status(respx_mock) -> None:
    respx_mock.post(URL).mock(side_effect=[httpx.ConnectError("refused"), answer()])
    (notice, *rest) = await collect(client(max_retries=1))
    assert isinstance(notice, Notice) and notice.code == "retrying"
    assert notice.status is None and notice.attempt == 2 and 0 < notice.wait_s <= 1
    assert notice.message.startswith("crow: cannot connect; retrying in ")
    assert rest and all(isinstance(i, dict) for i in rest)


@respx.mock(assert_all_called=True, assert_all_mocked=True)
async def test_retries_used_up_report_each_then_fail(respx_mock) -> None:
    respx_mock.post(URL).mock(side_effect=[limited(**{"retry-after-ms": "10"})] * 2)
    c = client(max_retries=1)
    seen: list = []
    with pytest.raises(RateLimited):
        try:
            async for item in c.stream([user_message("hi")]):
                seen.append(item)
        finally:
            await c.aclose()
    assert [(n.attempt, n.status) for n in seen] == [(2, 429)]


@respx.mock(assert_all_called=True, assert_all_mocked=True)
async def test_no_retry_no_notice(respx_mock) -> None:
    respx_mock.post(URL).mock(side_effect=[answer()])
    assert not any(isinstance(i, Notice) for i in await collect(client()))


# The retry loop is crow's own (no private hooks of the SDK); its policy is the one the SDK documents:
# 408/409/429/5xx and connection errors, Retry-After(-Ms) up to 120 s, backoff with jitter.
@pytest.mark.parametrize(("status", "retried"), [(408, True), (409, True), (429, True), (500, True), (529, True),
                                                 (400, False), (404, False), (422, False)])
def test_which_statuses_are_retried(status: int, retried: bool) -> None:
    assert should_retry(status, httpx.Headers()) is retried


def test_the_servers_x_should_retry_header_overrides_the_status() -> None:
    assert should_retry(503, httpx.Headers({"x-should-retry": "false"})) is False
    assert should_retry(400, httpx.Headers({"x-should-retry": "true"})) is True


def test_retry_after_in_every_form_and_backoff_with_jitter_otherwise() -> None:
    assert retry_wait_s(0, httpx.Headers({"Retry-After-Ms": "250", "Retry-After": "9"})) == 0.25
    assert retry_wait_s(0, httpx.Headers({"Retry-After": "3"})) == 3
    in_a_minute = email.utils.format_datetime(datetime.now(UTC) + timedelta(seconds=60), usegmt=True)
    assert 50 < retry_wait_s(0, httpx.Headers({"Retry-After": in_a_minute})) <= 60
    assert 0.375 <= retry_wait_s(0, httpx.Headers({"Retry-After": "0"})) <= 0.5  # 0: not a wait, backoff instead
    assert 0.75 <= backoff_s(1) <= 1.0 and 6 <= backoff_s(10) <= 8


@respx.mock(assert_all_called=True, assert_all_mocked=True)
async def test_a_retry_after_beyond_two_minutes_is_not_waited_for(respx_mock) -> None:
    respx_mock.post(URL).mock(side_effect=[limited(**{"retry-after": "3600"})])
    c = client(max_retries=3)
    with pytest.raises(RateLimited) as caught:
        await collect(c)
    assert caught.value.retry_after == 3600


@respx.mock(assert_all_called=True, assert_all_mocked=True)
async def test_a_timeout_before_the_answer_is_retried_and_named(respx_mock) -> None:
    respx_mock.post(URL).mock(side_effect=[httpx.ReadTimeout("no answer"), answer()])
    notice, *rest = await collect(client(max_retries=1))
    assert isinstance(notice, Notice) and notice.message.startswith("crow: no answer within the timeout; retrying")
    assert rest and all(isinstance(i, dict) for i in rest)


# A 429 with `Retry-After: 99999` ends the run saying the server asks for a wait crow does not make, not
# "rate limited (429): Error code: 429 - {}"
@respx.mock(assert_all_called=True, assert_all_mocked=True)
async def test_a_wait_not_made_is_named_in_the_error(respx_mock) -> None:
    respx_mock.post(URL).mock(side_effect=[limited(**{"retry-after": "99999"})])
    with pytest.raises(RateLimited, match=r"; the server asks to wait 99,999 s before trying again \(crow waits at "
                                          r"most 120 s: try later\)$"):
        await collect(client(max_retries=3))
