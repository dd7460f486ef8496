"""`tools.web`: which addresses are reached, redirects checked hop by hop, and what a response becomes as text.

The servers are real sockets on 127.0.0.1 (nothing leaves the machine); `localhost` stands for a host name
the configuration allows whose address is loopback.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from crow_cli.errors import ToolError
from crow_cli.tools.web import (
    Fetched,
    Redirected,
    WebAccess,
    address_problem,
    check_url,
    fetch,
    host_allowed,
    html_to_markdown,
    page_text,
)


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


@contextlib.contextmanager
def serving(routes: dict[str, Callable[[Any], None]]) -> Iterator[tuple[int, list[str]]]:
    """A server on 127.0.0.1 answering each path with its route; yields its port and the paths asked for."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            routes[self.path](self)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1], asked
    finally:
        server.shutdown()
        server.server_close()


def answer(body: bytes, content_type: str = "text/html; charset=utf-8", status: int = 200) -> Callable[[Any], None]:
    def respond(handler: Any) -> None:
        handler.send_response(status)
        handler.send_header("content-type", content_type)
        handler.send_header("content-length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
    return respond


def redirect(location: Callable[[], str]) -> Callable[[Any], None]:
    def respond(handler: Any) -> None:
        handler.send_response(302)
        handler.send_header("location", location())
        handler.send_header("content-length", "0")
        handler.end_headers()
    return respond


def minimal_pdf(text: str) -> bytes:
    """A one-page PDF showing `text` in Helvetica, with a correct cross-reference table."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
               b"/Resources << /Font << /F1 5 0 R >> >> >>",
               b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


@pytest.mark.parametrize(("address", "problem"), [
    ("127.0.0.1", "a loopback address"), ("::1", "a loopback address"), ("10.1.2.3", "a private address"),
    ("192.168.0.1", "a private address"), ("172.16.5.4", "a private address"),
    ("169.254.169.254", "a link-local address (the cloud metadata service lives there)"),
    ("fe80::1", "a link-local address (the cloud metadata service lives there)"),
    ("fd00:ec2::254", "a private address"),
    ("0.0.0.0", "the unspecified address"), ("100.64.0.1", "an address that is not public"),
    ("::ffff:127.0.0.1", "a loopback address"), ("64:ff9b::a9fe:a9fe", "a link-local address (the cloud metadata "
                                                                       "service lives there)"),
    ("224.0.0.1", "a multicast address"), ("93.184.215.14", None), ("2606:4700::6810:84e5", None)])
def test_only_public_addresses_are_reached_on_their_own(address: str, problem: str | None) -> None:
    assert address_problem(address) == problem


def test_allow_hosts_names_hosts_exactly_or_by_a_wildcard_suffix_or_a_network() -> None:
    allowed = ("LocalHost.", "10.0.0.7", "*.corp.example", "[::1]", "192.168.1.0/24", "fd00:1::/64")
    assert all(host_allowed(h, allowed) for h in ("localhost", "10.0.0.7", "wiki.corp.example", "::1",
                                                  "192.168.1.200", "fd00:1::9"))
    assert not any(host_allowed(h, allowed) for h in ("corp.example", "evilcorp.example", "10.0.0.8", "localhost2",
                                                      "192.168.2.1", "fd00:2::1", "192.168.1.0.example"))


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/", "gopher://x/", "http:///nohost",
                                 "https://user:pw@example.com/", "javascript:alert(1)", "http://example.com:99999/"])
def test_only_http_urls_with_a_host_and_no_credentials_are_fetched(url: str) -> None:
    with pytest.raises(ToolError):
        check_url(url)


def test_html_becomes_markdown_without_scripts_styles_or_navigation() -> None:
    page = (b"<html><head><title>T</title><style>.x{color:red}</style><script>alert('SCRIPT')</script></head><body>"
            b"<nav>NAV</nav><header>BANNER</header><main><h2>Part</h2><p>Read <a href='/doc'>this</a>.</p>"
            b"<div hidden>HIDDEN</div><div role='navigation'>MENU</div><noscript>NOSCRIPT</noscript></main>"
            b"<footer>FOOT</footer></body></html>")
    text = html_to_markdown(page, base="https://example.com/a/")
    assert text == "# T\n\n## Part\n\nRead [this](https://example.com/doc)."


def test_pdf_and_text_are_read_as_text_and_binary_is_refused_in_one_line() -> None:
    def fetched(body: bytes, media: str) -> Fetched:
        return Fetched("https://example.com/f", 200, "OK", media, None, body, False)

    assert page_text(fetched(minimal_pdf("Hello from a PDF"), "application/pdf")) == ("PDF", "Hello from a PDF")
    assert page_text(fetched(b"plain \x1b[2Jtext", "text/plain")) == ("text", "plain [2Jtext")
    with pytest.raises(ToolError) as refused:
        page_text(fetched(b"\x89PNG\r\n\x1a\n\0\0", "image/png"))
    assert str(refused.value) == ("https://example.com/f is image/png (10 bytes), not text: web_fetch reads HTML, "
                                  "text and PDF only")


async def test_a_loopback_host_is_refused_before_anything_is_sent_unless_allowed() -> None:
    with serving({"/": answer(b"<p>hi</p>")}) as (port, asked):
        with pytest.raises(ToolError, match=r"^127\.0\.0\.1 is a loopback address: web_fetch does not reach it"):
            await fetch(f"http://127.0.0.1:{port}/", WebAccess())
        with pytest.raises(ToolError, match=r"^localhost \((127\.0\.0\.1|::1)\) is a loopback address"):
            await fetch(f"http://localhost:{port}/", WebAccess())
        assert asked == []
        got = await fetch(f"http://127.0.0.1:{port}/", WebAccess(("127.0.0.1",)))
        assert isinstance(got, Fetched) and got.body == b"<p>hi</p>" and asked == ["/"]


async def test_every_redirect_is_checked_and_followed_only_to_the_same_or_an_allowed_host() -> None:
    routes = {"/to-loopback": redirect(lambda: f"http://127.0.0.1:{port}/page"),
              "/same-host": redirect(lambda: "/page"), "/page": answer(b"<p>page</p>")}
    with serving(routes) as (port, asked):
        # an allowed host that sends the fetch on to a loopback address the config does not allow: refused
        with pytest.raises(ToolError, match=r"^127\.0\.0\.1 is a loopback address"):
            await fetch(f"http://localhost:{port}/to-loopback", WebAccess(("localhost",)))
        assert asked == ["/to-loopback"]
        same = await fetch(f"http://localhost:{port}/same-host", WebAccess(("localhost",)))
        assert isinstance(same, Fetched) and same.url == f"http://localhost:{port}/page" and same.body == b"<p>page</p>"
        both = await fetch(f"http://localhost:{port}/to-loopback", WebAccess(("localhost", "127.0.0.1")))
        assert isinstance(both, Fetched) and both.url == f"http://127.0.0.1:{port}/page"


@pytest.mark.parametrize("location", ["javascript:alert(1)", "file:///etc/passwd", "http://[::1"])
async def test_a_redirect_to_what_is_no_fetchable_url_is_one_line(location: str) -> None:
    """A Location crow cannot fetch is a ToolError saying so, never an exception of the HTTP library."""
    with serving({"/": redirect(lambda: location)}) as (port, _asked), pytest.raises(ToolError):
        await fetch(f"http://127.0.0.1:{port}/", WebAccess(("127.0.0.1",)))


async def test_a_redirect_to_a_host_that_does_not_resolve_is_handed_to_the_model() -> None:
    """A redirect to another host is the model's to follow with a new call, also when that host does not resolve
    now: the fetch answers with the new URL, not with a DNS error."""
    with serving({"/": redirect(lambda: "https://no-such-host.invalid/page")}) as (port, _asked):
        got = await fetch(f"http://127.0.0.1:{port}/", WebAccess(("127.0.0.1",)))
    assert isinstance(got, Redirected) and got.location == "https://no-such-host.invalid/page"


async def test_header_text_reaches_the_model_without_control_characters() -> None:
    """The reason phrase and the content type come from the server: their control characters are removed."""
    def respond(handler: Any) -> None:
        handler.send_response(404, "Not\x1b[2J Found")
        handler.send_header("content-type", "text/plain\x1b]0;T\x07")
        handler.send_header("content-length", "2")
        handler.end_headers()
        handler.wfile.write(b"no")

    with serving({"/": respond}) as (port, _asked):
        got = await fetch(f"http://127.0.0.1:{port}/", WebAccess(("127.0.0.1",)))
    assert isinstance(got, Fetched) and got.status == 404
    assert "\x1b" not in got.reason and "\x07" not in got.content_type + got.reason


async def test_a_response_larger_than_the_cap_is_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    from crow_cli.tools import web

    monkeypatch.setattr(web, "MAX_BYTES", 1000)
    with serving({"/big": answer(b"x" * 5000, "text/plain")}) as (port, _):
        got = await fetch(f"http://127.0.0.1:{port}/big", WebAccess(("127.0.0.1",)))
    assert isinstance(got, Fetched) and got.truncated and got.body == b"x" * 1000


async def test_the_request_keeps_the_host_name_and_an_international_name_goes_as_its_dns_form() -> None:
    """The connection goes to the address checked; the server still reads the name the URL gave."""
    hosts: list[str] = []

    def respond(handler: Any) -> None:
        hosts.append(handler.headers["Host"])
        answer(b"ok", "text/plain")(handler)

    with serving({"/": respond}) as (port, _):
        got = await fetch(f"http://LocalHost:{port}/", WebAccess(("localhost",)))
    assert isinstance(got, Fetched) and got.body == b"ok"
    assert hosts == [f"localhost:{port}"]
    assert check_url("https://bücher.example/x") == ("https", "xn--bcher-kva.example", 443)
