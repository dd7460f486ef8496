"""Reaching the web for `web_fetch` and `web_search`: which addresses may be reached, the request pinned to
the address checked, and what comes back turned into text.

Every hop (the URL asked for and each redirect) is checked the same way before anything is sent, so neither
the model nor a redirect reaches a private address (the cloud metadata address among them) unless `[web]
allow_hosts` names it: `fetch` tells the checks and the redirects followed, `page_text` what the model reads.
TLS uses crow's one context (`wire.tls`, SSL_CERT_FILE and SSL_CERT_DIR).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import re
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit, urlunsplit

from ..errors import ToolError
from ..text import strip_controls
from .context import WebAccess

if TYPE_CHECKING:
    import httpx

__all__ = ["MAX_BYTES", "MAX_REDIRECTS", "Fetched", "Redirected", "WebAccess", "address_problem", "check_url",
           "fetch", "host_allowed", "page_text"]

MAX_BYTES = 5 * 1024 * 1024
"""Bytes of a response body read at most (after decompression); the rest is not downloaded."""
MAX_REDIRECTS = 10
"""Redirects followed at most within one fetch."""
TIMEOUT_S = 30.0
"""Seconds to connect, and between two reads of a response."""
MAX_PDF_PAGES = 200
"""Pages of a PDF whose text is extracted at most."""
_USER_AGENT = "crow-cli (web_fetch; +https://github.com/crow-cli)"
_ACCEPT = "text/html, application/xhtml+xml, text/plain;q=0.9, application/pdf;q=0.8, */*;q=0.1"
_DROPPED = ("script", "style", "noscript", "template", "nav", "aside", "form", "button", "iframe", "svg",
            "canvas", "dialog", "select", "object", "embed")
"""HTML elements whose content is no text of the page: code, styling, navigation, controls."""
_DROPPED_ROLES = ("navigation", "banner", "contentinfo", "search")
_TEXT_TYPES = ("application/json", "application/xml", "application/javascript", "application/x-yaml",
               "application/yaml", "application/toml", "application/x-sh", "application/sql")


@dataclass(frozen=True, slots=True)
class Fetched:
    """A response that was read: the URL it came from after redirects, its status and its body."""

    url: str
    status: int
    reason: str
    content_type: str
    """The `Content-Type` header's media type, lowercase, without parameters ("" when none was sent)."""
    charset: str | None
    body: bytes
    truncated: bool
    """More than `MAX_BYTES` came: `body` is the first `MAX_BYTES`."""


@dataclass(frozen=True, slots=True)
class Redirected:
    """The fetch stopped at a redirect to a host it may not follow on its own (`location`)."""

    url: str
    location: str


class _Unresolved(ToolError):
    """A host DNS has no answer for (now): an error of the fetch, not a refusal of the address."""


