"""Where requests go: a base URL with a query string (Azure's `?api-version=…`), which is never shown."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import respx

from crow_cli.errors import ProviderError
from crow_cli.history import user_message
from crow_cli.wire.client import ChatClient, ClientSettings
from tests.support import text_sse

# Found trying it as a new user: `?api-version=…&key=…` became `/v1?…/chat/completions`,
# and the query (with the key in it) was written to --record's metadata. (issue 11 item 5)
BASE = "http://llm.test/openai/deployments/gpt?api-version=2024-10-21&key=QUERY-SECRET-77"
URL = "http://llm.test/openai/deployments/gpt/chat/completions"


def answer() -> httpx.Response:
    return httpx.Response(200, content=text_sse("ok").encode(), headers={"content-type": "text/event-stream"})


async def drain(c: ChatClient) -> list:
    try:
        return [item async for item in c.stream([user_message("hi")])]
    finally:
        await c.aclose()


async def test_the_query_of_the_base_url_goes_with_every_request() -> None:
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[httpx.Response(503), answer()])
        await drain(ChatClient(ClientSettings(base_url=BASE, model="m", api_key="sk-test", max_retries=1)))
    for call in route.calls:
        assert call.request.url.path == "/openai/deployments/gpt/chat/completions"
        assert dict(call.request.url.params) == {"api-version": "2024-10-21", "key": "QUERY-SECRET-77"}


async def test_the_query_is_never_recorded(tmp_path: Path) -> None:
    with respx.mock(assert_all_called=True) as mock:
        mock.post(URL).mock(return_value=answer())
        await drain(ChatClient(ClientSettings(base_url=BASE, model="m", api_key="sk-test", max_retries=0,
                                              record_dir=str(tmp_path))))
    meta = json.loads((tmp_path / "0001-meta.json").read_text())
    assert meta["url"] == URL
    assert all("QUERY-SECRET-77" not in f.read_text() for f in tmp_path.iterdir())


@pytest.mark.parametrize("failure", [httpx.Response(404, json={"error": {"message": "no such deployment"}}),
                                     httpx.ConnectError("refused")])
async def test_errors_show_the_url_without_its_query(failure) -> None:
    with respx.mock() as mock:
        mock.post(URL).mock(side_effect=[failure])
        with pytest.raises(ProviderError) as caught:
            await drain(ChatClient(ClientSettings(base_url=BASE, model="m", api_key="sk-test", max_retries=0)))
    assert "http://llm.test/openai/deployments/gpt" in str(caught.value)
    assert "QUERY-SECRET" not in str(caught.value) and "api-version" not in str(caught.value)
