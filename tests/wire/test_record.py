"""`wire/record.py` and `crow run --record`: raw exchanges on disk, secrets never."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import respx

from crow_cli.errors import ConfigError, ProviderError
from crow_cli.text import SECRET_MASK
from crow_cli.wire.client import ChatClient, ClientSettings
from crow_cli.wire.record import prepare_record_dir, recording_http_client
from tests.replay_server import ReplayServer
from tests.support import ROOT, chunk, sse, text_sse, tool_delta

BASE = "http://llm.test/v1"
KEY = "sk-very-secret-key-123"
CROW = str(Path(sys.executable).parent / "crow")


def _client(folder: Path, api_key: str | None = KEY) -> ChatClient:
    return ChatClient(ClientSettings(base_url=BASE, model="m", api_key=api_key, record_dir=str(folder),
                                     max_retries=0))


async def _drain(client: ChatClient, messages: list[dict]) -> list[dict]:
    try:
        return [c async for c in client.stream(messages)]
    finally:
        await client.aclose()


def _all_text(folder: Path) -> str:
    return "".join(f.read_text(errors="replace") for f in sorted(folder.iterdir()))


async def test_respx_intercepts_and_every_byte_is_recorded(tmp_path: Path) -> None:
    body = sse(chunk({"role": "assistant", "tool_calls": [tool_delta(0, "call_A", "roll_dice", '{"sides"')]}),
               chunk({"tool_calls": [tool_delta(0, arguments=": 20}")]}), chunk({}, "tool_calls"))
    with respx.mock(assert_all_called=True) as router:
        route = router.post(f"{BASE}/chat/completions").respond(
            200, headers={"content-type": "text/event-stream", "set-cookie": "sid=abc123456"}, text=body)
        chunks = await _drain(_client(tmp_path), [{"role": "user", "content": f"my key is {KEY}, roll"}])

    assert route.call_count == 1
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "tool_calls"
    assert sorted(f.name for f in tmp_path.iterdir()) == ["0001-meta.json", "0001-request.json", "0001-response.sse"]
    assert (tmp_path / "0001-response.sse").read_text() == body  # byte for byte, as streamed
    sent = json.loads(route.calls[0].request.content)
    recorded = json.loads((tmp_path / "0001-request.json").read_text())
    assert recorded["messages"][0]["content"] == f"my key is {SECRET_MASK}, roll"
    assert {k: v for k, v in recorded.items() if k != "messages"} == {k: v for k, v in sent.items() if k != "messages"}
    assert route.calls[0].request.headers["authorization"] == f"Bearer {KEY}"  # the server still got it
    meta = json.loads((tmp_path / "0001-meta.json").read_text())
    assert meta["status"] == 200 and meta["method"] == "POST" and meta["url"] == f"{BASE}/chat/completions"
    assert meta["response_file"] == "0001-response.sse"
    assert "authorization" not in meta["request_headers"] and "set-cookie" not in meta["response_headers"]
    assert meta["request_headers"]["content-type"] == "application/json"
    text = _all_text(tmp_path)
    assert KEY not in text and "abc123456" not in text


@respx.mock
async def test_numbering_continues_and_errors_are_recorded(tmp_path: Path) -> None:
    (tmp_path / "0007-request.json").write_text("{}")
    respx.post(f"{BASE}/chat/completions").mock(side_effect=[
        httpx.Response(400, json={"error": {"message": f"bad key {KEY}"}}),
        httpx.ConnectError("refused"),
    ])
    with pytest.raises(ProviderError):
        await _drain(_client(tmp_path), [{"role": "user", "content": "hi"}])
    assert json.loads((tmp_path / "0008-meta.json").read_text())["status"] == 400
    assert json.loads((tmp_path / "0008-response.json").read_text()) == {"error": {"message": f"bad key {SECRET_MASK}"}}
    with pytest.raises(ProviderError, match="cannot reach"):
        await _drain(_client(tmp_path), [{"role": "user", "content": "hi"}])
    assert "ConnectError: refused" in json.loads((tmp_path / "0009-meta.json").read_text())["error"]
    assert not (tmp_path / "0009-response.sse").exists()


async def test_secret_split_across_chunks_and_gzip_are_handled(tmp_path: Path) -> None:
    text = sse(chunk({"content": f"the key {KEY} leaked"}), chunk({}, "stop"))
    raw = text.encode()
    half = raw.index(KEY.encode()) + 5

    async def parts():
        yield raw[:half]
        yield raw[half:]

    async with respx.mock:
        respx.post(f"{BASE}/chat/completions").mock(side_effect=[
            httpx.Response(200, headers={"content-type": "text/event-stream"}, content=parts()),
            httpx.Response(200, headers={"content-type": "text/event-stream", "content-encoding": "gzip"},
                           content=gzip.compress(raw)),
        ])
        for _ in range(2):
            chunks = await _drain(_client(tmp_path), [{"role": "user", "content": "hi"}])
            assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == f"the key {KEY} leaked"
    expected = text.replace(KEY, SECRET_MASK)
    assert (tmp_path / "0001-response.sse").read_text() == expected
    assert (tmp_path / "0002-response.sse").read_text() == expected  # decoded for the reader


async def test_recording_client_wraps_the_stock_transport(tmp_path: Path) -> None:
    folder = tmp_path / "new" / "dir"
    client = recording_http_client(folder, timeout=httpx.Timeout(5.0))
    assert folder.is_dir()
    with respx.mock() as mock:  # respx patches the stock transport: the recorder passes requests on to it
        route = mock.post(f"{BASE}/models").mock(return_value=httpx.Response(200, json={"data": []}))
        async with client:
            assert (await client.post(f"{BASE}/models", json={})).json() == {"data": []}
    assert route.called and any(folder.iterdir())


def test_unusable_record_dir_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="cannot record into"):
        prepare_record_dir(tmp_path / "file")


def _crow(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CROW, "run", *args], cwd=cwd, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX paths")
def test_crow_run_record_writes_both_turns(tmp_path: Path) -> None:
    first = sse(chunk({"role": "assistant", "tool_calls": [tool_delta(0, "call_7", "roll_dice", '{"sides": 6}')]}),
                chunk({}, "tool_calls"))
    rec = tmp_path / "rec"
    with ReplayServer([{"sse": first}, {"sse": text_sse("You rolled.")}]) as server:
        proc = _crow("--base-url", server.base_url, "--api-key", KEY, "--model", "m", "--yes",
                     "--tools-dir", str(ROOT / "tools"), "--record", str(rec), "Roll a die.", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (rec / "0001-response.sse").read_text() == first
    second = json.loads((rec / "0002-request.json").read_text())
    assert second == server.requests[1]
    assert second["messages"][-1]["role"] == "tool" and second["messages"][-1]["tool_call_id"] == "call_7"
    assert (rec / "0002-response.sse").read_text() == text_sse("You rolled.")
    assert KEY not in _all_text(rec)
    # --record's files are 0600 in a 0700 folder, as the session store is
    assert rec.stat().st_mode & 0o777 == 0o700
    assert {f.stat().st_mode & 0o777 for f in rec.iterdir()} == {0o600}


def test_crow_run_record_into_a_file_fails_cleanly(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("x")
    proc = _crow("--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--record", str(tmp_path / "taken"), "hi",
                 cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("crow: error: cannot record into") and "Traceback" not in proc.stderr


# --record redacts each cookie value (`sid=VALUE` included) and headers named …-Pass, Password, Credential,
# Signature
async def test_cookie_values_and_password_like_headers_are_redacted(tmp_path: Path) -> None:
    headers = {"Cookie": "sid=cookie-value-123; theme=dark", "X-Api-Pass": "pass-value-123",
               "Password": "password-value-123", "X-Credential": "credential-value-123",
               "X-Amz-Signature": "signature-value-123"}
    echoed = " ".join(v.split("=")[-1].split(";")[0] for v in headers.values())
    client = ChatClient(ClientSettings(base_url=BASE, model="m", api_key=KEY, record_dir=str(tmp_path),
                                       headers=headers, max_retries=0))
    with respx.mock() as router:
        router.post(f"{BASE}/chat/completions").respond(400, json={"error": {"message": f"you sent {echoed}"}})
        with pytest.raises(ProviderError) as caught:
            await _drain(client, [{"role": "user", "content": "hi"}])
    text = _all_text(tmp_path)
    for value in ("cookie-value-123", "pass-value-123", "password-value-123", "credential-value-123",
                  "signature-value-123"):
        assert value not in text and value not in str(caught.value)  # nor in the error line
    meta = json.loads((tmp_path / "0001-meta.json").read_text())
    assert not {"cookie", "x-api-pass", "password", "x-credential", "x-amz-signature"} & set(meta["request_headers"])


# `crow run --record "$DIR" …` with DIR unset is a usage error, not a silent run recording nothing: the empty
# name is the working directory to Path, and no folder to the client
@pytest.mark.parametrize("name", ["", "  "])
def test_an_empty_record_folder_name_is_a_usage_error(name: str) -> None:
    with pytest.raises(ConfigError, match="--record needs a folder") as caught:
        prepare_record_dir(name)
    assert caught.value.exit_code == 2


# --record decodes gzip parts within the stream's cap, as the live path does: a compression bomb cannot fill
# the recording's memory and disk
async def test_a_recorded_gzip_body_is_decoded_within_the_streams_cap(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from crow_cli.wire import record

    monkeypatch.setattr(record, "MAX_STREAM_BYTES", 1024 * 1024)
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024))  # 64 MiB decoded from ~64 KiB

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-encoding": "gzip", "content-type": "text/plain"}, content=bomb)

    transport = record.RecordingTransport(tmp_path, httpx.MockTransport(handler))
    response = await transport.handle_async_request(httpx.Request("POST", "http://llm.test/v1/chat/completions"))
    passed = b"".join([part async for part in response.stream])  # type: ignore[union-attr]
    await response.aclose()
    assert passed == bomb  # the bytes passed on are untouched
    written = (tmp_path / "0001-response.txt").read_bytes()
    assert len(written) < 1024 * 1024 + 100 and written.endswith(b"[crow: recording cut at 1048576 decoded bytes]\n")