def _bare(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


def host_allowed(host: str, allow_hosts: tuple[str, ...]) -> bool:
    """Whether `allow_hosts` names `host`: the same name or address (case, brackets and a trailing dot
    ignored), `*.SUFFIX` for every name under SUFFIX (not SUFFIX itself), or a network (`192.168.1.0/24`,
    `fd00::/64`) for every address in it."""
    host = _bare(host)
    for entry in allow_hosts:
        entry = _bare(entry)
        if entry == host or (entry.startswith("*.") and host.endswith(entry[1:])):
            return True
        if "/" in entry and _in_network(host, entry):
            return True
    return False


def _in_network(host: str, network: str) -> bool:
    try:
        return ipaddress.ip_address(host) in ipaddress.ip_network(network, strict=False)
    except ValueError:  # a name, not an address; or not a network (the config refuses those)
        return False


def check_url(url: str) -> tuple[str, str, int]:
    """The scheme, host (lowercase, no brackets) and port of an http(s) URL crow may fetch.

    Raises:
        ToolError: not http(s), no host, a port that is no number, credentials in it.
    """
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise ToolError(f"{url!r} is not a URL crow can fetch ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise ToolError(f"only http:// and https:// URLs are fetched; got {strip_controls(url)[:200]!r}")
    host = _bare(parts.hostname or "")
    if not host or any(c.isspace() or not c.isprintable() for c in host):
        raise ToolError(f"{strip_controls(url)[:200]!r} has no host name")
    if parts.username is not None or parts.password is not None:
        raise ToolError("a URL with a user name or password in it is not fetched (credentials stay out of URLs)")
    if not host.isascii():  # an international name: its DNS form (xn--…), as the Host header carries it
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            raise ToolError(f"{strip_controls(url)[:200]!r} has a host name that is not valid") from None
    return scheme, host, port or (443 if scheme == "https" else 80)


def address_problem(address: str) -> str | None:
    """What keeps crow from connecting to `address` on its own ("a loopback address" …), or None when it
    is public. An IPv4 address inside IPv6 (`::ffff:a.b.c.d`, `64:ff9b::a.b.c.d` is public only when its
    IPv4 part is) counts as that IPv4 address."""
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        elif ip in ipaddress.ip_network("64:ff9b::/96"):  # NAT64: the IPv4 address in its last 32 bits
            ip = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address (the cloud metadata service lives there)"
    if ip.is_unspecified:
        return "the unspecified address"
    if ip.is_multicast:
        return "a multicast address"
    if ip.is_private:
        return "a private address"
    if not ip.is_global:
        return "an address that is not public"
    return None


async def _addresses(host: str, port: int) -> list[str]:
    """The addresses `host` stands for: itself when it is one, else DNS's answers (IPv4 and IPv6), in order."""
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise _Unresolved(f"cannot resolve the host {host!r}: {getattr(exc, 'strerror', None) or exc}") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def _checked(host: str, port: int, access: WebAccess) -> list[str]:
    """`host`'s addresses, each one crow may connect to (all of them when `allow_hosts` names the host).

    Raises:
        ToolError: one is not public and the host is not allowed (the message says how to allow it).
    """
    addresses = await _addresses(host, port)
    if not addresses:
        raise ToolError(f"the host {host!r} has no address")
    if host_allowed(host, access.allow_hosts):
        return addresses
    for address in addresses:
        problem = address_problem(address)
        if problem is not None:
            shown = host if host == address else f"{host} ({address})"
            raise ToolError(f"{shown} is {problem}: web_fetch does not reach it unless [web] allow_hosts in crow's "
                            "config names the host. Do not retry it")
    return addresses


def _pinned(url: str, host: str, address: str) -> tuple[str, str]:
    """`url` with its host replaced by `address`, and the `Host` header value of the original (`host`, as
    `check_url` gave it, with the URL's port if it names one)."""
    parts = urlsplit(url)
    named = f"[{host}]" if ":" in host else host
    netloc = f"{named}:{parts.port}" if parts.port else named
    host = f"[{address}]" if ":" in address else address
    pinned = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, pinned, parts.path or "/", parts.query, "")), netloc


async def _get(url: str, host: str, addresses: list[str], *, headers: dict[str, str] | None = None
               ) -> tuple[httpx.Response, bytes, bool]:
    """GET `url` (not following redirects) at the first of `addresses` that answers, or through the proxy
    the environment names; returns the response, its body (at most `MAX_BYTES`) and whether it was cut."""
    import httpx

    from ..wire.proxy import proxy_for, through  # urllib.request: only once a page is fetched
    from ..wire.tls import ssl_context

    proxy = proxy_for(url)
    wanted = {"User-Agent": _USER_AGENT, "Accept": _ACCEPT, **(headers or {})}
    targets = [(url, {}, {})] if proxy is not None else [
        (pinned, {"Host": netloc}, {"sni_hostname": host} if url.lower().startswith("https:") else {})
        for pinned, netloc in (_pinned(url, host, a) for a in addresses)]
    timeout = httpx.Timeout(TIMEOUT_S)
    async with httpx.AsyncClient(proxy=proxy, verify=ssl_context(), trust_env=False, timeout=timeout,
                                 follow_redirects=False) as client:
        for number, (target, host_header, extensions) in enumerate(targets, 1):
            try:
                request = client.build_request("GET", target, headers={**wanted, **host_header},
                                               extensions=extensions)
                response = await client.send(request, stream=True)
                try:
                    body, truncated = bytearray(), False
                    if not response.is_redirect:
                        async for piece in response.aiter_bytes():
                            body += piece
                            if len(body) > MAX_BYTES:
                                del body[MAX_BYTES:]
                                truncated = True
                                break
                finally:
                    await response.aclose()
                return response, bytes(body), truncated
            except httpx.ConnectError as exc:
                if number < len(targets):
                    continue  # the next address of the host
                raise ToolError(f"cannot connect to {host}{through(proxy)}: {exc}") from None
            except httpx.TimeoutException:
                raise ToolError(f"{host} did not answer within {TIMEOUT_S:g} s{through(proxy)}") from None
            except httpx.HTTPError as exc:
                raise ToolError(f"fetching from {host} failed{through(proxy)}: {exc}") from None
    raise AssertionError("unreachable: no address to connect to")


