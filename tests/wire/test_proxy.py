"""crow_cli/wire/proxy.py: the proxy the environment names for a URL, and the chat client using it.

Properties guarded here:
- a URL gets its scheme's proxy (else ALL_PROXY's), none when NO_PROXY names its host or none is set;
- a proxy crow cannot use is one configuration error that shows no credentials;
- the chat request goes through that proxy, although the client brings its own transport, and so does
  `crow models`.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from crow_cli.errors import ConfigError, ProviderError
from crow_cli.history import user_message
from crow_cli.wire.client import ChatClient, ClientSettings
from crow_cli.wire.proxy import proxy_for
from tests.replay_server import ReplayServer
from tests.support import crow_here, text_sse

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
    monkeypatch.setenv("ALL_PROXY", "all.example:8080")  # no scheme: http://, as httpx reads it
    assert proxy_for("http://api.example.com/v1") == "http://all.example:8080"


@pytest.mark.parametrize(("proxy", "said"), [
    ("ftp://someone:hunter2@proxy.example:21", "(ftp://proxy.example:21, from HTTPS_PROXY, HTTP_PROXY or ALL_PROXY) "
                                               "is not a proxy URL crow can use"),
    ("http://someone:hunter2@proxy.example:99999", "ALL_PROXY is not a proxy URL crow can use"),
    ("http://someone:hunter2@proxy.example:port", "ALL_PROXY is not a proxy URL crow can use"),
    ("http://[someone:hunter2", "ALL_PROXY is not a proxy URL crow can use"),
    ("not a url", "(http://not a url, from"),
    ("socks5://someone:hunter2@proxy.example:1080", "is a SOCKS proxy, which needs httpx's SOCKS support"),
])
def test_a_proxy_that_cannot_be_used_is_one_line_without_its_credentials(proxy: str, said: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # one config line naming the proxy (credentials left out): never httpx's ValueError or ImportError as an
    # internal error, "unhandled errors in a TaskGroup" for a port out of range, or blame on the server
    if "SOCKS" in said and importlib.util.find_spec("socksio") is not None:
        pytest.skip("socksio is installed here: a SOCKS proxy can be used")
    monkeypatch.setenv("HTTPS_PROXY", proxy)
    with pytest.raises(ConfigError, match=r"^the proxy ") as raised:
        proxy_for("https://api.example.com/v1")
    assert said in str(raised.value) and "someone" not in str(raised.value) and "hunter2" not in str(raised.value)


# The chat request goes through the proxy the environment names, as `crow models`, the probe and the
# context-window lookup do (httpx reads no proxy variable for a client given a transport)
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


def test_crow_models_goes_through_the_same_proxy(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with ReplayServer([]) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.base_url.removesuffix("/v1"))
        code = crow_here("models", "--base-url", "http://crow-proxy-test.invalid/v1", "--json")
    assert code == 0 and json.loads(capsys.readouterr().out)[0]["id"] == "test-model"


async def test_a_proxy_that_cannot_be_reached_is_named_in_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # the error names the proxy, not "cannot reach http://host/v1: All connection attempts failed"
    with ReplayServer([]) as closed:
        address = closed.base_url.removesuffix("/v1")
    monkeypatch.setenv("HTTP_PROXY", address)  # nothing listens there any more
    client = ChatClient(ClientSettings(base_url="http://crow-proxy-test.invalid/v1", model="m", api_key="k",
                                       max_retries=0))
    try:
        with pytest.raises(ProviderError, match=f"^cannot reach http://crow-proxy-test.invalid/v1 through the "
                                                f"proxy {address} "):
            [chunk async for chunk in client.stream([user_message("x")])]
    finally:
        await client.aclose()


def test_a_bad_proxy_stops_the_client_before_any_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "https://proxy.example:99999")
    with pytest.raises(ConfigError, match="is not a proxy URL crow can use"):
        ChatClient(ClientSettings(base_url="https://api.example.com/v1", model="m", api_key="k"))
