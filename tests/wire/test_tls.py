"""crow_cli/wire/tls.py: one TLS context per process, shared by crow's HTTP clients, verifying as httpx's
default does.

Properties guarded here:
- the context checks certificates and host names against loaded roots (sharing it turns nothing off);
- clients made one after another load the CA roots once, not once each;
- roots that cannot be loaded are one configuration error naming the variable that named them.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from crow_cli.errors import ConfigError
from crow_cli.history import user_message
from crow_cli.wire.client import ChatClient, ClientSettings
from crow_cli.wire.tls import ssl_context
from tests.support import run_here, text_sse

BASE = "https://api.example.test/v1"


def test_the_context_checks_certificates_and_host_names() -> None:
    context = ssl_context()
    assert context is ssl_context()
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname
    assert context.get_ca_certs(), "the CA roots are loaded"


async def test_clients_one_after_another_load_the_roots_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # each client made its own context, reading certifi's bundle each time: ~30 ms of CPU apiece (seen
    # profiling tests/wire: 364 loads, 11.5 s)
    loads: list[Any] = []
    load = ssl.SSLContext.load_verify_locations

    def counted(self: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        loads.append(args or kwargs)
        load(self, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
    ssl_context.cache_clear()
    with respx.mock() as mock:
        mock.post(f"{BASE}/chat/completions").mock(return_value=httpx.Response(
            200, content=text_sse("hi").encode(), headers={"content-type": "text/event-stream"}))
        for _ in range(2):
            client = ChatClient(ClientSettings(base_url=BASE, model="m", api_key="k", max_retries=0))
            try:
                assert [chunk async for chunk in client.stream([user_message("x")])]
            finally:
                await client.aclose()
    assert len(loads) == 1


# A missing or unreadable SSL_CERT_FILE is one config error naming the variable, in crow run (also against a
# plain-HTTP server), crow models and crow probe: never "cannot write the output" or an internal error
@pytest.mark.parametrize("content", [None, "not a certificate\n"])
async def test_roots_that_cannot_be_loaded_are_one_config_error_naming_the_variable(
        content: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ca.pem"
    if content is not None:
        path.write_text(content)
    monkeypatch.setenv("SSL_CERT_FILE", str(path))
    ssl_context.cache_clear()
    try:
        with pytest.raises(ConfigError, match=f"cannot load the TLS certificates of SSL_CERT_FILE={path}: "):
            ssl_context()
        ran = await run_here([], "hi", cwd=tmp_path)
    finally:
        ssl_context.cache_clear()  # the next test's clients load the roots of its own environment
    assert ran.code == 2 and ran.stdout == ""
    assert ran.stderr.startswith(f"crow: error: cannot load the TLS certificates of SSL_CERT_FILE={path}: ")
    assert ran.stderr.count("\n") == 1


def test_a_cert_folder_that_does_not_exist_is_one_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a missing SSL_CERT_DIR is one config error at once, not a failed, retried https handshake
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path / "none"))
    ssl_context.cache_clear()
    try:
        with pytest.raises(ConfigError, match=f"SSL_CERT_DIR={tmp_path / 'none'}: it names no folder"):
            ssl_context()
        # OpenSSL's list of folders: one that exists is enough
        monkeypatch.setenv("SSL_CERT_DIR", f"{tmp_path / 'none'}{os.pathsep}{tmp_path}")
        assert ssl_context().verify_mode is ssl.CERT_REQUIRED
    finally:
        ssl_context.cache_clear()