async def fetch(url: str, access: WebAccess, *, headers: dict[str, str] | None = None) -> Fetched | Redirected:
    """GET `url` under the checks below (every hop), following redirects to the same host or to hosts
    `access.allow_hosts` names.

    1. http or https only, with a host name (no user:password@ part: credentials in a URL are not sent);
    2. the host's addresses (the literal, or every answer of DNS) are each public: loopback, private,
       link-local (the cloud metadata address 169.254.169.254 among them), shared, multicast, reserved and
       unspecified addresses are refused, an IPv4 address inside IPv6 (`::ffff:127.0.0.1`) as the IPv4 one,
       unless `[web] allow_hosts` names the host (`WebAccess.allow_hosts`: `localhost`, `10.0.0.7`,
       `*.corp.example`);
    3. the connection goes to the address that was checked: the URL's host is put back in the `Host` header
       and in TLS's SNI and certificate check, so a second DNS answer (DNS rebinding) cannot point it
       elsewhere. Through a proxy (HTTPS_PROXY …, read by `wire.proxy`) the proxy resolves the name: crow
       checks its own answer but cannot pin the proxy's.

    A redirect to the same host is followed (up to `MAX_REDIRECTS`); one to a host `allow_hosts` names too;
    one to any other host ends the fetch with a `Redirected` (the model fetches that URL with a new call, which
    is approved as any other).

    Returns:
        The response read (any status), or `Redirected` at a redirect to another host.

    Raises:
        ToolError: a URL or address refused, a host that cannot be resolved or reached, a timeout, more
            than `MAX_REDIRECTS` redirects; one line each.
    """
    import httpx

    try:
        return await _follow(url, access, headers)
    except httpx.InvalidURL as exc:  # a Location httpx cannot send to (`javascript:…` on a path): one line
        raise ToolError(f"a URL of this fetch is not one crow can fetch ({strip_controls(str(exc))[:200]})") from None


async def _follow(url: str, access: WebAccess, headers: dict[str, str] | None) -> Fetched | Redirected:
    """`fetch`, hop by hop."""
    _, first, _ = check_url(url)
    for _hop in range(MAX_REDIRECTS + 1):
        _, host, port = check_url(url)
        addresses = await _checked(host, port, access)
        response, body, truncated = await _get(url, host, addresses, headers=headers)
        location = response.headers.get("location")
        if response.is_redirect and location:
            target = urljoin(url, location.strip())
            _, next_host, _ = check_url(target)
            if next_host != first and not host_allowed(next_host, access.allow_hosts):
                next_port = check_url(target)[2]
                # a private target is refused, not offered; one DNS cannot resolve now is the model's new call's
                with contextlib.suppress(_Unresolved):
                    await _checked(next_host, next_port, access)
                return Redirected(url, target)
            url = target
            continue
        media, _, params = response.headers.get("content-type", "").partition(";")
        charset = re.search(r"charset\s*=\s*\"?([\w.:-]+)", params, re.IGNORECASE)
        return Fetched(url, response.status_code, strip_controls(response.reason_phrase),
                       strip_controls(media.strip().lower()), charset.group(1) if charset else None, body, truncated)
    raise ToolError(f"more than {MAX_REDIRECTS} redirects; stopped at {url}")


