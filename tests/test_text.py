"""`crow_cli.text`: text that can always be sent and printed, and URLs without their secrets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crow_cli.text import clean_text, has_surrogates, public_url, strip_controls, url_secrets
from tests.replay_server import ReplayServer
from tests.support import crow, run_args, tool_calls_sse, tool_messages


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


# one redaction function and one secret list for errors, records, tool output and the store
def test_one_redaction_function() -> None:
    from crow_cli.text import SECRET_MASK, mask_secrets

    assert mask_secrets("a sk-LONG-secret-1 b sk-LONG c", ("sk-LONG", "sk-LONG-secret-1", None, "x")) == \
        f"a {SECRET_MASK} b {SECRET_MASK} c"
    assert mask_secrets("key sk-LONG-sec…", ("sk-LONG-secret-1",)) == f"key {SECRET_MASK}…"
    assert mask_secrets("x is x", ("x",)) == "x is x"  # a dummy key would match anywhere


# one word for the mask: tool output, the error line and the `--record` files all say `[REDACTED]`
def test_tool_output_errors_and_records_mask_a_key_with_one_word(tmp_path: Path) -> None:
    from crow_cli.text import SECRET_MASK

    key = "sk-proj-REALKEY-123456"
    (tmp_path / ".env").write_text(f"OPENAI_API_KEY={key}\n")
    turns = [{"sse": tool_calls_sse(("r", "read_file", {"path": ".env"}))},
             {"status": 400, "body": json.dumps({"error": {"message": f"bad request; your key {key} is wrong"}})}]
    with ReplayServer(turns) as server:
        proc = crow(*run_args(server, "--record", str(tmp_path / "rec"), "--json", "go", key=key), cwd=tmp_path)
    assert proc.returncode == 1
    assert tool_messages(server.requests[1])[0]["content"] == f"OPENAI_API_KEY={SECRET_MASK}\n"
    assert proc.stderr == f"crow: error: request rejected (400): bad request; your key {SECRET_MASK} is wrong\n"
    assert json.loads(proc.stdout.splitlines()[-1])["error"].endswith(f"your key {SECRET_MASK} is wrong")
    recorded = {f.name: f.read_text() for f in (tmp_path / "rec").iterdir()}
    assert f"OPENAI_API_KEY={SECRET_MASK}" in recorded["0002-request.json"]
    assert f"your key {SECRET_MASK} is wrong" in recorded["0002-response.json"]
    every = proc.stdout + proc.stderr + "".join(recorded.values()) + json.dumps(server.requests)
    assert key not in every and not [word for word in ("[secret hidden]", "[REDACTED]") if word != SECRET_MASK
                                     and word in every]


@pytest.mark.parametrize(("name", "value", "found"), [
    ("Cookie", "sid=abcdef123456; theme=dark", {"sid=abcdef123456; theme=dark", "abcdef123456"}),
    ("Authorization", "Bearer tok-123456789", {"Bearer tok-123456789", "tok-123456789"}),
    ("X-Api-Pass", "hunter2hunter2", {"hunter2hunter2"}),
    ("Password", "hunter2hunter2", {"hunter2hunter2"}),
    ("X-Credential", "cred-1234567", {"cred-1234567"}),
    ("X-Amz-Signature", "sig-1234567", {"sig-1234567"}),
    ("api-key", "k-1234567", {"k-1234567"}),
    ("X-Title", "crow", set()),
    ("Accept", "text/event-stream", set()),
])
def test_credential_headers_and_their_values(name: str, value: str, found: set[str]) -> None:
    from crow_cli.text import header_secrets, is_secret_name

    assert is_secret_name(name) == bool(found)
    assert set(header_secrets({name: value})) == found


# control characters are shown as escapes, not dropped: the command approved reads as the one that runs
# (`echo \x1b]0;T\x07 hi`, not `echo ]0;T hi`)
def test_visible_shows_control_characters_as_escapes() -> None:
    from crow_cli.text import visible

    assert visible("echo \x1b]0;T\x07 hi\x08\x9b\rx\n\ty") == "echo \\u001b]0;T\\u0007 hi\\u0008\\u009b\\u000dx\n\ty"
    assert visible("rm\u200b -rf") == "rm\\u200b -rf" and visible("plain") == "plain"


def test_a_proxy_variable_s_credentials_are_found_and_taken_out() -> None:
    from crow_cli.text import proxy_secrets, without_userinfo

    assert without_userinfo("http://u:pass-word@proxy:3128/") == "http://proxy:3128/"
    assert without_userinfo("u:pass-word@proxy:3128") == "proxy:3128"
    assert without_userinfo("http://proxy:3128") == "http://proxy:3128"
    env = {"HTTPS_PROXY": "http://user:pass-word@proxy:1", "Http_Proxy": "http://token-user@proxy:2",
           "NO_PROXY": "a@b", "OTHER": "http://x:other-pass@h"}
    assert set(proxy_secrets(env)) == {"pass-word", "user:pass-word", "token-user"}
