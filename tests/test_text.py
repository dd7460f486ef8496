"""`crow_cli.text`: text that can always be sent and printed, and URLs without their secrets."""

from __future__ import annotations

import pytest

from crow_cli.text import clean_text, has_surrogates, public_url, strip_controls, url_secrets


def test_surrogate_halves_are_paired_and_lone_ones_replaced() -> None:
    split = "\ud83c\udf89"  # 🎉 as two JSON `\u` escapes, decoded one by one
    assert has_surrogates(split) and clean_text(split) == "🎉"
    assert clean_text("a\ud83cb") == "a\ufffdb"
    assert not has_surrogates("plain 🎉") and clean_text("plain 🎉") == "plain 🎉"
    clean_text("x\udcff").encode("utf-8")  # a surrogateescape'd byte can be sent afterwards


@pytest.mark.parametrize(("raw", "shown"), [
    ("\x1b[2Jcleared", "[2Jcleared"),  # the escape loses its ESC: no screen clear
    ("\x1b]0;title\x07text", "]0;titletext"),  # no window title
    ("over\rwrite", "overwrite"),  # a bare CR would overwrite the line
    ("line\r\nnext", "line\nnext"),  # a CRLF line end keeps its newline
    ("tab\tand\nnewline", "tab\tand\nnewline"),
    ("c1\x9b2J", "c12J"),  # the 8-bit CSI
    ("del\x7f", "del"),
])
def test_terminal_controls_are_stripped(raw: str, shown: str) -> None:
    assert strip_controls(raw) == shown


@pytest.mark.parametrize(("url", "public"), [
    ("https://user:pa55word@llm.test:8443/v1?api-key=abcdef123", "https://llm.test:8443/v1"),
    ("http://[::1]:8080/v1", "http://[::1]:8080/v1"),
    ("https://llm.test/v1", "https://llm.test/v1"),
])
def test_public_url_drops_credentials_and_query(url: str, public: str) -> None:
    assert public_url(url) == public


def test_url_secrets_are_key_like_values_and_passwords_of_six_characters_or_more() -> None:
    url = "https://me:hunter22@llm.test/v1?api-version=1&key=sk-abcdef&sig=xyz&token=tok-123456&model=gpt-4o-mini"
    assert url_secrets(url) == ("sk-abcdef", "tok-123456", "hunter22")
    assert url_secrets("https://llm.test/v1") == ()
    assert url_secrets("http://[broken/v1?key=sk-abcdef") == ()  # unparseable: nothing to find
