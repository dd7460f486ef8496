"""crow_cli/wire/proxy.py: the proxy the environment names for a URL, and the chat client using it.

Properties guarded here:
- a URL gets its scheme's proxy (else ALL_PROXY's), none when NO_PROXY names its host or none is set;
- the chat request goes through that proxy, although the client brings its own transport.
"""

from __future__ import annotations

import pytest

from crow_cli.history import user_message
from crow_cli.wire.client import ChatClient, ClientSettings
from crow_cli.wire.proxy import proxy_for
from tests.replay_server import ReplayServer
from tests.support import text_sse

VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@pytest.fixture(autouse=True)
def _no_proxy_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def test_a_url_gets_its_schemes_proxy_unless_no_proxy_names_its_host(monkeypatch: pytest.MonkeyPatch) -> None:
    assert proxy_for("https://api.example.com/v1") is None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "internal.example,127.0.0.1")
    assert proxy_for("https://api.example.com/v1") == "http://proxy.example:3128"
    assert proxy_for("https://llm.internal.example/v1") is None
    assert proxy_for("http://127.0.0.1:8080/v1") is None
    assert proxy_for("http://api.example.com/v1") is None  # no proxy for plain HTTP was named
    monkeypatch.setenv("ALL_PROXY", "http://all.example:8080")
    assert proxy_for("http://api.example.com/v1") == "http://all.example:8080"


# tried as a new user: with HTTPS_PROXY set, `crow models`, the probe and the context-window lookup went
# through the proxy, the chat request did not (httpx reads no proxy variable for a client given a transport)
async def test_the_chat_request_goes_through_the_proxy_the_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    with ReplayServer([{"sse": text_sse("hello")}]) as proxy:  # it answers what a proxy forwards to it
        monkeypatch.setenv("HTTP_PROXY", proxy.base_url.removesuffix("/v1"))
        client = ChatClient(ClientSettings(base_url="http://crow-proxy-test.invalid/v1", model="m", api_key="k",
                                           max_retries=0))
        try:
            assert [chunk async for chunk in client.stream([user_message("x")])]
        finally:
            await client.aclose()
    assert proxy.raw_requests[0]["path"] == "http://crow-proxy-test.invalid/v1/chat/completions"
