"""`crow models`' request (`probe.models.fetch_models`): a total deadline and a cap on the decoded body."""

from __future__ import annotations

import json
from typing import Any

import pytest

from crow_cli.config import load_settings
from crow_cli.errors import ProviderError
from crow_cli.probe.models import context_length, fetch_models
from tests.support import gzip_bomb, raw_http_server, trickle


# A /models that trickles a byte every 5 s is given up on at a deadline for the whole request, not per read
def test_a_trickling_server_is_given_up_on_at_the_deadline() -> None:
    with raw_http_server(trickle) as base_url, \
            pytest.raises(ProviderError, match=r"^no answer from .*/models within 1 s$"):
        fetch_models(load_settings({"base_url": base_url, "api_key": "k"}, env={}), timeout_s=1.0)


# A body decoded past 16 MiB (~300 KB of gzip that inflates to over 1 GB) is not read further
def test_a_gzip_bomb_is_a_one_line_error() -> None:
    with raw_http_server(gzip_bomb) as base_url, \
            pytest.raises(ProviderError, match=r"sent a body of over 16 MiB \(decoded\); not read further$"):
        fetch_models(load_settings({"base_url": base_url, "api_key": "k"}, env={}))


# `crow models` follows no redirect, so the config's credential headers (httpx drops only Authorization) never go
# to another host; the error names where the server pointed
def test_a_redirect_is_an_error_naming_where_it_pointed_and_is_not_followed() -> None:
    seen: list[str | None] = []

    def elsewhere(handler: Any) -> None:
        seen.append(handler.headers.get("X-Api-Key"))
        handler.send_response(200)
        handler.end_headers()

    with raw_http_server(elsewhere) as other:
        def redirect(handler: Any) -> None:
            handler.send_response(307)
            handler.send_header("location", f"{other}/models")
            handler.send_header("content-length", "0")
            handler.end_headers()

        with raw_http_server(redirect) as base_url, \
                pytest.raises(ProviderError, match=rf"redirected the request \(307\) to {other}/models; it was not "):
            fetch_models(load_settings({"base_url": base_url, "headers": {"X-Api-Key": "sk-header-1234"}}, env={}))
    assert seen == []


def test_a_listing_nested_too_deep_is_no_model_list() -> None:
    def deep(handler: Any) -> None:
        body = b"[" * 100_000 + b"]" * 100_000
        handler.send_response(200)
        handler.send_header("content-length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    with raw_http_server(deep) as base_url, pytest.raises(ProviderError, match=r"gave no model list$"):
        fetch_models(load_settings({"base_url": base_url, "api_key": "k"}, env={}))


# A context length that is no count of tokens (`max_model_len: true`, `meta.n_ctx_train: -1`) is not given
@pytest.mark.parametrize("entry", [{"id": "m", "max_model_len": True}, {"id": "m", "meta": {"n_ctx_train": -1}},
                                   {"id": "m", "context_length": "big", "meta": {"n_ctx_train": False}}])
def test_a_context_length_that_is_no_count_of_tokens_is_not_given(entry: dict[str, Any]) -> None:
    assert context_length(entry) == (None, "")


# A /models entry whose id is an object, a list, a boolean or blank is not listed: `{'a': 1}`, `['l']` and `True`
# are Python's spelling of junk no server takes as a model
def test_an_entry_whose_id_is_no_name_is_not_listed() -> None:
    data = [{"id": {"a": 1}}, {"id": ["l"]}, {"id": True}, {"id": ""}, {"id": "  "}, {"id": 7}, {"id": "qwen3"}]

    def junk(handler: Any) -> None:
        body = json.dumps({"object": "list", "data": data}).encode()
        handler.send_response(200)
        handler.send_header("content-length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    with raw_http_server(junk) as base_url:
        found = fetch_models(load_settings({"base_url": base_url, "api_key": "k"}, env={}))
    assert [m.id for m in found] == ["7", "qwen3"]
