"""A server that accepts the request and never starts its response fails after `first_byte_timeout`,
once, with a message that says what to set (issue 11, friction: it took 4 × 300 s)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import respx

from crow_cli.config import load_settings
from crow_cli.errors import ConfigError, ProviderError
from crow_cli.history import user_message
from crow_cli.wire.client import ChatClient, ClientSettings
from tests.scripting.scripting_support import CROW, write_config

BASE = "http://llm.test/v1"
URL = f"{BASE}/chat/completions"


async def test_no_response_within_the_first_byte_timeout_fails_without_retries() -> None:
    never, sent = asyncio.Event(), []

    async def hang(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        await never.wait()
        raise AssertionError("unreachable")

    c = ChatClient(ClientSettings(base_url=BASE, model="m", api_key="sk-test", max_retries=3,
                                  first_byte_timeout_s=0.05))
    with respx.mock(assert_all_called=False) as mock:  # a cancelled call is not counted by respx
        mock.post(URL).mock(side_effect=hang)
        with pytest.raises(ProviderError, match=r"no response from http://llm.test/v1 within 0.05 s .*"
                                                r"first_byte_timeout.*CROW_FIRST_BYTE_TIMEOUT"):
            try:
                [_ async for _ in c.stream([user_message("hi")])]
            finally:
                await c.aclose()
    assert len(sent) == 1


def test_first_byte_timeout_comes_from_the_config_file_or_the_environment(tmp_path: Path) -> None:
    assert load_settings({}, env={}).first_byte_timeout_s == 60
    config = write_config(tmp_path, first_byte_timeout=2.5)
    assert load_settings({}, env={}, config_path=str(config)).first_byte_timeout_s == 2.5
    assert load_settings({}, env={"CROW_FIRST_BYTE_TIMEOUT": "7"}, config_path=str(config)).first_byte_timeout_s == 7
    with pytest.raises(ConfigError, match="first_byte_timeout must be greater than 0"):
        load_settings({}, env={"CROW_FIRST_BYTE_TIMEOUT": "0"})


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP server on 127.0.0.1 that accepts connections, reads, and never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    finally:
        stop.set()
        listener.close()
        for conn in held:
            conn.close()


def test_crow_run_against_a_silent_server_fails_in_one_line(tmp_path: Path, silent_server: str) -> None:
    config = write_config(tmp_path, first_byte_timeout=0.5, max_retries=3)
    proc = subprocess.run([CROW, "run", "--base-url", silent_server, "--api-key", "sk-test", "--model", "m",
                           "--config", str(config), "hi"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("crow: error: no response from ")
    assert "first_byte_timeout" in proc.stderr and "retrying" not in proc.stderr
