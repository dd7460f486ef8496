"""Foreign errors mapped to crow's by two tables (`wire/errors`): an error answer by its status, any other
exception by its class, the most specific class first; whether one is tried again, by the same facts."""

from __future__ import annotations

import ssl

import httpx
import openai
import pytest

from crow_cli.errors import AuthError, ProviderError, QuotaExceeded, RateLimited, ServerError, StreamCut
from crow_cli.wire.errors import map_error, retry_after

REQUEST = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")


def status_error(status: int, body: dict, headers: dict | None = None) -> openai.APIStatusError:
    response = httpx.Response(status, json=body, headers=headers, request=REQUEST)
    return openai.APIStatusError(f"Error code: {status}", response=response, body=body)


@pytest.mark.parametrize(("exc", "kind", "words"), [
    (openai.APITimeoutError(REQUEST), ProviderError, "no answer from"),  # before its parent APIConnectionError
    (openai.APIConnectionError(request=REQUEST), ProviderError, "cannot reach"),
    (httpx.ReadTimeout("idle"), StreamCut, "went idle"),
    (httpx.RemoteProtocolError("peer closed"), StreamCut, "broke mid-way (peer closed)"),
    (httpx.ReadError("reset"), StreamCut, "broke mid-way (reset)"),
    (openai.APIError("bad", REQUEST, body={"message": "overloaded", "code": 503}), ServerError, "overloaded"),
])
def test_an_exception_is_mapped_by_its_most_specific_class(exc: BaseException, kind: type, words: str) -> None:
    mapped = map_error(exc, "http://x/v1")
    assert type(mapped) is kind and words in str(mapped)


def test_an_exception_of_no_table_is_not_mapped() -> None:
    assert map_error(ValueError("ours"), "http://x/v1") is None


@pytest.mark.parametrize(("status", "body", "kind"), [
    (401, {"error": {"message": "bad key"}}, AuthError),
    (429, {"error": {"message": "slow down"}}, RateLimited),
    (429, {"error": {"message": "no credit", "code": "insufficient_quota"}}, QuotaExceeded),
    (503, {"error": {"message": "busy"}}, ServerError),
    (400, {"error": {"message": "no"}}, ProviderError),
])
def test_an_error_answer_is_mapped_by_its_status(status: int, body: dict, kind: type) -> None:
    assert type(map_error(status_error(status, body), "http://x/v1")) is kind


def test_what_is_tried_again_follows_the_class_and_status() -> None:
    assert retry_after(status_error(503, {}), 0, 3)[1] is not None
    assert retry_after(status_error(400, {}), 0, 3) == (0.0, None)
    assert retry_after(status_error(429, {"error": {"code": "insufficient_quota"}}), 0, 3) == (0.0, None)
    assert retry_after(openai.APIConnectionError(request=REQUEST), 0, 3)[1] is not None
    assert retry_after(openai.APIConnectionError(request=REQUEST), 3, 3) == (0.0, None)  # none left
    refused = openai.APIConnectionError(request=REQUEST)
    refused.__cause__ = ssl.SSLCertVerificationError("certificate verify failed")
    assert retry_after(refused, 0, 3) == (0.0, None)  # the same certificate fails the same check again
