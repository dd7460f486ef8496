"""`crow models`' request (`probe.models.fetch_models`): a total deadline and a cap on the decoded body."""

from __future__ import annotations

import pytest

from crow_cli.config import load_settings
from crow_cli.errors import ProviderError
from crow_cli.probe.models import fetch_models
from tests.support import gzip_bomb, raw_http_server, trickle


# issue: a /models that trickled a byte every 5 s hung `crow models` (timeouts bounded each read, not the request)
def test_a_trickling_server_is_given_up_on_at_the_deadline() -> None:
    with raw_http_server(trickle) as base_url, \
            pytest.raises(ProviderError, match=r"^no answer from .*/models within 1 s$"):
        fetch_models(load_settings({"base_url": base_url, "api_key": "k"}, env={}), timeout_s=1.0)


# issue: ~300 KB of gzip became 1-1.6 GB in `crow models`
def test_a_gzip_bomb_is_a_one_line_error() -> None:
    with raw_http_server(gzip_bomb) as base_url, \
            pytest.raises(ProviderError, match=r"sent a body of over 16 MiB \(decoded\); not read further$"):
        fetch_models(load_settings({"base_url": base_url, "api_key": "k"}, env={}))
