"""Text that can always be sent and printed: UTF-16 surrogates paired or replaced.

Python strings can hold lone surrogates: JSON `\\ud83c` escapes cut apart by a gateway, or bytes
that did not decode (file names via surrogateescape). Neither can be encoded as UTF-8, so neither may
reach a request body, a terminal or a session file.
"""

from __future__ import annotations

import re

__all__ = ["clean_text", "has_surrogates"]

_SURROGATE = re.compile("[\ud800-\udfff]")


def has_surrogates(text: str) -> bool:
    """True when `text` holds any UTF-16 surrogate code point (C-speed scan)."""
    return _SURROGATE.search(text) is not None


def clean_text(text: str) -> str:
    """Re-pair surrogate halves into real code points; a lone half becomes U+FFFD. Linear."""
    if not has_surrogates(text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