def page_text(fetched: Fetched) -> tuple[str, str]:
    """What the model reads of a response: (the kind shown, "HTML" / "PDF" / "text"; the text), HTML as
    Markdown without its scripts, styles and navigation, control characters removed.

    HTML becomes Markdown (markdownify over BeautifulSoup, scripts, styles, navigation and forms dropped), a
    PDF its text (pypdf), text stays text; anything else is refused in one line. Both libraries are imported
    only when a page needs them.

    Raises:
        ToolError: binary content (an image, an archive …), or a PDF whose text cannot be read.
    """
    media, body = fetched.content_type, fetched.body
    head = body[:1024].lstrip().lower()
    if media in ("text/html", "application/xhtml+xml") or (
            not media and (head.startswith(b"<!doctype html") or head.startswith(b"<html"))):
        return "HTML", strip_controls(html_to_markdown(body, fetched.charset, base=fetched.url))
    if media == "application/pdf" or body.startswith(b"%PDF-"):
        return "PDF", strip_controls(pdf_text(body))
    if media.startswith("text/") or media in _TEXT_TYPES or media.endswith(("+json", "+xml")) or (
            not media and b"\0" not in body[:4096]):
        return "text", strip_controls(_decode(body, fetched.charset))
    raise ToolError(f"{fetched.url} is {media or 'binary content'} ({len(body)} bytes), not text: web_fetch reads "
                    "HTML, text and PDF only")


def _decode(body: bytes, charset: str | None) -> str:
    try:
        return body.decode(charset or "utf-8", "replace")
    except LookupError:  # an encoding Python does not know
        return body.decode("utf-8", "replace")


def html_to_markdown(body: bytes, charset: str | None = None, *, base: str | None = None) -> str:
    """An HTML document as Markdown: its title as a heading, scripts, styles, navigation, forms and
    hidden elements dropped, runs of blank lines made one; links made absolute against `base` (the page's URL)."""
    from bs4 import BeautifulSoup
    from markdownify import MarkdownConverter

    soup = BeautifulSoup(body, "html.parser", from_encoding=charset)
    title = soup.title.get_text(" ", strip=True) if soup.title is not None else ""
    for element in soup.find_all(_DROPPED):
        element.decompose()
    for element in soup.find_all(["head", "header", "footer"]):
        if element.name == "head" or element.find_parent(["article", "main"]) is None:
            element.decompose()  # the site's banner and footer; an article's own header stays
    for element in soup.find_all(True):
        if not element.decomposed and (element.has_attr("hidden") or element.get("role") in _DROPPED_ROLES):
            element.decompose()
    if base is not None:
        for link in soup.find_all(["a", "img"]):
            for name in ("href", "src"):
                value = link.get(name)
                if isinstance(value, str):
                    link[name] = urljoin(base, value)
    text = MarkdownConverter(heading_style="ATX", bullets="-").convert_soup(soup)
    text = re.sub(r"[ \t]+\n", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text).strip()
    return f"# {title}\n\n{text}" if title and title not in text[:500] else text


def pdf_text(body: bytes) -> str:
    """The text of a PDF's pages (at most `MAX_PDF_PAGES`), a blank line between pages.

    Raises:
        ToolError: the PDF cannot be read (damaged, encrypted).
    """
    import io

    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(body))
        pages: list[Any] = list(reader.pages)
        texts = [page.extract_text() or "" for page in pages[:MAX_PDF_PAGES]]
    except (PyPdfError, ValueError, KeyError, TypeError, OSError) as exc:
        raise ToolError(f"the PDF cannot be read: {exc}") from None
    more = f"\n\n[{len(pages) - MAX_PDF_PAGES} more pages not read]" if len(pages) > MAX_PDF_PAGES else ""
    return "\n\n".join(t.strip() for t in texts if t.strip()) + more
