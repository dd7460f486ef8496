"""Text that can always be sent and printed: UTF-16 surrogates paired or replaced.

Python strings can hold lone surrogates: JSON `\\ud83c` escapes cut apart by a gateway, or bytes
that did not decode (file names via surrogateescape). Neither can be encoded as UTF-8, so neither may
reach a request body, a terminal or a session file.
"""

from __future__ import annotations

import codecs
import html
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["BOMS", "SECRET_MASK", "SECRET_NAME", "clean_json", "clean_text", "decode_text", "has_surrogates",
           "header_secrets", "is_proxy_variable", "is_secret_name", "looks_like_html", "mask_secrets",
           "proxy_secrets", "public_url", "short_text", "strip_controls", "truncate_output", "url_secrets",
           "visible", "without_userinfo"]

_SURROGATE = re.compile("[\ud800-\udfff]")
# C0 controls but tab and newline, DEL, C1 controls: what can move a cursor, retitle or clear a terminal
SECRET_NAME = re.compile(r"auth|key|token|secret|cookie|session|pass|credential|sig|code", re.IGNORECASE)
"""What the name of a header, a query parameter or a cookie holding a credential contains (`Authorization`,
`api-key`, `X-Api-Key`, `Cookie`, `X-Api-Pass`, `Password`, `X-Credential`, `X-Amz-Signature`, `sig` …):
the one list errors, records, the config and tool output go by."""
_MIN_URL_SECRET = 6
_CONTROLS = re.compile("\r(?!\n)|[\x00-\x08\x0b-\x1f\x7f-\x9f]")
SECRET_MASK = "[REDACTED]"
"""What replaces a secret, wherever it would show: tool output, errors, records, instruction files."""
MIN_SECRET_CHARS = 6
"""Shorter values (dummy keys such as "x") would match anywhere: they are not masked in text."""

BOMS = ((codecs.BOM_UTF32_LE, "utf-32", "UTF-32"), (codecs.BOM_UTF32_BE, "utf-32", "UTF-32"),
        (codecs.BOM_UTF16_LE, "utf-16", "UTF-16"), (codecs.BOM_UTF16_BE, "utf-16", "UTF-16"))
"""(byte order mark, codec, name) of the UTF-16/32 encodings a text file may start with (UTF-32 first:
its LE mark begins with UTF-16's). Read by the file tools and the instructions loader."""


def decode_text(data: bytes) -> str:
    """A text file's bytes decoded by their byte-order mark (UTF-32, UTF-16, UTF-8: the mark dropped), else
    as UTF-8; bad bytes become U+FFFD. Used where a file is taken whole (instructions, attachments)."""
    for bom, codec, _name in BOMS:
        if data.startswith(bom):
            return data.decode(codec, "replace")
    return data.decode("utf-8-sig", "replace")


def has_surrogates(text: str) -> bool:
    """True when `text` holds any UTF-16 surrogate code point (C-speed scan; ASCII text, most of every
    stream, is known to hold none without one)."""
    return not text.isascii() and _SURROGATE.search(text) is not None


