"""Text that can always be sent and printed: UTF-16 surrogates paired or replaced.

Python strings can hold lone surrogates: JSON `\\ud83c` escapes cut apart by a gateway, or bytes
that did not decode (file names via surrogateescape). Neither can be encoded as UTF-8, so neither may
reach a request body, a terminal or a session file.
"""

from __future__ import annotations

import re

__all__ = ["SECRET_MASK", "clean_text", "has_surrogates", "mask_secrets", "public_url", "strip_controls", "url_secrets"]

_SURROGATE = re.compile("[\ud800-\udfff]")
# C0 controls but tab and newline, DEL, C1 controls: what can move a cursor, retitle or clear a terminal
_SECRET_PARAM = re.compile(r"key|token|secret|sig|auth|pass|code", re.IGNORECASE)
_MIN_URL_SECRET = 6
_CONTROLS = re.compile("\r(?!\n)|[\x00-\x08\x0b-\x1f\x7f-\x9f]")
SECRET_MASK = "[secret hidden]"
MIN_SECRET_CHARS = 6
"""Shorter values (dummy keys such as "x") would match anywhere: they are not masked in text."""


def has_surrogates(text: str) -> bool:
    """True when `text` holds any UTF-16 surrogate code point (C-speed scan)."""
    return _SURROGATE.search(text) is not None


def clean_text(text: str) -> str:
    """Re-pair surrogate halves into real code points; a lone half becomes U+FFFD. Linear."""
    if not has_surrogates(text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def strip_controls(text: str) -> str:
    """`text` without terminal control characters (escape sequences lose their ESC), for display.

    Model output is untrusted: `ESC[2J` would clear the screen and `ESC]0;…BEL` retitle the window.
    A `\\r\\n` line end keeps its newline.
    """
    return _CONTROLS.sub("", text.replace("\r\n", "\n")) if _CONTROLS.search(text) else text


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
                 if _SECRET_PARAM.search(name)]
        found.append(parts.password or "")
    except ValueError:
        return ()
    return tuple(dict.fromkeys(v for v in found if len(v) >= _MIN_URL_SECRET))


def mask_secrets(text: str, secrets: tuple[str, ...]) -> str:
    """`text` with each of `secrets` (API keys; longest first, those under 6 characters skipped)
    replaced by `[secret hidden]`: tool output and the instruction files crow reads on its own."""
    for value in sorted(secrets, key=len, reverse=True):
        if len(value) >= MIN_SECRET_CHARS:
            text = text.replace(value, SECRET_MASK)
    return text
