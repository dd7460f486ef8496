"""An API key a provider echoes in its error body never reaches what crow prints or stores."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
import respx

from crow_cli.errors import AuthError, ProviderError, ServerError
from crow_cli.wire.client import ChatClient, ClientSettings, map_error
from tests.support import run_here

KEY = "sk-SECRET-abc123"


def _status_error(status: int, message: str) -> openai.APIStatusError:
    request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    body = {"error": {"message": message, "code": "invalid_api_key"}}
    response = httpx.Response(status, json=body, request=request)
    return openai.APIStatusError(message, response=response, body=body)


def test_map_error_replaces_the_key_in_the_message():
    mapped = map_error(_status_error(401, f"Incorrect API key provided: {KEY}."), "http://x/v1", secret=KEY)
    assert isinstance(mapped, AuthError) and mapped.status == 401
    assert KEY not in str(mapped) and "Incorrect API key provided: [REDACTED]." in str(mapped)


def test_a_key_cut_by_the_message_limit_is_redacted_too():
    mapped = map_error(_status_error(400, "x" * 190 + " key " + KEY), "http://x/v1", secret=KEY)
    assert "sk-S" not in str(mapped) and str(mapped).endswith("[REDACTED]…")


def test_errors_raised_inside_the_stream_are_redacted_and_short_keys_left_alone():
    mapped = map_error(ServerError(f"server error: bad key {KEY}", status=500), "http://x/v1", secret=KEY)
    assert isinstance(mapped, ServerError) and mapped.status == 500
    assert str(mapped) == "server error: bad key [REDACTED]"
    assert str(map_error(ServerError("an answer"), "u", secret="a")) == "an answer"


async def test_cli_error_line_and_json_event_carry_no_key(tmp_path):
    body = json.dumps({"error": {"message": f"Incorrect API key provided: {KEY}", "code": "invalid_api_key"}})
    for json_mode in (False, True):
        ran = await run_here([{"status": 401, "body": body}], json=json_mode, flags={"api_key": KEY}, model="m",
                             cwd=tmp_path, no_tools=True)
        assert ran.code == 1
        assert KEY not in ran.stdout + ran.stderr and "[REDACTED]" in ran.stderr
        if json_mode:
            finished = json.loads(ran.stdout.splitlines()[-1])
            assert finished["type"] == "run_finished" and "[REDACTED]" in finished["error"]


# found trying it as a new user (fourth round): a key in the base URL's query was quoted back unredacted
# (through the client in-process: the replay server, a verbatim copy of the shared one, answers 404 to a
# path with a query)
async def test_a_key_in_the_base_url_query_is_redacted_from_errors():
    query_key = "sk-QUERY-key-987654"
    body = {"error": {"message": f"invalid key {query_key}"}}
    for name in ("key", "api-key", "token", "sig"):
        settings = ClientSettings(base_url=f"http://llm.test/v1?api-version=1&{name}={query_key}", model="m",
                                  max_retries=0)
        client = ChatClient(settings)
        with respx.mock() as mock:
            mock.post(url__startswith="http://llm.test/v1/chat/completions").mock(
                return_value=httpx.Response(400, json=body))
            with pytest.raises(ProviderError) as caught:
                [_ async for _ in client.stream([{"role": "user", "content": "hi"}])]
        await client.aclose()
        assert query_key not in str(caught.value) and "[REDACTED]" in str(caught.value)


def test_map_error_redacts_every_secret_given():
    mapped = map_error(ServerError("bad a-secret-1 and b-secret-2", status=500), "u",
                       secret=["a-secret-1", "b-secret-2"])
    assert str(mapped) == "bad [REDACTED] and [REDACTED]"


# issue: credentials followed a redirect to another host (api-key, X-Api-Key, cookies; only Authorization
# was dropped). crow follows no redirect and says so.
async def test_a_redirect_is_not_followed_and_no_credential_goes_elsewhere() -> None:
    import pytest
    import respx

    from crow_cli.errors import ProviderError
    from crow_cli.wire.client import ChatClient, ClientSettings

    client = ChatClient(ClientSettings(base_url="http://llm.test/v1", model="m", api_key=KEY, max_retries=0,
                                       headers={"api-key": "azure-key-123456", "X-Api-Key": "x-key-123456",
                                                "Cookie": "sid=cookie-123456"}))
    with respx.mock(assert_all_called=False) as router:
        router.post("http://llm.test/v1/chat/completions").respond(
            307, headers={"location": "http://evil.test/v1/chat/completions"})
        elsewhere = router.post("http://evil.test/v1/chat/completions").respond(200, text="data: [DONE]\n\n")
        with pytest.raises(ProviderError, match=r"redirected .*http://evil\.test/v1/chat/completions.* not "
                                                r"followed") as caught:
            async for _ in client.stream([{"role": "user", "content": "hi"}]):
                pass
        await client.aclose()
    assert elsewhere.call_count == 0 and caught.value.status == 307