def clean_text(text: str) -> str:
    """Re-pair surrogate halves into real code points; a lone half becomes U+FFFD. Linear."""
    if not has_surrogates(text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def clean_json(value: Any) -> Any:
    """JSON data (what a server attached: an id, a name, a reasoning block, an extension) with each string and
    key cleaned by `clean_text`, so it can be stored and sent; values without a surrogate are returned as they
    are. Data nested deeper than Python's recursion goes is returned unchanged."""
    try:
        return _cleaned(value)
    except RecursionError:
        return value


def _cleaned(value: Any) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [_cleaned(v) for v in value]
    if isinstance(value, dict):
        return {clean_text(k) if isinstance(k, str) else k: _cleaned(v) for k, v in value.items()}
    return value


def strip_controls(text: str) -> str:
    """`text` without terminal control characters (escape sequences lose their ESC), for display.

    Model output is untrusted: `ESC[2J` would clear the screen and `ESC]0;…BEL` retitle the window.
    A `\\r\\n` line end keeps its newline.
    """
    return _CONTROLS.sub("", text.replace("\r\n", "\n")) if _CONTROLS.search(text) else text


_INVISIBLE = re.compile("[\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")


_UNSEEN = re.compile(f"{_CONTROLS.pattern}|{_INVISIBLE.pattern}")


def visible(text: str) -> str:
    """`text` for a person to judge (an approval question, the activity line): terminal controls (those
    `strip_controls` drops), bidi and zero-width characters shown as `\\uXXXX` escapes, so what is approved
    reads as what runs: ESC or a backspace inside a command is a different command, U+202E would reorder
    what is read (`rm -rf` shown as `fr- mr`), U+200B hide inside a word. Tab and newline stay."""
    return _UNSEEN.sub(lambda m: f"\\u{ord(m.group()):04x}", text) if _UNSEEN.search(text) else text


def public_url(url: str) -> str:
    """`url` without credentials: no `user:password@`, no query string (keys hide in both)."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return url.split("?", 1)[0].rsplit("@", 1)[-1]
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def url_secrets(url: str) -> tuple[str, ...]:
    """The credentials `url` carries: the values of key-like query parameters (`key`, `api-key`, `token`,
    `sig` …) and a `user:password@` password, each at least 6 characters long (shorter ones, such as
    `api-version=1`, are no secret and would match anywhere)."""
    from urllib.parse import parse_qsl, urlsplit

    try:
        parts = urlsplit(url)
        found = [value for name, value in parse_qsl(parts.query, keep_blank_values=True)
                 if SECRET_NAME.search(name)]
        found.append(parts.password or "")
    except ValueError:
        return ()
    return tuple(dict.fromkeys(v for v in found if len(v) >= _MIN_URL_SECRET))


_PROXY_VARIABLES = frozenset({"http_proxy", "https_proxy", "all_proxy", "ftp_proxy", "rsync_proxy", "socks_proxy"})


def is_proxy_variable(name: str) -> bool:
    """Whether the environment variable `name` names a proxy (`HTTPS_PROXY`, `http_proxy`, `ALL_PROXY` …,
    any case): its value may carry `user:password@`."""
    return name.lower() in _PROXY_VARIABLES


def without_userinfo(proxy: str) -> str:
    """A proxy variable's value without its `user:password@` (`http://u:p@proxy:3128` → `http://proxy:3128`;
    a value without a scheme too: `u:p@proxy:3128` → `proxy:3128`); anything else kept as it is."""
    scheme, sep, rest = proxy.partition("://")
    if not sep:
        scheme, rest = "", proxy
    host, slash, path = rest.partition("/")
    if "@" not in host:
        return proxy
    host = host.rsplit("@", 1)[1]
    return f"{scheme}{sep}{host}{slash}{path}"


def proxy_secrets(env: Mapping[str, str]) -> tuple[str, ...]:
    """The credentials of the proxy variables in `env` (`is_proxy_variable`): each `user:password@`'s password,
    or its user when it has no password (a token given as the user name), and the whole `user:password`, those
    of at least `MIN_SECRET_CHARS` characters."""
    found: list[str] = []
    for name, value in env.items():
        if not is_proxy_variable(name) or not value or value == without_userinfo(value):
            continue
        rest = value.partition("://")[2] or value
        userinfo = rest.partition("/")[0].rsplit("@", 1)[0]
        user, colon, password = userinfo.partition(":")
        found += [userinfo, password] if colon and password else [user]
    return tuple(dict.fromkeys(v for v in found if len(v) >= MIN_SECRET_CHARS))


def is_secret_name(name: str) -> bool:
    """Whether a header (or parameter) named `name` carries a credential (`SECRET_NAME`)."""
    return SECRET_NAME.search(name) is not None


def header_secrets(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> tuple[str, ...]:
    """The credentials in `headers`: each credential header's value, the token of `Bearer TOKEN` (any
    scheme), and each value of a `Cookie` (`sid=VALUE; theme=x` → `VALUE` too), those of at least
    `MIN_SECRET_CHARS` characters."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    found: list[str] = []
    for name, value in items:
        if not is_secret_name(str(name)) or not value:
            continue
        value = str(value).strip()
        found.append(value)
        scheme, _, token = value.partition(" ")
        if token and "=" not in scheme:
            found.append(token.strip())
        for part in value.split(";"):  # cookies: NAME=VALUE pairs, each value a secret of its own
            found.append(part.partition("=")[2].strip())
    return tuple(dict.fromkeys(v for v in found if len(v) >= MIN_SECRET_CHARS))


def mask_secrets(text: str, secrets: Iterable[str | None]) -> str:
    """`text` with each of `secrets` replaced by `SECRET_MASK` (`[REDACTED]`): THE redaction of
    crow, for tool output, instruction files, error messages and records. Longest first; values under
    `MIN_SECRET_CHARS` are skipped (a dummy key such as "x" would match anywhere); a secret whose start
    ends a text cut short with `…` is masked too (the cut must not leave its first characters)."""
    values = sorted({v for v in secrets if v and len(v) >= MIN_SECRET_CHARS}, key=len, reverse=True)
    for value in values:
        text = text.replace(value, SECRET_MASK)
    if text.endswith("…"):
        body = text[:-1]
        for value in values:
            for size in range(min(len(value) - 1, len(body)), 2, -1):
                if body.endswith(value[:size]):
                    return body[:-size] + SECRET_MASK + "…"
    return text


def truncate_output(text: str, limit: int) -> str:
    """Cap `text` at `limit` characters, with a marker telling the model it was cut (the marker comes on top:
    at most 80 characters). The one marker a model sees for any cut output: a tool's, or a tool result cut to
    fit a server's string limit (`wire.rules.messages`)."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[output truncated: {len(text) - limit} of {len(text)} characters not shown]"


def short_text(text: str, limit: int = 200) -> str:
    """`text` on one line of at most `limit` characters; an HTML page is reduced to its title (or its text)."""
    if looks_like_html(text):
        title = re.search(r"<(title|h1)[^>]*>(.*?)</\1>", text, re.IGNORECASE | re.DOTALL)
        text = title.group(2) if title else re.sub(r"<(script|style)\b.*?</\1>", " ", text,
                                                   flags=re.IGNORECASE | re.DOTALL)
        text = html.unescape(re.sub(r"<[^>]+>", " ", text))
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def looks_like_html(text: str) -> bool:
    """Whether `text` holds HTML markup (a proxy's error page, a login page)."""
    return re.search(r"<(!doctype|html|head|body|title|h1)\b", text, re.IGNORECASE) is not None
